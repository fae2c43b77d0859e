"""`keras-dml serve` under a property-based API test (schemathesis) over its own
`/openapi.json`: generated requests, valid and invalid, against a service on a loopback
uvicorn, with every check on (no 500, every status and body as declared, invalid data
refused, the token not ignored, ...), bounded in examples; 0 failures (issue 67,
section 3)."""

import threading
import time

import pytest

from serve_fixtures import colour_photos, index, make_run

schemathesis = pytest.importorskip("schemathesis", reason="needs schemathesis (keras_dml[test])")
hypothesis = pytest.importorskip("hypothesis")

pytestmark = [pytest.mark.requires("fastapi", "multipart", "pymilvus", "milvus_lite",
                                   "uvicorn"), pytest.mark.slow]

TOKEN = "t0ken"
#: A request valid by the schema may still be refused on /search for what the schema
#: cannot say (a photo that does not decode, a filter that does not parse): 400 there.
SEARCH_MAY_REFUSE = ["2xx", "400", "401", "403", "404", "409", "429", "5xx"]


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory):
    """The schema of a service on 127.0.0.1 (an ephemeral port), with a token and the
    localhost names as its only hosts, as `keras-dml serve` starts it."""
    import uvicorn
    from schemathesis.config import SchemathesisConfig

    from keras_dml.serve import create_app
    from keras_dml.serve.browsers import allowed_hosts

    root = tmp_path_factory.mktemp("serve_schema")
    photos = colour_photos(root / "photos")
    run = make_run(root / "run")
    index(run, photos, root / "catalogue.db")
    app = create_app(str(run), str(root / "catalogue.db"), token=TOKEN,
                     allowed_hosts=allowed_hosts("127.0.0.1"))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(600):
        if server.started:
            break
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    port = server.servers[0].sockets[0].getsockname()[1]
    config = SchemathesisConfig.from_dict({"operations": [{
        "include-path": "/search",
        "checks": {"positive_data_acceptance": {"expected-statuses": SEARCH_MAY_REFUSE}}}]})
    yield schemathesis.openapi.from_url(f"http://127.0.0.1:{port}/openapi.json",
                                        config=config)
    server.should_exit = True
    thread.join(timeout=30)


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@hypothesis.settings(max_examples=25, deadline=None, database=None,
                     suppress_health_check=list(hypothesis.HealthCheck))
def test_the_api_holds_to_its_schema(case):
    case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"})
