"""`keras-dml serve` through FastAPI's TestClient: search by photo and by vector, the
micro-batcher, one-line 4xx answers to bad input, the token, the image route's root,
the model check at start and a moved alias."""

import asyncio
import json
import os
import shutil
import struct
import zlib

import numpy as np
import pytest

from serve_fixtures import colour_photos, index, make_run

pytestmark = pytest.mark.requires("fastapi", "multipart", "pymilvus", "milvus_lite")


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    """(run, photos, uri): 9 photos in a Lite catalogue built by `keras-dml index`."""
    root = tmp_path_factory.mktemp("serve")
    photos = colour_photos(root / "photos")
    run = make_run(root / "run")
    uri = root / "catalogue.db"
    index(run, photos, uri)
    return run, photos, uri


@pytest.fixture(scope="module")
def app(catalogue):
    from keras_dml.serve import create_app

    run, _, uri = catalogue
    return create_app(str(run), str(uri), max_wait_ms=20)


@pytest.fixture(scope="module")
def client(app):
    from fastapi.testclient import TestClient

    with TestClient(app) as client:
        yield client


def _upload(client, data, name="photo.png", **params):
    return client.post("/search", files={"image": (name, data)}, params=params)


def test_search_finds_the_uploaded_photo_first_with_its_label_and_image(client, catalogue):
    from keras_dml.index.provenance import model_fingerprint
    from keras_dml.index.runs import load_run

    run, photos, _ = catalogue
    answer = _upload(client, (photos / "dog" / "1.png").read_bytes(), k=4)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["collection"] == "keras_dml" and body["took_ms"] > 0
    assert body["model_fingerprint"] == model_fingerprint(load_run(run).embedder)
    first = body["results"][0]
    assert first["id"] == os.path.join("dog", "1.png") and first["label"] == "dog"
    assert first["similarity"] == pytest.approx(1.0, abs=1e-4)
    assert first["image_url"] == "/images/dog/1.png" and first["match"] is None
    assert len(body["results"]) == 4
    everything = _upload(client, (photos / "dog" / "1.png").read_bytes(), k=50).json()
    assert len(everything["results"]) == 9  # all there are
    similarities = [r["similarity"] for r in body["results"]]
    assert similarities == sorted(similarities, reverse=True)
    image = client.get(first["image_url"])
    assert image.status_code == 200 and image.content == (photos / "dog" / "1.png").read_bytes()


def test_threshold_filter_and_vector_queries(client, app, catalogue):
    _, photos, _ = catalogue
    data = (photos / "owl" / "0.png").read_bytes()
    matched = _upload(client, data, k=9, threshold="0.99999").json()["results"]
    assert [r["match"] for r in matched] == [r["similarity"] >= 0.99999 for r in matched]
    assert matched[0]["match"] is True
    only_cats = _upload(client, data, k=3, filter=json.dumps({"label": "cat"})).json()
    assert {r["label"] for r in only_cats["results"]} == {"cat"}
    as_text = _upload(client, data, k=3, filter='label == "cat"').json()  # search --filter's
    assert [r["id"] for r in as_text["results"]] == [r["id"] for r in only_cats["results"]]
    assert all(r["image_url"] == "/images/" + r["metadata"]["path"] for r in as_text["results"])
    bad = _upload(client, data, k=3, filter="label === 3")
    assert bad.status_code == 400 and bad.json()["detail"].startswith("bad filter:"), bad.text
    plain = {r["id"]: r["similarity"] for r in _upload(client, data, k=9).json()["results"]}
    reranked = _upload(client, data, k=4, rerank="k_reciprocal", threshold="0.99999").json()
    for result in reranked["results"]:  # the order is the re-ranking's, the rest not
        assert result["similarity"] == pytest.approx(plain[result["id"]], abs=1e-5)
        assert result["match"] == (result["similarity"] >= 0.99999)
    scores = [r["rerank_score"] for r in reranked["results"]]
    assert scores == sorted(scores, reverse=True)
    service = app.state.service  # the re-ranking's own connection has the same call bound
    (opened,) = service._reranking.values()
    assert opened._store.call_timeout == service.catalogue.timeout
    vector = app.state.service.embedder.embed([data])[0]
    by_vector = client.post("/search", params={"k": 2}, json={"vector": vector.tolist()})
    assert by_vector.status_code == 200, by_vector.text
    assert by_vector.json()["results"][0]["id"] == os.path.join("owl", "0.png")


@pytest.mark.slow
def test_concurrent_searches_share_one_forward_pass(app, catalogue):
    import httpx

    _, photos, _ = catalogue
    service = app.state.service
    service.batcher.sizes.clear()
    paths = sorted(photos.glob("*/*.png"))

    async def searches():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return await asyncio.gather(*[http.post(
                "/search", params={"k": 1}, files={"image": (p.name, p.read_bytes())})
                for p in paths])

    answers = asyncio.run(searches())
    assert [a.status_code for a in answers] == [200] * len(paths)
    assert [a.json()["results"][0]["id"] for a in answers] == [
        str(p.relative_to(photos)) for p in paths]
    assert sum(size * n for size, n in service.batcher.sizes.items()) == len(paths)
    assert max(service.batcher.sizes) > 1, service.batcher.sizes  # batched


def _png_header(width, height):
    """A PNG whose header claims width x height, with one tiny compressed row: a
    decompression bomb's signature, refused from the header."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b""))


@pytest.mark.parametrize("data, status, words", [
    (b"", 400, "empty"),
    (b"plain text, not a picture", 400, "not an image"),
    ("truncated", 400, "could not be decoded"),
    (_png_header(60000, 60000), 413, "decompression bomb"),
    (_png_header(9000, 10), 413, "9000x10"),
])
def test_bad_uploads_get_a_one_line_4xx_and_bombs_are_not_decoded(app, client, catalogue,
                                                                  data, status, words):
    _, photos, _ = catalogue
    if data == "truncated":
        data = (photos / "cat" / "0.png").read_bytes()[:120]
    service = app.state.service
    calls = []
    embed = service.embedder.embed
    service.embedder.embed = lambda images: calls.append(len(images)) or embed(images)
    try:
        answer = _upload(client, data)
    finally:
        service.embedder.embed = embed
    assert answer.status_code == status, answer.text
    detail = answer.json()["detail"]
    assert words in detail and "\n" not in detail
    if status == 413 or not data:
        assert calls == []  # refused before the decoder ran


@pytest.mark.slow
def test_an_upload_past_the_size_limit_is_413(catalogue):
    from fastapi.testclient import TestClient

    from keras_dml.serve import create_app
    from keras_dml.serve.uploads import ImageLimits

    run, photos, uri = catalogue
    small = create_app(str(run), str(uri), limits=ImageLimits(max_bytes=100))
    with TestClient(small) as client:
        answer = _upload(client, (photos / "cat" / "0.png").read_bytes())
        huge = client.post("/search", content=b"x" * 200_000,
                           headers={"content-type": "multipart/form-data; boundary=b"})
    assert answer.status_code == 413 and "limit of 100" in answer.json()["detail"]
    assert huge.status_code == 413


@pytest.mark.parametrize("params, body, words", [
    ({"k": "0"}, None, "k must be between 1 and 100"),
    ({"k": "101"}, None, "k must be between 1 and 100"),
    ({"k": "ten"}, None, "k must be a whole number"),
    ({"filter": '{"colour": "red"}'}, None, "unknown field 'colour'"),
    ({"filter": "label == cat"}, None, "bad filter"),
    ({"filter": '{"label": {"~": 1}}'}, None, "unknown operator"),
    ({"rerank": "magic"}, None, "bad rerank"),
    ({"threshold": "high"}, None, "threshold must be a number"),
    ({}, {"vector": [1.0, 2.0]}, "vector must be a list of 6 numbers"),
    ({}, {"vector": "abc"}, "vector must be a list of"),
    ({}, {"vectors": []}, 'must be {"vector"'),
])
def test_bad_parameters_get_a_one_line_400(client, catalogue, params, body, words):
    _, photos, _ = catalogue
    if body is None:
        answer = _upload(client, (photos / "cat" / "0.png").read_bytes(), **params)
    else:
        answer = client.post("/search", params=params, json=body)
    assert answer.status_code == 400, answer.text
    assert words in answer.json()["detail"] and "\n" not in answer.json()["detail"]


def test_other_bodies_are_refused(client):
    assert client.post("/search", content=b"abc",
                       headers={"content-type": "text/plain"}).status_code == 415
    no_image = client.post("/search", files={"photo": ("a.png", b"abc")})
    assert no_image.status_code == 400 and "'image'" in no_image.json()["detail"]
    assert client.post("/search", content=b"{", headers={
        "content-type": "application/json"}).status_code == 400


def test_health_page_docs_and_stats(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["collection"] == "keras_dml"
    page = client.get("/")
    assert page.status_code == 200 and "<script>" in page.text and "http" not in page.text
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/search", "/healthz", "/readyz", "/images/{path}"} <= set(paths)
    assert "multipart/form-data" in paths["/search"]["post"]["requestBody"]["content"]
    assert client.get("/stats").status_code == 200


@pytest.mark.slow
def test_the_token_guards_search_and_images_but_not_health(catalogue):
    from fastapi.testclient import TestClient

    from keras_dml.serve import create_app

    run, photos, uri = catalogue
    data = (photos / "cat" / "0.png").read_bytes()
    with TestClient(create_app(str(run), str(uri), token="s3cret")) as client:
        assert _upload(client, data).status_code == 401
        assert client.get("/images/cat/0.png").status_code == 401
        wrong = client.post("/search", files={"image": ("a.png", data)},
                            headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and "token" in wrong.json()["detail"]
        assert client.post("/admin/reload").status_code == 401
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200
        assert client.post("/search", files={"image": ("a.png", data)},
                           headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert client.get("/images/cat/0.png",
                          headers={"X-Token": "s3cret"}).status_code == 200


def test_the_image_route_serves_nothing_outside_the_catalogue_root(client, catalogue,
                                                                   tmp_path):
    from keras_dml.serve.files import image_file

    _, photos, _ = catalogue
    secret = tmp_path / "secret.png"
    shutil.copy(photos / "cat" / "0.png", secret)
    link = photos / "cat" / "link.png"
    link.symlink_to(secret)
    folder_link = photos / "out"
    folder_link.symlink_to(tmp_path, target_is_directory=True)
    try:
        relative = os.path.relpath(secret, photos)
        for path in ["%2e%2e%2f" * 12 + "etc%2fpasswd", "..%2f..%2f..%2fetc%2fpasswd",
                     "%2fetc%2fpasswd", "/etc/passwd", "%2e%2e/" * 12 + "etc/passwd",
                     relative.replace("/", "%2f"), str(secret), "cat/link.png",
                     "out/secret.png", "cat/../../" + relative, "cat/missing.png", "cat"]:
            answer = client.get("/images/" + path)
            assert answer.status_code in (403, 404), (path, answer.status_code)
            assert b"root:" not in answer.content
        assert image_file(photos, "../" * 12 + "etc/passwd") is None
        assert image_file(photos, "cat/link.png") is None
        assert image_file(photos, "cat/0.png") == os.path.realpath(photos / "cat" / "0.png")
    finally:
        link.unlink()
        folder_link.unlink()


@pytest.mark.slow
def test_another_models_catalogue_is_refused_at_start_in_one_line(catalogue, tmp_path,
                                                                  capsys):
    from keras_dml import cli
    from keras_dml.serve import create_app

    _, _, uri = catalogue
    other = make_run(tmp_path / "other-run", seed=1)
    with pytest.raises(ValueError, match="holds embeddings of model sha256:"):
        create_app(str(other), str(uri))
    assert cli.main(["serve", str(other), "--uri", str(uri)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-dml serve: error: collection 'keras_dml' holds embeddings")
    assert err.count("\n") == 1
    assert cli.main(["serve", str(other), "--uri", str(tmp_path / "none.db")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-dml serve: error: No Milvus Lite database at ") and err.count(
        "\n") == 1, err
    assert not (tmp_path / "none.db").exists()  # nothing created


def test_the_micro_batcher_batches_and_isolates_errors():
    from keras_dml.serve.batcher import MicroBatcher

    def square(items):
        return [ValueError(f"bad {x}") if x < 0 else x * x for x in items]

    batcher = MicroBatcher(square, max_batch=4, max_wait=0.05)

    async def run():
        return await asyncio.gather(*[batcher.submit(x) for x in (1, 2, -3, 4, 5)],
                                    return_exceptions=True)

    results = asyncio.run(run())
    assert results[:2] == [1, 4] and results[3:] == [16, 25]
    assert isinstance(results[2], ValueError) and str(results[2]) == "bad -3"
    assert batcher.sizes == {4: 1, 1: 1}


@pytest.mark.slow
def test_a_moved_alias_is_followed_and_another_models_collection_waits_for_a_reload(
        catalogue, tmp_path):
    from fastapi.testclient import TestClient

    from keras_dml.index.milvus import connect, release
    from keras_dml.serve import create_app

    run, photos, uri = catalogue
    index(run, photos / "owl", uri, "owls")  # the same model, only the owls
    other = make_run(tmp_path / "other-run", seed=1)
    index(other, photos, uri, "retrained")  # another model's collection
    served = tmp_path / "served-run"
    shutil.copytree(run, served)
    milvus = connect(str(uri))
    data = (photos / "cat" / "0.png").read_bytes()
    try:
        milvus.create_alias("keras_dml", "shop")
        app = create_app(str(served), str(uri), "shop", token="t", refresh_seconds=0)
        bearer = {"Authorization": "Bearer t"}
        with TestClient(app) as client:
            def search():
                return client.post("/search", params={"k": 2}, headers=bearer,
                                   files={"image": ("a.png", data)})

            assert search().json()["collection"] == "keras_dml"
            milvus.alter_alias("owls", "shop")  # same model: followed, no restart
            moved = search().json()
            assert moved["collection"] == "owls"
            assert {r["id"] for r in moved["results"]} <= {"0.png", "1.png", "2.png"}
            milvus.alter_alias("retrained", "shop")  # another model: not ready
            ready, refused = client.get("/readyz"), search()
            assert ready.status_code == 503 and refused.status_code == 503
            assert "collection 'retrained' (alias 'shop') holds embeddings of model" in (
                refused.json()["detail"])
            assert client.get("/healthz").status_code == 200
            assert client.post("/admin/reload", headers=bearer).status_code == 409
            shutil.copy(other / "model.keras", served / "model.keras")  # the new model
            reloaded = client.post("/admin/reload", headers=bearer)
            assert reloaded.status_code == 200, reloaded.text
            assert client.get("/readyz").status_code == 200
            assert search().json()["collection"] == "retrained"
    finally:
        release(milvus, str(uri))


@pytest.mark.slow
@pytest.mark.requires("tensorflow")
def test_the_exported_savedmodel_answers_as_the_run_and_needs_its_fingerprint(
        catalogue, client, tmp_path):
    from fastapi.testclient import TestClient

    from keras_dml import cli
    from keras_dml.index.provenance import model_fingerprint
    from keras_dml.index.runs import load_run
    from keras_dml.serve import create_app

    run, photos, uri = catalogue
    assert cli.main(["export", str(run), str(tmp_path / "export")]) == 0
    sidecar = tmp_path / "export" / "1" / "keras_dml_export.json"
    info = json.loads(sidecar.read_text())
    info.pop("model_fingerprint", None)
    sidecar.write_text(json.dumps(info))
    with pytest.raises(ValueError, match="records no model fingerprint"):
        create_app(str(tmp_path / "export"), str(uri))
    info["model_fingerprint"] = model_fingerprint(load_run(run).embedder)
    sidecar.write_text(json.dumps(info))
    data = (photos / "dog" / "2.png").read_bytes()
    expected = _upload(client, data, k=5).json()
    with TestClient(create_app(str(tmp_path / "export"), str(uri))) as exported:
        answer = _upload(exported, data, k=5).json()
    assert [r["id"] for r in answer["results"]] == [r["id"] for r in expected["results"]]
    np.testing.assert_allclose([r["similarity"] for r in answer["results"]],
                               [r["similarity"] for r in expected["results"]], atol=1e-4)
    assert answer["model_fingerprint"] == expected["model_fingerprint"]


@pytest.mark.parametrize("flags, words", [
    (["--port", "0"], "--port must be between 1 and 65535"),
    (["--max-batch", "0"], "--max-batch must be at least 1"),
    (["--max-upload-mb", "0"], "--max-upload-mb must be positive"),
    (["--token-file", "EMPTY"], "is empty"),
    (["--allowed-hosts", "shop.example,evil/x"], "'evil/x' is not a host name"),
    (["--milvus-timeout", "0"], "--milvus-timeout must be more than 0 and at most 3600 "
     "seconds, got 0.0"),
    (["--milvus-timeout", "nan"], "--milvus-timeout must be more than 0"),
])
def test_bad_serve_flags_are_one_line_errors(tmp_path, capsys, flags, words):
    from keras_dml import cli

    (tmp_path / "EMPTY").write_text("\n")
    flags = [str(tmp_path / "EMPTY") if flag == "EMPTY" else flag for flag in flags]
    assert cli.main(["serve", str(tmp_path), "--uri", str(tmp_path / "c.db"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-dml serve: error: ") and words in err, err
    assert err.count("\n") == 1


def test_a_released_collection_is_loaded_again_without_a_reload(client, app, catalogue):
    """Milvus started again holds the collection released: the failed search answers 503
    with Retry-After, the check it triggers loads the collection again (before issue 67,
    searches failed until POST /admin/reload while /readyz said ready)."""
    from keras_dml.index.milvus import connect, release

    uri = str(catalogue[2])
    other = connect(uri)  # a second client on the same Lite database, as an operator's
    try:
        other.release_collection("keras_dml")
        failed = client.post("/search", json={"vector": [1.0] * 6})
        assert failed.status_code == 503 and int(failed.headers["retry-after"]) >= 1
        assert client.get("/readyz").status_code == 200
        assert str(other.get_load_state("keras_dml")["state"]).endswith("Loaded")
        assert client.post("/search", json={"vector": [1.0] * 6}).status_code == 200
        assert client.get("/healthz").json() == {"status": "ok"}
    finally:
        release(other, uri)
