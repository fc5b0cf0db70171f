"""What the headless Chromium checks share (check_listing.py, check_acme_page.py).

Chromium through chromedriver (Debian's, so Selenium downloads nothing), a wait that
polls with a deadline and reports the last value it saw, and the failure a check
raises. The checks import it from the directory they run from (Python puts a script's
directory first on its path).
"""

import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

WAIT_S = 30


class CheckFailed(Exception):
    """A check that did not hold."""


def wait_for(what, probe, done):
    """Calls probe until done(value) holds; fails after WAIT_S with the last value."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            last = probe()
            if done(last):
                return last
        except Exception as error:  # a page mid-load: keep trying until the deadline
            last = f"{type(error).__name__}: {error}"
        if time.monotonic() > deadline:
            raise CheckFailed(f"waited {WAIT_S} s for {what}; last seen: {last!r}")
        time.sleep(0.1)


def run(label, check, extra_arguments=()):
    """Starts headless Chromium (with extra_arguments), runs check(driver), and exits
    non-zero with the failure's message when a check did not hold."""
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1000,720",
                     *extra_arguments):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_script_timeout(WAIT_S)
    driver.set_page_load_timeout(WAIT_S)
    try:
        check(driver)
    except CheckFailed as failure:
        print(f"{label}: FAILED: {failure}", file=sys.stderr)
        sys.exit(1)
    finally:
        driver.quit()
    print(f"{label}: every check passed")
