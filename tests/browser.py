"""Opens a local HTML file in headless Debian Chromium (selenium + chromedriver) and reports
its images and console errors: the browser check of `report.html`.

Usage: python tests/browser.py REPORT.html SCREENSHOT.png
"""

import os
import shutil
import sys
import tempfile

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--window-size=1280,2400")


def available():
    """Why the browser check cannot run here, or None when it can."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install 'keras_dml[browser]')"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(path):
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    return None


def _needed():
    """A pytest mark: skip where the browser cannot run, except under `.ci/run`
    (KERAS_DML_BROWSER_REQUIRED=1), where a missing browser fails the test."""
    import pytest

    reason = available()
    if reason is None or os.environ.get("KERAS_DML_BROWSER_REQUIRED") != "1":
        return pytest.mark.skipif(reason is not None, reason=str(reason))
    return pytest.mark.usefixtures()  # runs, and fails on the missing browser


needed = _needed()


def open_report(path, screenshot):
    """Loads `path` from the file system; returns {"images", "broken", "errors", "title"}
    (broken: the src prefixes of images that did not load) and saves a full-page PNG."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.set_page_load_timeout(60)
        driver.get("file://" + os.path.abspath(path))
        images = driver.execute_script(
            "return Array.from(document.images).map("
            "i => [i.complete && i.naturalWidth > 0, i.src.slice(0, 40)]);")
        height = driver.execute_script("return document.body.scrollHeight;")
        driver.set_window_size(1280, min(max(height + 40, 800), 16000))
        driver.save_screenshot(os.fspath(screenshot))
        errors = [entry["message"] for entry in driver.get_log("browser")
                  if entry["level"] == "SEVERE"]
        return {"images": len(images), "broken": [src for ok, src in images if not ok],
                "errors": errors, "title": driver.title}
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    print(open_report(sys.argv[1], sys.argv[2]))
