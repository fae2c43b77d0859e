"""`keras-dml serve` against hostile and unusual requests (issue 67, sections 1 and 3):
no request takes the service down or hurts another, every parameter is bounded, valid
non-ASCII input is served, error bodies keep the internals out and carry a request id,
and the service is safe beside a browser (Host allow-list, cross-site refusals,
headers, the schema)."""

import asyncio
import io
import json
import logging

import numpy as np
import pytest

from serve_fixtures import index, make_run, write_png

pytestmark = pytest.mark.requires("fastapi", "multipart", "pymilvus", "milvus_lite")

#: Labels with an accent and in CJK, besides plain ASCII.
COLOURS = {"cat": (200, 40, 40), "été": (40, 200, 40), "猫": (40, 40, 200)}
MAX_BYTES = 20_000  # the upload limit of the app under test


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    """(run, photos, uri): 3 photos of each of 3 labels, two of them non-ASCII."""
    root = tmp_path_factory.mktemp("serve_requests")
    for number, (name, colour) in enumerate(COLOURS.items()):
        for i in range(3):
            write_png(root / "photos" / name / f"{i}.png", colour, 10 * number + i)
    run = make_run(root / "run")
    index(run, root / "photos", root / "catalogue.db")
    return run, root / "photos", root / "catalogue.db"


@pytest.fixture(scope="module")
def app(catalogue):
    from keras_dml.serve import create_app
    from keras_dml.serve.uploads import ImageLimits

    run, _, uri = catalogue
    return create_app(str(run), str(uri), max_wait_ms=20, limits=ImageLimits(
        max_bytes=MAX_BYTES, max_side=1000, max_pixels=200_000))


@pytest.fixture(scope="module")
def client(app):
    from fastapi.testclient import TestClient

    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def embed_calls(app):
    """The number of images each call of the model's embedding got, while the test runs."""
    service, calls = app.state.service, []
    embed = service.embedder.embed
    service.embedder.embed = lambda images: calls.append(len(images)) or embed(images)
    yield calls
    service.embedder.embed = embed


def _photo(photos, name="cat", i=0):
    return (photos / name / f"{i}.png").read_bytes()


def _vector(app, photos):
    return app.state.service.embedder.embed([_photo(photos)])[0].tolist()


def _upload(client, data, **params):
    return client.post("/search", files={"image": ("photo", data)}, params=params)


def _refused(answer, status, words):
    """`answer` is a one-line JSON refusal with `status`, naming `words`, and its id."""
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert words in body["detail"] and "\n" not in body["detail"], body
    assert body["request_id"] == answer.headers["x-request-id"]
    return body


def _gif(frames, width, height):
    from PIL import Image

    images = [Image.new("RGB", (width, height), (10 * i, 0, 0)) for i in range(frames)]
    data = io.BytesIO()
    images[0].save(data, "GIF", save_all=True, append_images=images[1:])
    return data.getvalue()


# -- 1. multi-frame images ----------------------------------------------------------------


def test_an_animated_gif_counts_the_pixels_of_every_frame_before_decoding(client,
                                                                          embed_calls):
    answer = _upload(client, _gif(6, 300, 200))  # each frame 60,000 pixels, 360,000 in all
    _refused(answer, 413, "animated GIF of 6 frames of 300x200")
    assert embed_calls == []  # refused before the decoder ran
    assert _upload(client, _gif(2, 300, 200)).status_code == 200  # 120,000: within


def test_an_animated_webp_is_refused_as_what_it_is(client):
    from PIL import Image, features

    if not features.check("webp"):
        pytest.skip("this Pillow writes no WebP")
    frames = [Image.new("RGB", (32, 32), (40 * i, 0, 0)) for i in range(3)]
    data = io.BytesIO()
    frames[0].save(data, "WEBP", save_all=True, append_images=frames[1:])
    _refused(_upload(client, data.getvalue()), 415, "animated WebP (3 frames)")


# -- 1. the upload limit counts the bytes read --------------------------------------------


async def _asgi_post(app, headers, chunks, query=b""):
    """POST /search straight through ASGI with the body in `chunks` and the headers as
    given (a lying Content-Length among them): (status, JSON body, chunks read)."""
    read = 0

    async def receive():
        nonlocal read
        if read < len(chunks):
            read += 1
            return {"type": "http.request", "body": chunks[read - 1],
                    "more_body": read < len(chunks)}
        return {"type": "http.disconnect"}

    sent = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/search", "raw_path": b"/search",
             "query_string": query, "root_path": "", "client": ("127.0.0.1", 50000),
             "server": ("127.0.0.1", 8000),
             "headers": [(k.encode(), v.encode()) for k, v in
                         [("host", "127.0.0.1:8000"), *headers.items()]]}
    await app(scope, receive, send)
    body = b"".join(message.get("body", b"") for message in sent[1:])
    return sent[0]["status"], json.loads(body), read


@pytest.mark.parametrize("kind", ["application/json", "multipart/form-data; boundary=b"])
def test_the_upload_limit_stops_reading_at_the_limit_whatever_content_length_says(
        app, kind):
    chunk = b" " * 10_000  # JSON whitespace; inside a multipart part, file bytes
    if kind == "application/json":
        first, last = b'{"vector": [1, 2, 3, 4, 5, 6], "pad": "', b'"}'
    else:
        first = (b'--b\r\nContent-Disposition: form-data; name="image"; filename="a.png"\r\n'
                 b"Content-Type: image/png\r\n\r\n")
        last = b"\r\n--b--\r\n"
    chunks = [first, *[chunk] * 60, last]  # 600 kB
    status, body, read = asyncio.run(_asgi_post(
        app, {"content-type": kind, "content-length": "2"}, chunks))
    assert status == 413, body
    assert "limit" in body["detail"]
    assert read < 12  # the 86 kB limit and one chunk past it, not the 600 kB


# -- 1. one bad request fails alone -------------------------------------------------------


@pytest.mark.parametrize("vector, words", [
    (None, "vector must be a list of 6 numbers"),
    (["1", "2", "3", "4", "5", "6"], "no strings"),
    ([True, False, True, False, True, False], "no strings, booleans"),
    ([1, 2, 3, 4, 5, None], "no strings, booleans or nulls"),
    ([1, 2, 3, 4, 5, 1e39], "finite"),
    ([1, 2, 3, 4, 5, 10 ** 400], "finite"),
    ([], "vector must be a list of 6 numbers, got 0"),
])
def test_a_bad_vector_is_refused_before_it_joins_a_batch(client, vector, words):
    _refused(client.post("/search", json={"vector": vector}), 400, words)


def test_a_failing_batch_fails_only_its_offender(app, catalogue):
    from keras_dml.serve.service import Query

    _, photos, _ = catalogue
    good = np.asarray(_vector(app, photos), np.float32)
    queries = [Query(vector=good, k=2), Query(vector=np.ones(3, np.float32), k=2),
               Query(vector=good, k=2)]
    results = app.state.service._answer(queries)
    assert isinstance(results[1], Exception)
    for result in (results[0], results[2]):
        assert not isinstance(result, Exception), result
        assert result[0][0] == "cat/0.png"


def test_concurrent_requests_with_one_bad_one_all_answer_on_their_own(app, catalogue):
    _, photos, _ = catalogue
    vector = _vector(app, photos)
    bodies = [json.dumps({"vector": v}).encode() for v in [vector] * 6 + [None] + [vector] * 6]
    service = app.state.service
    service.batcher.sizes.clear()

    async def searches():
        return await asyncio.gather(*[_asgi_post(app, {
            "content-type": "application/json", "content-length": str(len(body))}, [body],
            b"k=1") for body in bodies])

    answers = asyncio.run(searches())
    assert [status for status, _, _ in answers] == [200] * 6 + [400] + [200] * 6, answers
    assert {body["results"][0]["id"] for status, body, _ in answers if status == 200} == {
        "cat/0.png"}
    assert max(service.batcher.sizes) > 1, service.batcher.sizes  # they were batched


# -- 1. no 500 ----------------------------------------------------------------------------


@pytest.mark.parametrize("filter, words", [
    ('label == "\\x"', "malformed"),
    ('label == "\\N{bogus}"', "malformed"),
    ('label == "a\x00b"', "control character '\\x00'"),
    ('{"label": "a\\u0000b"}', "control character"),
    ("[" * 1500 + "]" * 1500, "bad filter"),
    ('{"label": ' + "[" * 1500 + "]" * 1500 + "}", "nested too deep"),
    ('{"label": ' + "[" * 20 + "]" * 20 + "}", "nested too deep"),
    ('{"label": ' + "[" * 5000 + "]" * 5000 + "}", "more than 4096"),
], ids=["bad-x-escape", "bad-name-escape", "nul", "json-nul", "brackets", "json-1500-deep",
        "json-20-deep", "json-5000-deep"])
def test_hostile_filters_get_a_400_naming_the_problem(client, filter, words):
    _refused(client.post("/search", params={"filter": filter},
                         json={"vector": [0.0] * 6}), 400, words)


def test_a_json_body_nested_100000_deep_is_a_400(client):
    body = "[" * 30_000 + "]" * 30_000  # within the body limit, as 100,000 deep is in 10 MB
    answer = client.post("/search", content=body, headers={"content-type": "application/json"})
    _refused(answer, 400, "nested too deep")


def _search_logged(client, caplog, level):
    """A search by vector, with the service's log lines of `level` and above caught."""
    with caplog.at_level(level, "keras_dml.serve"):
        return client.post("/search", json={"vector": [0.5] * 6})


def test_every_refusal_is_logged_under_the_id_its_body_carries(client, caplog):
    with caplog.at_level(logging.INFO, "keras_dml.serve"):
        answer = client.post("/search", params={"k": "zero"}, json={"vector": [0.5] * 6})
    body = _refused(answer, 400, "k must")
    assert [r.getMessage() for r in caplog.records] == [
        f"request {body['request_id']}: POST /search: 400: {body['detail']}"]


def test_an_unexpected_error_is_a_500_without_its_internals(app, client, caplog,
                                                            monkeypatch):
    def broken(query):  # a bug, not Milvus failing
        raise KeyError("internal secret")

    monkeypatch.setattr(app.state.service, "search", broken)
    answer = _search_logged(client, caplog, logging.ERROR)
    body = _refused(answer, 500, "internal error")
    assert "secret" not in answer.text and "KeyError" not in answer.text
    assert any(body["request_id"] in r.getMessage() and "internal secret" in (r.exc_text or "")
               for r in caplog.records)


def test_a_milvus_failure_is_a_503_without_the_uri_and_the_log_has_it(app, client, caplog,
                                                                      catalogue, monkeypatch):
    _, _, uri = catalogue

    def down(vectors, k, expression=None):
        raise RuntimeError(f"Milvus at {uri} (collection 'keras_dml'): connection refused")

    monkeypatch.setattr(app.state.service.catalogue, "search", down)
    answer = _search_logged(client, caplog, logging.WARNING)
    body = _refused(answer, 503, "retry")
    assert answer.headers["retry-after"].isdigit()
    assert str(uri) not in answer.text and "connection refused" not in answer.text
    assert any(body["request_id"] in r.getMessage() and str(uri) in r.getMessage()
               for r in caplog.records)


# -- 1. bounded cost ----------------------------------------------------------------------


@pytest.mark.parametrize("rerank, words", [
    ("dba:n=1000000", "n=1000000 is past its ceiling of 100"),
    ("k_reciprocal:k1=5000", "k1=5000 is past its ceiling"),
    ("qe:n=٣", "must be ASCII"),
    ("qe:" + "n=1," * 100, "more than 200"),
])
def test_every_rerank_option_has_a_ceiling(app, client, rerank, words):
    service, asked = app.state.service, []
    service.search = lambda query: asked.append(query)
    try:
        answer = client.post("/search", params={"rerank": rerank}, json={"vector": [1.0] * 6})
    finally:
        del service.search
    _refused(answer, 400, words)
    assert asked == []


def test_a_long_image_path_is_refused_before_the_file_system(client, monkeypatch):
    from keras_dml.serve import files

    asked = []
    monkeypatch.setattr(files, "image_file", lambda *args: asked.append(args))
    for path in ["a/" * 2500 + "x.png", "x" * 300 + ".png", "cat/0.txt"]:
        assert client.get("/images/" + path).status_code == 404
    assert asked == []


# -- 1. valid input accepted, the rest refused --------------------------------------------


@pytest.mark.parametrize("filter", ['label == "été"', '{"label": "été"}', 'label == "猫"',
                                    '{"label": {"in": ["猫", "été"]}}'])
def test_non_ascii_labels_filter_in_milvus(app, client, catalogue, filter):
    _, photos, _ = catalogue
    answer = client.post("/search", params={"filter": filter, "k": 9},
                         json={"vector": _vector(app, photos)})
    assert answer.status_code == 200, answer.text
    labels = {r["label"] for r in answer.json()["results"]}
    wanted = {"été", "猫"} if "in" in filter else {"été"} if "été" in filter else {"猫"}
    assert labels == wanted and len(answer.json()["results"]) == 3 * len(wanted)


def test_media_types_are_case_insensitive_but_exact(client, catalogue):
    _, photos, _ = catalogue
    body = (b'--b\r\nContent-Disposition: form-data; name="image"; filename="a.png"\r\n'
            b"Content-Type: image/png\r\n\r\n" + _photo(photos, "猫") + b"\r\n--b--\r\n")
    answer = client.post("/search", content=body,
                         headers={"content-type": "Multipart/Form-Data; boundary=b"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["results"][0]["label"] == "猫"
    jsonx = client.post("/search", content=b'{"vector": [1, 2, 3, 4, 5, 6]}',
                        headers={"content-type": "application/jsonx"})
    _refused(jsonx, 415, "multipart/form-data")


@pytest.mark.parametrize("k", [" 5 ", "٥", "+5", "5.0", "1e1", "0x5", "00000000005"])
def test_k_is_plain_ascii_digits(client, k):
    _refused(client.post("/search", params={"k": k}, json={"vector": [1.0] * 6}), 400, "k must")


@pytest.mark.parametrize("threshold", ["٠.5", "nan", "inf", " 0.5", "1e400", "0x1"])
def test_threshold_is_a_plain_finite_number(client, threshold):
    _refused(client.post("/search", params={"threshold": threshold},
                         json={"vector": [1.0] * 6}), 400, "threshold must be a number")


# -- 3. safe beside a browser -------------------------------------------------------------


@pytest.fixture
def local_only(app):
    """The app answering only the localhost names, as `keras-dml serve` starts it."""
    from keras_dml.serve.browsers import allowed_hosts

    app.state.allowed_hosts = allowed_hosts("127.0.0.1")
    yield app
    app.state.allowed_hosts = None


@pytest.mark.parametrize("host, status", [
    ("127.0.0.1:8000", 200), ("localhost", 200), ("LOCALHOST:80", 200), ("[::1]:8000", 200),
    ("evil.example", 400), ("evil.example:8000", 400), ("127.0.0.1.evil.example", 400),
    ("", 400)])
def test_only_the_allowed_hosts_are_answered(client, local_only, host, status):
    answer = client.get("/healthz", headers={"host": host})
    assert answer.status_code == status, answer.text
    if status == 400:
        _refused(answer, 400, "--allowed-hosts")
        assert client.get("/images/cat/0.png", headers={"host": host}).status_code == 400


def test_the_cli_answers_its_bound_host_and_the_localhost_names():
    from keras_dml.serve.browsers import allowed_hosts

    assert allowed_hosts("127.0.0.1") == ("127.0.0.1", "localhost", "::1")
    assert allowed_hosts("0.0.0.0", ["Shop.Example"]) == ("127.0.0.1", "localhost", "::1",
                                                           "shop.example")
    assert allowed_hosts("10.0.0.5") == ("10.0.0.5", "127.0.0.1", "localhost", "::1")


@pytest.mark.parametrize("headers, status", [
    ({"origin": "http://evil.example", "content-type": "text/plain"}, 403),
    ({"origin": "null"}, 403),
    ({"sec-fetch-site": "cross-site", "content-type": "application/x-www-form-urlencoded"}, 403),
    ({"sec-fetch-site": "same-site"}, 403),
    ({"origin": "http://testserver", "sec-fetch-site": "same-origin"}, 200),
    ({}, 200),  # a client that is no browser (curl)
])
def test_state_changing_routes_refuse_cross_site_requests(app, client, headers, status):
    service, reloads = app.state.service, []
    service.reload = lambda: reloads.append(1)
    try:
        answer = client.post("/admin/reload", content=b"x", headers=headers)
    finally:
        del service.reload
    assert answer.status_code == status, answer.text
    assert reloads == ([1] if status == 200 else [])
    if status == 403:
        _refused(answer, 403, "site")
        assert client.post("/search", json={"vector": [1.0] * 6},
                           headers=headers).status_code == 403


def test_headers_keep_browsers_from_sniffing_framing_and_foreign_scripts(client):
    import base64
    import hashlib
    import re

    page = client.get("/")
    policy = page.headers["content-security-policy"]
    script = re.search(r"<script>(.*?)</script>", page.text, re.S).group(1)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy and "default-src 'none'" in policy
    assert "unsafe-inline" not in policy and "connect-src 'self'" in policy
    for answer in (page, client.get("/healthz"), client.get("/images/cat/0.png"),
                   client.post("/search", json={"vector": None})):
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]


def test_only_the_catalogues_items_are_served_as_images(client, catalogue):
    _, photos, _ = catalogue
    (photos / "cat" / "notes.jpg").write_text("not an image, nor an item")
    stray = photos / "cat" / "stray.png"
    stray.write_bytes(_photo(photos))  # an image under the root, not in the catalogue
    try:
        assert client.get("/images/cat/notes.jpg").status_code == 404
        assert client.get("/images/cat/stray.png").status_code == 404
        item = client.get("/images/%E7%8C%AB/1.png")  # 猫/1.png
        assert item.status_code == 200 and item.content == _photo(photos, "猫", 1)
    finally:
        (photos / "cat" / "notes.jpg").unlink()
        stray.unlink()


def test_the_api_reference_works_offline(client):
    docs = client.get("/docs")
    assert docs.status_code == 200 and "POST /search" in docs.text
    assert "<script" not in docs.text and "http" not in docs.text.replace(
        'href="/openapi.json"', "")
    assert "style-src 'sha256-" in docs.headers["content-security-policy"]


def test_the_schema_declares_the_errors_the_token_and_the_vectors_dimension(catalogue):
    from fastapi.testclient import TestClient

    from keras_dml.serve import create_app

    run, _, uri = catalogue
    with TestClient(create_app(str(run), str(uri), token="t0ken")) as guarded:
        schema = guarded.get("/openapi.json").json()
        assert guarded.get("/stats").status_code == 401
        assert guarded.get("/stats", headers={"x-token": "t0ken"}).status_code == 200
    search = schema["paths"]["/search"]["post"]
    assert {"400", "401", "403", "411", "413", "415", "500", "503"} <= set(search["responses"])
    error = search["responses"]["503"]["content"]["application/json"]["schema"]
    assert error["required"] == ["detail", "request_id"]
    vector = search["requestBody"]["content"]["application/json"]["schema"]["properties"][
        "vector"]
    assert vector["minItems"] == vector["maxItems"] == 6
    k = next(p for p in search["parameters"] if p["name"] == "k")
    assert k["schema"] == {"type": "integer", "minimum": 1, "maximum": 100, "default": 10}
    schemes = schema["components"]["securitySchemes"]
    assert {s["type"] for s in schemes.values()} == {"http", "apiKey"}
    assert search["security"] and schema["paths"]["/stats"]["get"]["security"]
    assert "security" not in schema["paths"]["/healthz"]["get"]
