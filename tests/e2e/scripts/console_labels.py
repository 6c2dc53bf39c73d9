#!/usr/bin/env python3
"""Reads how `baton console` names agents' versions, in headless Chromium
(Debian's, through Playwright), for the e2e tests; prints what it saw as one
JSON object.

    console_labels.py labels URL BATON NATS_URL SESSION LIVE

- the agent filter, typed into the sessions list's form: `helper@2`, then `helper`;
- the live feed under the filter `helper@2`: LIVE tasks sent to `front` while
  the page is open, and the rows (and their labels) each page shows;
- SESSION's page: its header, path, path picture, timeline and context;
- the agents page: its headings, each type's versions and each instance's.

With BATON_SCREENSHOTS=DIR, it saves screenshots there.
"""

import re
import subprocess
import time

from console_browser import TIMEOUT_MS, new_page, serve, shot, watch_errors

SESSION_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f-]{27}")


def row_ids(page):
    return page.eval_on_selector_all(
        "#sessions tbody tr", "rows => rows.map(r => r.id.slice(2))")


def texts(page, selector):
    return page.eval_on_selector_all(selector, "found => found.map(n => n.textContent.trim())")


def filtered(page, url, agent):
    """The sessions the list shows for `agent`, typed into the form."""
    page.goto(url + "/")
    page.wait_for_selector("#live.on", timeout=TIMEOUT_MS)
    page.fill("input[name=agent]", agent)
    page.click("form.filters button")
    page.wait_for_url(re.compile(r".*[?&]agent="), timeout=TIMEOUT_MS)
    page.wait_for_selector("#live.on", timeout=TIMEOUT_MS)
    return {
        "rows": row_ids(page),
        "shown": int(page.inner_text("#shown")),
        "field": page.input_value("input[name=agent]"),
    }


def live(browser, url, baton, nats_url, count):
    """Sends `count` tasks to `front` with two pages open, the sessions list
    under `helper@2` and unfiltered; what each shows once they ended."""
    narrow = new_page(browser, viewport={"width": 1300, "height": 700})
    wide = new_page(browser, viewport={"width": 1300, "height": 700})
    errors = []
    for page in (narrow, wide):
        watch_errors(page, errors)
    narrow.goto(url + "/?agent=helper%402")
    wide.goto(url + "/")
    for page in (narrow, wide):
        page.wait_for_selector("#live.on", timeout=TIMEOUT_MS)
        # A mark that a reload or a navigation would wipe out.
        page.evaluate("window.__stayed = true")
    before = row_ids(narrow)
    sent = []
    for n in range(count):
        out = subprocess.run(
            [baton, "--nats-url", nats_url, "send", "--to", "front", "--direct", f"live task {n}"],
            capture_output=True, text=True, check=True,
        )
        sent.append(SESSION_ID.search(out.stdout).group(0))
    for session in sent:
        wide.wait_for_selector(f"#s-{session}[data-state=completed]", timeout=TIMEOUT_MS)
    # The filtered page took the same events; give it a moment to apply them.
    time.sleep(1)
    shot(narrow, "live-filtered")
    labels = {
        s: wide.inner_text(f"#s-{s} td.agent") for s in sent
    }
    paths = {
        s: wide.inner_text(f"#s-{s} td.path") for s in sent
    }
    return {
        "sent": sent,
        "before": before,
        "rows": row_ids(narrow),
        "narrow_labels": texts(narrow, "#sessions tbody td.agent"),
        "labels": labels,
        "paths": paths,
        "stayed": all(p.evaluate("window.__stayed === true") for p in (narrow, wide)),
        "errors": errors,
    }


def session_page(browser, url, session):
    page = new_page(browser, viewport={"width": 1300, "height": 900})
    errors = []
    watch_errors(page, errors)
    page.goto(f"{url}/sessions/{session}")
    page.wait_for_selector("#session svg.path", timeout=TIMEOUT_MS)
    shot(page, "session-versions")
    return {
        "header": page.inner_text("#agent"),
        "path": page.inner_text("#path-text"),
        "nodes": texts(page, "svg.path .node text"),
        "timeline": texts(page, "#timeline td.agent"),
        "roles": texts(page, "#context li.msg .role"),
        "trace": texts(page, "#context table.trace td.agent"),
        "errors": errors,
    }


def agents_page(browser, url):
    page = new_page(browser, viewport={"width": 1500, "height": 700})
    errors = []
    watch_errors(page, errors)
    page.goto(url + "/agents")
    page.wait_for_selector("#a-helper .beat", timeout=TIMEOUT_MS)
    shot(page, "agents-versions")
    beats = page.eval_on_selector_all(
        "#agents tbody tr",
        """rows => Object.fromEntries(rows.map(r => [r.id.slice(2),
            Array.from(r.querySelectorAll('.beat')).map(b =>
              [b.dataset.instance, b.dataset.version || null, b.textContent.trim()])]))""",
    )
    return {
        "headings": texts(page, "#agents thead th"),
        "versions": page.inner_text("#a-helper td.versions"),
        "beats": beats,
        "errors": errors,
    }


def labels(browser, url, baton, nats_url, session, count):
    page = new_page(browser, viewport={"width": 1300, "height": 700})
    errors = []
    watch_errors(page, errors)
    result = {
        "on_two": filtered(page, url, "helper@2"),
        "all_helper": filtered(page, url, "helper"),
        "errors": errors,
    }
    shot(page, "filtered")
    result["live"] = live(browser, url, baton, nats_url, int(count))
    result["session"] = session_page(browser, url, session)
    result["agents"] = agents_page(browser, url)
    return result


def main():
    serve({"labels": labels})


if __name__ == "__main__":
    main()
