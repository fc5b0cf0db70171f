#!/usr/bin/python3
"""ioserve's listing over its ACME certificate, in headless Chromium through chromedriver.

Run by `cargo xtask acme` (xtask/src/acme/browser.rs), which obtains the certificate from
pebble and puts pebble's root in the NSS database of the HOME this runs under. Arguments:
the listing's URL (https://NAME:PORT/), the directory it serves, the screenshot's path,
Chromium's --host-resolver-rules (MAP NAME 127.0.0.1). Every wait has a deadline and
reports the last value it saw; a failed check exits non-zero with a message that says what
was expected and what was seen. A certificate Chromium does not trust shows its
interstitial ("Privacy error", NET::ERR_CERT_...), which the title check reports.
"""

import os
import sys
import urllib.parse

from selenium.webdriver.common.by import By

from chromium import CheckFailed, run, wait_for


def listed_names(driver):
    """The names the listing links to, in page order (without the parent link)."""
    names = []
    for link in driver.find_elements(By.CSS_SELECTOR, "tbody tr td a"):
        if link.text == "Parent directory":
            continue
        path = urllib.parse.urlsplit(link.get_attribute("href")).path
        names.append(urllib.parse.unquote(path.rstrip("/").rsplit("/", 1)[-1]))
    return names


def page_text(driver):
    """The start of the page's visible text, for messages."""
    try:
        return driver.find_element(By.TAG_NAME, "body").text[:300]
    except Exception as error:  # no body yet
        return f"({type(error).__name__})"


def check(driver, url, root, screenshot):
    driver.get(url)
    try:
        # Chromium's certificate interstitial ends the wait at once.
        title = wait_for("title 'Index of /'", lambda: driver.title,
                         lambda t: t in ("Index of /", "Privacy error"))
    except CheckFailed as failure:
        raise CheckFailed(f"{failure}; the page says: {page_text(driver)!r}") from None
    if title != "Index of /":
        raise CheckFailed(f"expected the listing, titled 'Index of /'; the page is titled "
                          f"{title!r} and says: {page_text(driver)!r}")
    names = sorted(os.listdir(root))
    shown = wait_for(f"{len(names)} entries {names}", lambda: listed_names(driver),
                     lambda seen: sorted(seen) == names)
    secure = driver.execute_script(
        "return [location.protocol, location.host, window.isSecureContext]")
    if secure[0] != "https:" or not secure[2]:
        raise CheckFailed(f"expected a secure https: page; location.protocol {secure[0]!r}, "
                          f"isSecureContext {secure[2]!r}")
    driver.save_screenshot(screenshot)
    print(f"acme browser: {url}: title {driver.title!r}, entries {shown}, "
          f"secure context at {secure[1]}; screenshot {screenshot}")


def main():
    url, root, screenshot, resolver_rules = sys.argv[1:5]
    run("acme browser", lambda driver: check(driver, url, root, screenshot),
        [f"--host-resolver-rules={resolver_rules}"])


if __name__ == "__main__":
    main()
