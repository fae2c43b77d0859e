"""`keras-dml serve` as a user starts it (its own process, on 127.0.0.1) over a Lite
catalogue of CUB photos: the page in headless Chromium (upload a photo, the results
and their images appear, no console error) and raw requests at the image route."""

import http.client
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

import browser
from conftest import require_shared_datasets
from serve_fixtures import index, make_run

from keras_dml.data import Preprocessing

pytestmark = [pytest.mark.slow, pytest.mark.shared_data,
              pytest.mark.requires("fastapi", "uvicorn", "multipart", "pymilvus",
                                   "milvus_lite")]

SPECIES = ("001.Black_footed_Albatross", "002.Groove_billed_Ani", "003.Parakeet_Auklet")
#: The `keras-dml` console script's start (imports only what the command uses).
COMMAND = ("import sys; sys.argv[0] = 'keras-dml'; from keras_dml.cli import main; "
           "sys.exit(main(sys.argv[1:]))")
SCREENSHOTS = pathlib.Path(os.environ.get("KERAS_DML_SCREENSHOTS") or tempfile.gettempdir())


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(port, path, headers=None):
    """`(status, body)` of a raw GET: the path is sent as written (no `..` folding)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path, headers=headers or {})
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """`(port, photos, process)` of `keras-dml serve RUN --uri DB` on 3 species x 3 photos."""
    shared = require_shared_datasets()
    root = tmp_path_factory.mktemp("serve-live")
    source = pathlib.Path(shared) / "cub200_subset" / "CUB_200_2011" / "images"
    photos = root / "photos"
    for species in SPECIES:
        (photos / species).mkdir(parents=True)
        for name in sorted(os.listdir(source / species))[:3]:
            shutil.copy(source / species / name, photos / species / name)
    run = make_run(root / "run", size=32, preprocessing=Preprocessing(32, resize_size=36))
    uri = root / "catalogue.db"
    index(run, photos, uri)
    (root / "outside.jpg").write_bytes(b"secret")
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[1]),
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("KERAS_DML_SERVE_TOKEN", None)
    log = open(root / "serve.log", "w+")
    process = subprocess.Popen(
        [sys.executable, "-c", COMMAND, "serve", str(run), "--uri", str(uri), "--port",
         str(port), "--max-batch", "8", "--threshold", "0.999"], env=env, stdout=log,
        stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert process.poll() is None, (root / "serve.log").read_text()
            try:
                if _get(port, "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("the service did not become ready: " + (root / "serve.log").read_text())
        yield port, photos, root
    finally:
        process.terminate()
        process.wait(30)
        log.close()
    assert "Traceback" not in (root / "serve.log").read_text()


def test_it_listens_on_loopback_and_says_where(service):
    port, _, root = service
    log = (root / "serve.log").read_text()
    assert f"http://127.0.0.1:{port}/ (token off)" in log
    assert _get(port, "/healthz")[0] == 200


@pytest.mark.parametrize("path", [
    "/images/../outside.jpg", "/images/../../../../etc/passwd",
    "/images/%2e%2e/outside.jpg", "/images/%2e%2e%2foutside.jpg", "/images/..%2Foutside.jpg",
    "/images//etc/passwd", "/images/%2Fetc%2Fpasswd", "/images/001.Black_footed_Albatross/"
    "../../outside.jpg"])
def test_raw_paths_outside_the_root_are_not_served(service, path):
    port, _, _ = service
    status, body = _get(port, path)
    assert status in (403, 404), (path, status)
    assert b"secret" not in body and b"root:" not in body


@browser.needed
def test_the_page_uploads_a_photo_and_shows_the_catalogue_images(service):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    port, photos, _ = service
    query = sorted((photos / SPECIES[1]).iterdir())[0]
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser.CHROMIUM
    for flag in (*browser.FLAGS[:-1], "--window-size=1200,900", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(browser.CHROMEDRIVER), options=options)
    try:
        driver.set_page_load_timeout(60)
        driver.get(f"http://127.0.0.1:{port}/")
        driver.save_screenshot(str(SCREENSHOTS / "serve_page_empty.png"))
        driver.find_element(By.ID, "k").clear()
        driver.find_element(By.ID, "k").send_keys("6")
        driver.find_element(By.ID, "file").send_keys(str(query))
        loaded = ("const images = Array.from(document.querySelectorAll('#results img'));"
                  "return images.length === 6 && images.every("
                  "i => i.complete && i.naturalWidth > 0);")
        WebDriverWait(driver, 120).until(lambda d: d.execute_script(loaded))
        status = driver.find_element(By.ID, "status").text
        labels = [card.text for card in driver.find_elements(By.CSS_SELECTOR, "#results .card")]
        driver.save_screenshot(str(SCREENSHOTS / "serve_page_results.png"))
        errors = [entry["message"] for entry in driver.get_log("browser")
                  if entry["level"] == "SEVERE"]
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    assert status.startswith("6 results from collection keras_dml"), status
    assert labels[0].startswith(SPECIES[1]) and "similarity 1.000" in labels[0], labels
    assert all("similarity" in text for text in labels)
    assert "match" in labels[0] and "no match" not in labels[0]
    assert any("no match" in text for text in labels)
    assert errors == []
