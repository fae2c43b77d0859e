"""`keras-dml serve` when Milvus fails (issue 67, section 2), on `milvus-lite server` and on
a Milvus standalone (`milvus-server`, from `pip install milvus`): Milvus stopped, started
again on the same data, frozen (SIGSTOP) and thawed, with searches running and `keras-dml
index --update` writing meanwhile. The service answers 503 with Retry-After while a search
cannot run (never a hang, never a 500), `/readyz` says so, `/healthz` stays up, and it heals
by itself once Milvus is back.

Each server kind starts once per module (a standalone takes tens of seconds); the service is
`keras-dml serve` in its own process on a free loopback port, stopped by its pid. Waits are
bounded: a client gives up on a request after `CLIENT_SECONDS`, a recovery after
`HEAL_SECONDS`; those are hang detectors, far above the bounds under test."""

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from milvus_servers import Server, free_port
from serve_fixtures import colour_photos, make_run, write_png

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MILVUS_TIMEOUT = 1.0  # the service's --milvus-timeout here
CLIENT_SECONDS = 30.0  # a request unanswered this long is a hang
HEAL_SECONDS = 60.0  # the service must answer searches again within this after a restart
SERVE_START_SECONDS = 180.0
DIM = 6  # serve_fixtures.make_run's embedding
REFRESH_SECONDS = 2.0  # how long the service keeps a check's outcome (create_app's default)

KINDS = [pytest.param("lite", marks=[pytest.mark.slow,
                                     pytest.mark.requires("pymilvus", "milvus_lite", "fastapi")]),
         pytest.param("standalone", marks=[pytest.mark.slow,
                                           pytest.mark.requires("pymilvus", "milvus", "fastapi")])]

pytestmark = pytest.mark.faults


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]), "TF_CPP_MIN_LOG_LEVEL": "2"}


def _cli(*argv, check=True):
    done = subprocess.run([sys.executable, "-m", "keras_dml.cli", *map(str, argv)],
                          capture_output=True, text=True, env=_env(), timeout=600)
    if check:
        assert done.returncode == 0, done.stderr[-3000:]
    return done


def _get(url, timeout=CLIENT_SECONDS, body=None):
    """(status, headers, JSON body) of a GET (or a POST of JSON `body`)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={
        "Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.headers, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, error.headers, json.loads(error.read())


class Service:
    """`keras-dml serve RUN --uri URI --collection shop` on a free loopback port."""

    def __init__(self, run, uri, log):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(log, "wb")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "keras_dml.cli", "serve", str(run), "--uri", uri,
             "--collection", "shop", "--port", str(self.port), "--milvus-timeout",
             str(MILVUS_TIMEOUT)], stdout=self._log, stderr=subprocess.STDOUT, env=_env())
        deadline = time.monotonic() + SERVE_START_SECONDS
        while time.monotonic() < deadline:
            assert self._process.poll() is None, open(log).read()[-3000:]
            try:
                if _get(self.url + "/readyz", timeout=5)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise AssertionError(f"keras-dml serve did not get ready: {open(log).read()[-3000:]}")

    def search(self, vector=(1.0,) * DIM, timeout=CLIENT_SECONDS):
        return _get(f"{self.url}/search?k=3", timeout, {"vector": list(vector)})

    def stop(self):
        self._process.terminate()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()


@pytest.fixture(scope="module", params=KINDS)
def served(request, tmp_path_factory):
    """(server, service, run, photos): the photos indexed into 'shop' on a Milvus server
    of each kind, served by `keras-dml serve`."""
    root = tmp_path_factory.mktemp(f"faults_{request.param}")
    if request.param == "standalone" and shutil.which("milvus-server") is None:
        pytest.fail("milvus-server is not on PATH: pip install milvus")
    photos = colour_photos(root / "photos")
    run = make_run(root / "run")
    server = Server(request.param, root / "milvus")
    try:
        _cli("index", run, "--images", photos, "--uri", server.uri, "--collection", "shop")
        service = Service(run, server.uri, root / "serve.log")
        try:
            yield server, service, run, photos
        finally:
            service.stop()
    finally:
        server.close()


def _until_searches_answer(service):
    """Seconds until a search answers 200 again (fails after HEAL_SECONDS)."""
    start = time.monotonic()
    answers = []
    while time.monotonic() - start < HEAL_SECONDS:
        answers.append(service.search())
        if answers[-1][0] == 200:
            return time.monotonic() - start
        assert answers[-1][0] == 503, answers[-1]
        time.sleep(0.2)
    raise AssertionError(f"no search answered within {HEAL_SECONDS:.0f} s: {answers[-1]}")


def _unavailable(answer):
    status, headers, body = answer
    assert status == 503, answer
    assert int(headers["Retry-After"]) >= 1 and body["detail"], answer


def test_stopped_then_restarted_milvus_heals_without_a_reload(served):
    """Stopped: 503 with Retry-After and /readyz 503; started again on the same data (its
    collection then released): searches answer again by themselves, /readyz with them."""
    server, service, _, _ = served
    assert service.search()[0] == 200
    server.stop()
    _unavailable(service.search())
    _unavailable(_get(service.url + "/readyz"))
    assert _get(service.url + "/healthz")[0] == 200
    server.start()
    _until_searches_answer(service)
    assert _get(service.url + "/readyz")[0] == 200
    assert service.search()[2]["results"][0]["label"] in ("cat", "dog", "owl")


def test_readyz_checks_the_collection_is_loaded_and_loads_it_again(served):
    """A search needs the collection loaded: once the last check is older than
    `REFRESH_SECONDS`, /readyz answers 200 only with the collection loaded (the check
    loads it again after Milvus released it), and a search then runs."""
    from pymilvus import MilvusClient

    server, service, _, _ = served
    client = MilvusClient(uri=server.uri, timeout=10)
    try:
        client.release_collection("shop", timeout=10)
        assert str(client.get_load_state("shop", timeout=10)["state"]).endswith("NotLoad")
        time.sleep(REFRESH_SECONDS + 0.5)  # the service's last check is out of date
        start = time.monotonic()  # 503 while it loads (a standalone takes seconds)
        while _get(service.url + "/readyz")[0] != 200:
            assert time.monotonic() - start < HEAL_SECONDS, "the collection was not loaded"
            time.sleep(0.2)
        assert str(client.get_load_state("shop", timeout=10)["state"]).endswith("Loaded")
        assert service.search()[0] == 200
    finally:
        client.close()


def test_frozen_milvus_gives_503_in_bounded_time_and_healthz_stays_up(served):
    server, service, _, _ = served
    _until_searches_answer(service)
    answers = []
    server.freeze()
    try:
        searching = [threading.Thread(target=lambda: answers.append(service.search()))
                     for _ in range(4)]
        for thread in searching:
            thread.start()
        health = [_get(service.url + "/healthz", timeout=5) for _ in range(5)]
        for thread in searching:
            thread.join(CLIENT_SECONDS + 5)
        ready = _get(service.url + "/readyz")
    finally:
        server.thaw()
    assert [h[0] for h in health] == [200] * 5
    assert len(answers) == 4
    for answer in answers:
        _unavailable(answer)
    _unavailable(ready)
    _until_searches_answer(service)


def test_searches_and_an_update_run_through_a_restart(served, tmp_path):
    """Searches run throughout while Milvus restarts and `keras-dml index --update` adds
    photos: every answer is 200 or 503 with Retry-After; the update, run again once Milvus
    is back, keeps what was there, adds the new photos, and the service finds them."""
    server, service, run, photos = served
    for i in range(3):
        write_png(photos / "fox" / f"{i}.png", (200, 200, 40), 90 + i)
    answers, stop = [], threading.Event()

    def search_until_stopped():
        while not stop.is_set():
            answers.append(service.search())

    searching = threading.Thread(target=search_until_stopped)
    searching.start()
    try:
        update = ["index", run, "--images", photos, "--uri", server.uri, "--collection", "shop",
                  "--update"]
        server.stop()
        failed = _cli(*update, check=False)  # Milvus down: a one-line error, no traceback
        assert failed.returncode != 0 and "Traceback" not in failed.stderr, failed.stderr
        server.start()
        done = _cli(*update)
        assert re.search(r"added 3 images.*, 9 already there.*; 12 items", done.stdout), done.stdout
        _until_searches_answer(service)
        found = service.search(timeout=CLIENT_SECONDS)
    finally:
        stop.set()
        searching.join(CLIENT_SECONDS + 5)
        shutil.rmtree(photos / "fox")
    assert {a[0] for a in answers} <= {200, 503} and 200 in {a[0] for a in answers}
    for answer in answers:
        if answer[0] == 503:
            _unavailable(answer)
    everything = _get(f"{service.url}/search?k=12", body={"vector": [1.0] * DIM})
    assert found[0] == 200 and len(everything[2]["results"]) == 12, everything
    assert "fox" in {r["label"] for r in everything[2]["results"]}
