#!/usr/bin/python3
"""The directory listing as people use it, in headless Chromium through chromedriver.

Run by `cargo xtask browser` (xtask/src/browser/mod.rs), which builds ioserve, makes the
fixture tree, starts the server and installs axe-core. Arguments: the listing's URL,
the fixture directory it serves, the axe.min.js to inject, the directory for the
screenshots. Every wait has a deadline and reports the last value it saw; any failed
check exits non-zero with a message that says what was expected and what was seen.
"""

import os
import sys
import time
import urllib.parse

from selenium.webdriver.common.by import By

from chromium import CheckFailed, run, wait_for

LIGHT_BACKGROUND = "rgb(255, 255, 255)"
DARK_BACKGROUND = "rgb(13, 17, 23)"
PHONE_WIDTH = 390


def listed(driver, details=False):
    """The listed entries as (name, exact bytes or None), in page order; with details,
    also the size as shown and the time's datetime attribute."""
    rows = []
    for row in driver.find_elements(By.CSS_SELECTOR, "tbody tr"):
        link = row.find_element(By.CSS_SELECTOR, "td a")
        href = link.get_attribute("href")
        path = urllib.parse.urlsplit(href).path
        if link.text == "Parent directory":
            continue
        name = urllib.parse.unquote(path.rstrip("/").rsplit("/", 1)[-1])
        cell = row.find_element(By.CSS_SELECTOR, "td.size")
        size = cell.get_attribute("data-bytes")
        entry = (name, int(size) if size is not None else None)
        if details:
            when = row.find_element(By.CSS_SELECTOR, "td.time time")
            entry += (cell.text, when.get_attribute("datetime"))
        rows.append(entry)
    return rows


def expected_by_size(root):
    """The fixture's entries by size, ascending and descending, directories first (by
    name among themselves)."""
    dirs, files = [], []
    for entry in os.scandir(root):
        if entry.is_dir(follow_symlinks=False):
            dirs.append((entry.name, None))
        else:
            files.append((entry.name, entry.stat(follow_symlinks=False).st_size))
    by_name = lambda item: os.fsencode(item[0])
    dirs.sort(key=by_name)
    files.sort(key=lambda item: (item[1], os.fsencode(item[0])))
    return dirs + files, dirs[::-1] + files[::-1]


def background(driver):
    return driver.execute_script(
        "return getComputedStyle(document.body).backgroundColor")


def color_scheme(driver, scheme):
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {
        "features": [{"name": "prefers-color-scheme", "value": scheme}]})


def axe_violations(driver, axe_source, label):
    """Runs axe-core on the page; fails on any serious or critical violation."""
    driver.execute_script(axe_source)
    result = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        axe.run(document, {resultTypes: ['violations']})
            .then(r => done(r.violations.map(v => ({
                id: v.id, impact: v.impact, help: v.help,
                targets: v.nodes.slice(0, 3).map(n => n.target.join(' '))}))))
            .catch(e => done({error: String(e)}));
    """)
    if isinstance(result, dict):
        raise CheckFailed(f"axe-core did not run ({label}): {result['error']}")
    for violation in result:
        print(f"browser: axe ({label}): {violation['impact']}: {violation['id']}: "
              f"{violation['help']} at {violation['targets']}")
    serious = [v for v in result if v["impact"] in ("serious", "critical")]
    if serious:
        raise CheckFailed(f"axe-core found {len(serious)} serious or critical "
                          f"violation(s) ({label}): {[v['id'] for v in serious]}")
    print(f"browser: axe ({label}): no serious or critical violation "
          f"({len(result)} lesser)")


def check(driver, url, root, axe_source, shots):
    driver.get(url)
    wait_for("title 'Index of /'", lambda: driver.title, lambda t: t == "Index of /")
    names = sorted(os.listdir(root))
    rows = wait_for(f"{len(names)} rows", lambda: listed(driver),
                    lambda rows: len(rows) == len(names))
    if sorted(name for name, _ in rows) != names:
        raise CheckFailed(f"the rows name {[n for n, _ in rows]}, the fixture holds {names}")
    for name, size, shown, datetime in listed(driver, details=True):
        stat = os.lstat(os.path.join(root, name))
        if size is not None and size != stat.st_size:
            raise CheckFailed(f"{name}: data-bytes {size}, the file has {stat.st_size}")
        modified = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stat.st_mtime))
        if datetime != modified:
            raise CheckFailed(f"{name}: <time datetime={datetime!r}>, modified {modified}")
        if stat.st_size == 4 << 30 and shown != "4.0 GiB":
            raise CheckFailed(f"{name}: 4 GiB shown as {shown!r}, not '4.0 GiB'")
    print(f"browser: rendered: {driver.title!r}, {len(rows)} rows, sizes and times "
          "match the fixture")

    ascending, descending = expected_by_size(root)
    for direction, expected in (("asc", ascending), ("desc", descending)):
        driver.find_element(By.CSS_SELECTOR, "th a[href*='sort=size']").click()
        wait_for(f"order={direction} in the URL", lambda: driver.current_url,
                 lambda u: u.endswith(f"?sort=size&order={direction}"))
        seen = wait_for(f"rows by size {direction}", lambda: listed(driver),
                        lambda rows: rows == expected)
        print(f"browser: Size clicked: {direction}: {[name for name, _ in seen]}")

    driver.get(url)
    wait_for("the light background", lambda: background(driver),
             lambda b: b == LIGHT_BACKGROUND)
    driver.save_screenshot(os.path.join(shots, "listing-light.png"))
    axe_violations(driver, axe_source, "light")

    color_scheme(driver, "dark")
    wait_for("the dark background", lambda: background(driver),
             lambda b: b == DARK_BACKGROUND)
    print(f"browser: dark: body background {DARK_BACKGROUND}")
    driver.save_screenshot(os.path.join(shots, "listing-dark.png"))
    axe_violations(driver, axe_source, "dark")
    color_scheme(driver, "light")

    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": PHONE_WIDTH, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    driver.get(url)
    wait_for(f"a {PHONE_WIDTH} px screen", lambda: driver.execute_script(
        "return screen.width"), lambda w: w == PHONE_WIDTH)
    wait_for("the page to load", lambda: driver.execute_script(
        "return document.readyState"), lambda state: state == "complete")
    widths = driver.execute_script(
        "return [document.documentElement.scrollWidth, window.innerWidth]")
    # A mobile browser widens the layout viewport to content that does not fit (and
    # zooms out): then innerWidth grows past the screen along with scrollWidth.
    if widths[1] != PHONE_WIDTH or widths[0] > widths[1]:
        raise CheckFailed(f"horizontal scrolling on a {PHONE_WIDTH} px screen: scrollWidth "
                          f"{widths[0]}, innerWidth {widths[1]}")
    print(f"browser: phone: scrollWidth {widths[0]} <= innerWidth {widths[1]}")
    driver.save_screenshot(os.path.join(shots, "listing-phone.png"))
    axe_violations(driver, axe_source, "phone")


def main():
    url, root, axe_path, shots = sys.argv[1:5]
    with open(axe_path, encoding="utf-8") as axe_file:
        axe_source = axe_file.read()
    run("browser", lambda driver: check(driver, url, root, axe_source, shots))


if __name__ == "__main__":
    main()
