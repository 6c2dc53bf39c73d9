#!/usr/bin/env python3
"""Drives `baton console` in headless Chromium (Debian's, through Playwright)
for the e2e tests, and prints what it saw as one JSON object.

    console_browser.py live    URL BATON NATS_URL   send a task, watch its row go live to completed
    console_browser.py replay  URL SEQ              replay dead letter SEQ from the page
    console_browser.py inbox   URL SESSION ANSWER   answer the inbox task of SESSION from the page
    console_browser.py decide  URL SESSION DECISION [TEXT]  settle SESSION's waiting tool call from the page
    console_browser.py auth    URL TOKEN            without the token: refused; with it: served
    console_browser.py paint   URL                  page size and first paint of the sessions list
    console_browser.py tools   URL SESSION          the tool calls listed on a session's page
    console_browser.py feedback URL SESSION SCORE NOTE  feedback from a finished session's page

With BATON_SCREENSHOTS=DIR, each phase saves screenshots there.
"""

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

from playwright.sync_api import sync_playwright

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = os.environ.get("BATON_SCREENSHOTS")
TIMEOUT_MS = 30_000


PAGES = []


def new_page(browser, **options):
    page = browser.new_page(**options)
    PAGES.append(page)
    return page


def shot(page, name):
    if SHOTS:
        os.makedirs(SHOTS, exist_ok=True)
        page.screenshot(path=os.path.join(SHOTS, f"{name}.png"), full_page=True)


def watch_errors(page, seen):
    page.on("pageerror", lambda err: seen.append(f"pageerror: {err}"))
    page.on("dialog", lambda dialog: (seen.append(f"dialog: {dialog.message}"), dialog.dismiss()))


def live(browser, url, baton, nats_url):
    page = new_page(browser, viewport={"width": 1300, "height": 700})
    errors = []
    watch_errors(page, errors)
    page.goto(url + "/")
    # (wait_for_function would poll with eval, which the console's CSP forbids)
    page.wait_for_selector("#live.on", timeout=TIMEOUT_MS)
    # A mark that a reload or a navigation would wipe out.
    page.evaluate("window.__stayed = true")
    sent = subprocess.run(
        [baton, "--nats-url", nats_url, "send", "I want a refund for order ABC-123"],
        capture_output=True, text=True, check=True,
    )
    session = re.search(r"[0-9a-f]{8}-[0-9a-f-]{27}", sent.stdout).group(0)
    row = f"#s-{session}"
    page.wait_for_selector(f"{row}[data-state=completed]", timeout=TIMEOUT_MS)
    result = {
        "session": session,
        "state": page.get_attribute(row, "data-state"),
        "path": page.inner_text(f"{row} td.path"),
        "answer": page.inner_text(f"{row} td.what"),
        "stayed": page.evaluate("window.__stayed === true"),
        "errors": errors,
    }
    shot(page, "sessions")
    # Filters: by state and agent on the server, and a session id goes straight to its page.
    page.goto(url + "/?state=failed")
    result["in_failed"] = page.locator(row).count()
    page.goto(url + "/?state=completed&agent=refund&q=refund")
    result["in_completed_refund"] = page.locator(row).count()
    page.fill("input[name=q]", session)
    page.click("form.filters button")
    page.wait_for_url(re.compile(r".*/sessions/.*"))
    result["searched"] = page.url.rsplit("/", 1)[-1]
    page.goto(url + "/")
    page.click(f"{row} td.id a")
    page.wait_for_selector("#session svg.path")
    result["page_path"] = page.inner_text("#path-text")
    result["nodes"] = page.eval_on_selector_all("svg.path .node text", "ns => ns.map(n => n.textContent)")
    result["context_messages"] = page.eval_on_selector_all("#context li.msg", "ms => ms.length")
    shot(page, "session")
    page.goto(url + "/agents")
    page.wait_for_selector("#agents tbody tr")
    result["agents"] = page.eval_on_selector_all("#agents tbody tr td:first-child b", "ts => ts.map(t => t.textContent)")
    result["descriptions"] = page.eval_on_selector_all("#agents tbody tr td:first-child small", "ts => ts.map(t => t.textContent)")
    shot(page, "agents")
    # A worker that starts while the page is open appears on it, live.
    page.evaluate("window.__stayed = true")
    worker = subprocess.Popen(
        [baton, "--nats-url", nats_url, "worker", "late_joiner", "--relay", "--heartbeat-ms", "500"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        page.wait_for_selector("#a-late_joiner", timeout=TIMEOUT_MS)
        result["joined_live"] = page.evaluate("window.__stayed === true")
    finally:
        worker.terminate()
        worker.wait()
    return result


def tools(browser, url, session):
    page = new_page(browser, viewport={"width": 1300, "height": 700})
    errors = []
    watch_errors(page, errors)
    page.goto(f"{url}/sessions/{session}")
    page.wait_for_selector("#tool-calls tr.call", timeout=TIMEOUT_MS)
    shot(page, "tool-calls")
    return {
        "tools": page.eval_on_selector_all("#tool-calls td.tool", "ts => ts.map(t => t.textContent)"),
        "outcomes": page.eval_on_selector_all("#tool-calls td.outcome", "ts => ts.map(t => t.textContent)"),
        "errors": errors,
    }


def replay(browser, url, seq):
    page = new_page(browser, viewport={"width": 1300, "height": 700})
    errors = []
    watch_errors(page, errors)
    page.goto(url + "/dlq")
    entry = f"#dl-{seq}"
    page.wait_for_selector(entry)
    session = page.get_attribute(entry, "data-session")
    shot(page, "dead-letters")
    page.click(f"{entry} a.button")
    page.wait_for_selector("#confirm")
    page.click("#confirm")
    page.wait_for_url(re.compile(r".*/sessions/.*"))
    page.wait_for_selector("#session[data-state=completed]", timeout=TIMEOUT_MS)
    return {
        "session": session,
        "landed": page.url.rsplit("/", 1)[-1],
        "state": page.get_attribute("#session", "data-state"),
        "errors": errors,
    }


def replay_hop(browser, url, session, hop):
    """Replays a finished session from one of its hops, from its page."""
    page = new_page(browser, viewport={"width": 1300, "height": 900})
    errors = []
    watch_errors(page, errors)
    page.goto(f"{url}/sessions/{session}")
    page.wait_for_selector("#replay")
    hops = page.eval_on_selector_all(
        "#replay-hops li", "items => items.map(i => i.querySelector('b').textContent)"
    )
    shot(page, "replay-section")
    page.click(f".replay-from[data-hop='{hop}']")
    page.wait_for_url(lambda landed: not landed.endswith(session))
    page.wait_for_selector("#session[data-state=completed]", timeout=TIMEOUT_MS)
    return {
        "hops": hops,
        "landed": page.url.rsplit("/", 1)[-1],
        "state": page.get_attribute("#session", "data-state"),
        "replay_of": page.get_attribute("#replay-of a", "href"),
        "errors": errors,
    }


def feedback(browser, url, session, score, note):
    """Gives feedback on a finished session from its page."""
    page = new_page(browser, viewport={"width": 1300, "height": 900})
    errors = []
    watch_errors(page, errors)
    # The page's live refresh (on connecting to the feed) is held until the
    # form is being filled in, then let through: the form must stay the node
    # it was, with what was typed, so that the click lands.
    held = []
    fragment = re.compile(r"/sessions/[^/?]+\?fragment=1$")
    page.route(fragment, lambda route: held.append(route))
    page.goto(f"{url}/sessions/{session}")
    page.wait_for_selector("#feedback")
    shot(page, "feedback-section")
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while not held and time.monotonic() < deadline:
        page.wait_for_timeout(50)
    page.evaluate("document.getElementById('feedback').dataset.mark = 'typed-into'")
    page.fill("#feedback-score", score)
    page.fill("#feedback-note", note)
    for route in held:
        route.continue_()
    page.unroute(fragment)
    page.wait_for_selector("body[data-refreshed]")
    kept = {
        "held": len(held),
        "mark": page.get_attribute("#feedback", "data-mark"),
        "score": page.input_value("#feedback-score"),
    }
    page.click("#feedback-send")
    page.wait_for_selector("#notice")
    shot(page, "feedback-recorded")
    result = {"title": page.inner_text("h1"), "notice": page.inner_text("#notice"), "kept": kept}
    # A score the form would not send, posted with the page's own token.
    page.goto(f"{url}/sessions/{session}")
    csrf = page.get_attribute("#feedback input[name=csrf]", "value")
    bad = page.request.post(
        f"{url}/sessions/{session}/feedback", form={"csrf": csrf, "score": "1.5", "note": ""}
    )
    result.update({"bad_status": bad.status, "bad_text": bad.text(), "errors": errors})
    return result


def growing(browser, url, session):
    """Watches a session's answer being written on its page, to its end."""
    page = new_page(browser, viewport={"width": 1300, "height": 900})
    errors = []
    watch_errors(page, errors)
    page.goto(f"{url}/sessions/{session}")
    samples = []
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while time.monotonic() < deadline:
        if page.query_selector("#session[data-state=completed]"):
            break
        node = page.query_selector("#writing-text")
        text = node.text_content() if node else ""
        if text and (not samples or samples[-1] != text):
            samples.append(text)
            if len(samples) == 2:
                shot(page, "writing")
        page.wait_for_timeout(50)
    return {
        "samples": samples,
        "state": page.get_attribute("#session", "data-state"),
        "answer": page.text_content("#answer") if page.query_selector("#answer") else None,
        "errors": errors,
    }


def inbox_page(browser, url, entry):
    """The inbox page once `entry` (a selector) shows, and where its errors go."""
    page = new_page(browser, viewport={"width": 1300, "height": 900})
    errors = []
    watch_errors(page, errors)
    page.goto(url + "/inbox")
    page.wait_for_selector(entry)
    return page, errors


def sign_in(browser, url, session):
    """What the inbox shows of a call waiting for a new sign-in: its text,
    and how many forms and buttons it has (none: the sign-in is a command)."""
    entry = f"article[data-session='{session}'][data-reason='authorization_required']"
    page, errors = inbox_page(browser, url, entry)
    shown = page.locator(entry)
    return {"text": shown.inner_text(), "forms": shown.locator("form").count(),
            "buttons": shown.locator("button").count(), "errors": errors}


def inbox(browser, url, session, answer, action="complete", to=""):
    task = f"article[data-session='{session}']"
    page, errors = inbox_page(browser, url, task)
    result = {
        # The question, as text: markup from NATS must show, not run.
        "question_text": page.inner_text(f"{task} q"),
        "pwned_in_inbox": page.evaluate("window.__pwned === undefined ? null : window.__pwned"),
    }
    shot(page, "inbox")
    page.fill(f"{task} textarea[name=text]", answer)
    page.select_option(f"{task} select[name=action]", action)
    if to:
        page.fill(f"{task} input[name=to]", to)
    page.click(f"{task} button[type=submit]")
    page.wait_for_url(re.compile(r".*/sessions/.*"))
    page.wait_for_selector("#session[data-state=completed]", timeout=TIMEOUT_MS)
    result.update({
        "landed": page.url.rsplit("/", 1)[-1],
        "answer": page.inner_text("#answer"),
        "path": page.inner_text("#path-text"),
        "first_message": page.inner_text("#context li.msg >> nth=0 >> .content"),
        "pwned_in_session": page.evaluate("window.__pwned === undefined ? null : window.__pwned"),
        "errors": errors,
    })
    return result


def decide(browser, url, session, decision, text=""):
    call = f"article.call[data-session='{session}']"
    page, errors = inbox_page(browser, url, call)
    result = {
        "reason": page.get_attribute(call, "data-reason"),
        "tool": page.inner_text(f"{call} code.tool") if page.query_selector(f"{call} code.tool") else None,
        "question": page.inner_text(f"{call} q.question") if page.query_selector(f"{call} q.question") else None,
        # The arguments, as text: markup the model wrote must show, not run.
        "arguments": json.loads(page.inner_text(f"{call} pre.arguments")) if page.query_selector(f"{call} pre.arguments") else None,
        "buttons": page.eval_on_selector_all(f"{call} button[name=decision]", "found => found.map(b => b.value)"),
        "pwned": page.evaluate("window.__pwned === undefined ? null : window.__pwned"),
    }
    shot(page, f"inbox-{decision}")
    if text:
        field = {"happened": "result", "answered": "answer"}.get(decision, "note")
        page.fill(f"{call} textarea[name={field}]", text)
    page.click(f"{call} button[value={decision}]")
    page.wait_for_selector("#notice", timeout=TIMEOUT_MS)
    result.update({"notice": page.inner_text("#notice"), "errors": errors})
    return result


def cancel(browser, url, session):
    page = new_page(browser, viewport={"width": 1300, "height": 800})
    errors = []
    watch_errors(page, errors)
    page.goto(f"{url}/sessions/{session}")
    before = page.get_attribute("#session", "data-state")
    # Live updates may re-render the page meanwhile; the opened form stays
    # open, but a click that lands during a re-render opens nothing: open
    # it again until its button shows.
    for _ in range(5):
        page.click("#cancel-session summary")
        page.wait_for_timeout(400)
        if page.is_visible("#cancel"):
            break
    page.click("#cancel")
    page.wait_for_selector("#session[data-state=failed]", timeout=TIMEOUT_MS)
    return {
        "before": before,
        "landed": page.url.rsplit("/", 1)[-1],
        "failure": page.inner_text("#failure"),
        "button_left": page.locator("#cancel").count(),
        "errors": errors,
    }


def conversation(browser, url, session):
    # From the sessions list, a turn's row links to its conversation.
    page = new_page(browser, viewport={"width": 1300, "height": 800})
    errors = []
    watch_errors(page, errors)
    page.goto(url)
    link = f"#s-{session} a.turn"
    page.wait_for_selector(link, timeout=TIMEOUT_MS)
    page.click(link)
    page.wait_for_selector("#turns tr.turn", timeout=TIMEOUT_MS)
    shot(page, "conversation")
    rows = page.eval_on_selector_all(
        "#turns tr.turn",
        "rs => rs.map(r => Array.from(r.querySelectorAll('td')).map(td => td.textContent))",
    )
    sessions = page.eval_on_selector_all(
        "#turns tr.turn td.id a", "as => as.map(a => a.getAttribute('href'))"
    )
    # Each turn links to its session.
    page.click("#turns tr.turn:last-child td.id a")
    page.wait_for_selector("#session", timeout=TIMEOUT_MS)
    return {
        "rows": rows,
        "sessions": sessions,
        "landed": page.url.rsplit("/", 1)[-1],
        "injected": page.evaluate("() => window.__injected === true"),
        "errors": errors,
    }


def status(url, headers=None, data=None, body=False):
    """The response's status (with its body's first line when `body`)."""
    request = urllib.request.Request(url, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            code, text = response.status, response.read()
    except urllib.error.HTTPError as err:
        code, text = err.code, err.read()
    return [code, text.decode(errors="replace").splitlines()[0]] if body else code


def auth(browser, url, token):
    result = {
        "no_token": status(url + "/"),
        "wrong_token": status(url + "/", {"Authorization": "Bearer not-" + token}),
        "bearer": status(url + "/", {"Authorization": "Bearer " + token}),
        "no_token_replay": status(url + "/dlq/1/replay", data=b"csrf=x"),
        "bad_csrf_replay": status(url + "/dlq/1/replay", {"Authorization": "Bearer " + token}, b"csrf=forged"),
        "cross_site_replay": status(
            url + "/dlq/1/replay",
            {"Authorization": "Bearer " + token, "Sec-Fetch-Site": "cross-site"},
            b"csrf=forged",
            body=True,
        ),
    }
    context = browser.new_context(http_credentials={"username": "ops", "password": token})
    page = context.new_page()
    response = page.goto(url + "/")
    result["browser"] = response.status
    result["title"] = page.title()
    return result


def paint(browser, url):
    page = new_page(browser, viewport={"width": 1300, "height": 900})
    started = time.monotonic()
    response = page.goto(url + "/", wait_until="load")
    loaded_ms = (time.monotonic() - started) * 1000
    fcp = page.evaluate(
        "() => { const e = performance.getEntriesByName('first-contentful-paint')[0];"
        " return e ? e.startTime : null; }"
    )
    nav = page.evaluate("() => { const n = performance.getEntriesByType('navigation')[0];"
                        " return {transfer: n.transferSize, body: n.decodedBodySize}; }")
    return {
        "status": response.status,
        "rows": page.eval_on_selector_all("#sessions tbody tr", "rs => rs.length"),
        "html_bytes": nav["body"],
        "transfer_bytes": nav["transfer"],
        "first_contentful_paint_ms": fcp,
        "load_ms": round(loaded_ms, 1),
    }


def serve(phases):
    """Runs the phase named on the command line (one of `phases`, a name to
    a function of the browser, the URL and the rest of the arguments) in a
    headless Chromium, and prints its result as JSON. On failure, what each
    page showed goes to stderr, for the test's message."""
    phase, url, *rest = sys.argv[1:]
    if phase not in phases:
        sys.exit(f"unknown phase {phase}")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            result = phases[phase](browser, url, *rest)
        except Exception:
            for page in PAGES:
                print(f"--- {page.url}\n{page.content()[:6000]}", file=sys.stderr)
            raise
        finally:
            browser.close()
    print(json.dumps(result))


def main():
    serve({
        "live": live,
        "replay": replay,
        "replay_hop": replay_hop,
        "feedback": feedback,
        "growing": growing,
        "inbox": inbox,
        "sign_in": sign_in,
        "decide": decide,
        "cancel": cancel,
        "auth": auth,
        "paint": lambda browser, url, *_: paint(browser, url),
        "tools": tools,
        "conversation": conversation,
    })


if __name__ == "__main__":
    main()
