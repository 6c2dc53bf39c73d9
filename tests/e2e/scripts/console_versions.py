#!/usr/bin/env python3
"""Drives the console's versions page in headless Chromium for the e2e tests,
and prints what it saw as one JSON object.

    console_versions.py back URL BATON NATS_URL AGENT
        open the versions page from the navigation, read AGENT's versions,
        run `baton rollout AGENT --back`, and read them again once the page
        shows the change, without a reload

    console_versions.py gated URL AGENT
        open the versions page and read AGENT's gated rollout decisions

With BATON_SCREENSHOTS=DIR, it saves screenshots there.
"""

import subprocess

from console_browser import TIMEOUT_MS, new_page, serve, shot, watch_errors


def versions(page, agent):
    """AGENT's rows as [version label, state, weight, live workers]."""
    section = f"section.agent-versions[data-agent={agent}]"
    return page.eval_on_selector_all(
        f"{section} table.versions tbody tr",
        "rows => rows.map(r => [r.cells[0].textContent, r.dataset.state,"
        " Number(r.dataset.weight), r.cells[3].textContent])",
    )


def back(browser, url, baton, nats_url, agent):
    page = new_page(browser, viewport={"width": 1300, "height": 800})
    errors = []
    watch_errors(page, errors)
    page.goto(url + "/")
    page.click("header nav a[href='/versions']")
    section = f"section.agent-versions[data-agent={agent}]"
    page.wait_for_selector(f"{section} table.versions tbody tr")
    result = {
        "title": page.title(),
        "before": versions(page, agent),
        "said_before": page.inner_text(f"{section} p.rollout"),
        "headings": page.eval_on_selector_all(
            f"{section} table.versions thead th", "ths => ths.map(t => t.textContent)"
        ),
    }
    shot(page, "versions-before")
    # A mark that a reload or a navigation would wipe out.
    page.evaluate("window.__stayed = true")
    subprocess.run(
        [baton, "--nats-url", nats_url, "rollout", agent, "--back"],
        capture_output=True, text=True, check=True,
    )
    # The ramping row is gone once the page has read the change.
    page.wait_for_selector(
        f"{section} table.versions tbody tr[data-state=current][data-weight='100']",
        timeout=TIMEOUT_MS,
    )
    result["after"] = versions(page, agent)
    result["said_after"] = page.inner_text(f"{section} p.rollout")
    result["changes"] = page.eval_on_selector_all(
        f"{section} ol.changes li", "lis => lis.map(l => [l.dataset.what, l.dataset.version])"
    )
    result["stayed"] = page.evaluate("window.__stayed === true")
    result["errors"] = errors
    shot(page, "versions-after")
    return result


def gated(browser, url, agent):
    page = new_page(browser, viewport={"width": 1300, "height": 800})
    errors = []
    watch_errors(page, errors)
    page.goto(url + "/versions")
    section = f"section.agent-versions[data-agent={agent}]"
    page.wait_for_selector(f"{section} ol.decisions li")
    result = {
        "decisions": page.eval_on_selector_all(
            f"{section} ol.decisions li",
            "lis => lis.map(l => [l.dataset.what, Number(l.dataset.step), l.textContent])",
        ),
        "summary": page.inner_text(f"{section} details.decisions summary"),
        "errors": errors,
    }
    shot(page, "versions-gated")
    return result


def main():
    serve({"back": back, "gated": gated})


if __name__ == "__main__":
    main()
