#!/usr/bin/python3
"""ioserve's listing and a download over HTTP/3, in headless Chromium forced onto QUIC.

Run by `cargo xtask http3` (xtask/src/http3/mod.rs). Arguments: the listing's URL
(https://127.0.0.1:PORT/), the base64 SHA-256 of the certificate's public key (which
Chromium is told to trust with --ignore-certificate-errors-spki-list), the name of a
small text file the listing shows (the page the download is fetched from), the name of
the file to download, its length and its SHA-256 (hex). Chromium is started with
--origin-to-force-quic-on for the origin, so that it speaks HTTP/3 from the first
request instead of after an Alt-Svc; the checks read the protocol of the page and of
the download from the Navigation and Resource Timing entries (`nextHopProtocol`).
"""

import sys
import urllib.parse

from selenium.webdriver.common.by import By

from chromium import CheckFailed, run, wait_for

DOWNLOAD = """
const [url, done] = [arguments[0], arguments[arguments.length - 1]];
fetch(url, {cache: "no-store"})
  .then(response => response.arrayBuffer().then(body => [response.status, body]))
  .then(([status, body]) => crypto.subtle.digest("SHA-256", body).then(digest => {
    const hex = Array.from(new Uint8Array(digest))
      .map(b => b.toString(16).padStart(2, "0")).join("");
    const entry = performance.getEntriesByName(new URL(url, location).href).pop();
    done([status, body.byteLength, hex, entry ? entry.nextHopProtocol : null]);
  }))
  .catch(error => done(["error", String(error)]));
"""


def check(driver, url, page, name, length, sha256):
    driver.get(url)
    title = wait_for("title 'Index of /'", lambda: driver.title,
                     lambda t: t in ("Index of /", "Privacy error"))
    if title != "Index of /":
        raise CheckFailed(f"expected the listing; the page is titled {title!r}")
    links = [urllib.parse.unquote(link.get_attribute("href").rstrip("/").rsplit("/", 1)[-1])
             for link in driver.find_elements(By.CSS_SELECTOR, "tbody tr td a")]
    if name not in links or page not in links:
        raise CheckFailed(f"the listing does not show {page} and {name}: {links}")
    protocol = driver.execute_script(
        "return performance.getEntriesByType('navigation')[0].nextHopProtocol")
    if protocol != "h3":
        raise CheckFailed(f"the listing came over {protocol!r}, not h3")
    print(f"chromium: the listing came over {protocol}")
    # The listing's Content-Security-Policy allows no fetch: the download is fetched
    # from the file itself, a page without one, on the same origin.
    driver.get(urllib.parse.urljoin(url, page))
    outcome = driver.execute_async_script(DOWNLOAD, "/" + name)
    if outcome[0] == "error":
        raise CheckFailed(f"the download of {name} failed: {outcome[1]}")
    status, got, digest, protocol = outcome
    if status != 200 or got != length or digest != sha256:
        raise CheckFailed(f"the download of {name}: status {status}, {got} bytes, SHA-256 "
                          f"{digest}; expected 200, {length} bytes, {sha256}")
    if protocol != "h3":
        raise CheckFailed(f"the download of {name} came over {protocol!r}, not h3")
    print(f"chromium: {name} ({length} bytes) came whole over {protocol}")


def main():
    url, spki, page, name, length, sha256 = sys.argv[1:7]
    origin = urllib.parse.urlsplit(url).netloc
    arguments = (f"--origin-to-force-quic-on={origin}",
                 f"--ignore-certificate-errors-spki-list={spki}",
                 "--enable-quic")
    run("chromium over HTTP/3", lambda driver: check(driver, url, page, name, int(length), sha256),
        arguments)


if __name__ == "__main__":
    main()
