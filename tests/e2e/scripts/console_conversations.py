#!/usr/bin/env python3
"""Reads a conversation's page of `baton console` in headless Chromium (Debian's,
through Playwright) for the e2e tests, and prints what it saw as one JSON object.

    console_conversations.py talk URL ID   each turn as said; opens the folded answer

With BATON_SCREENSHOTS=DIR, it saves screenshots there.
"""

import urllib.parse

from console_browser import TIMEOUT_MS, new_page, serve, shot, watch_errors

# Each turn of the page as the test compares it: what a person reads in it.
TURNS = """ts => ts.map(t => {
    const text = (el) => el ? el.textContent : null;
    const said = (sel) => Array.from(t.querySelectorAll(sel)).map(
        d => [text(d.querySelector('.who')), text(d.querySelector('.text'))]);
    const agent = t.querySelector('.said.agent');
    const fold = agent && agent.querySelector('details.fold');
    return {
        turn: t.dataset.turn,
        message: text(t.querySelector('.said.user:not(.reply) .text')),
        asked: said('.said.asked'),
        replies: said('.said.user.reply'),
        by: agent && text(agent.querySelector('.who.by')),
        answer: fold
            ? text(fold.querySelector('.shown')) + '\\n' + text(fold.querySelector('.rest'))
            : agent && text(agent.querySelector('.text')),
        path: text(t.querySelector('.meta .path')),
        session: t.querySelector('.meta a.session').getAttribute('href'),
        folded: !!fold,
    };
})"""


def talk(browser, url, conversation):
    page = new_page(browser, viewport={"width": 1300, "height": 900})
    errors = []
    watch_errors(page, errors)
    page.goto(f"{url}/conversations/{urllib.parse.quote(conversation, safe='')}")
    page.wait_for_selector("#talk li.turn", timeout=TIMEOUT_MS)
    result = {
        "turns": page.eval_on_selector_all("#talk li.turn", TURNS),
        "pins": page.eval_on_selector_all("#pins code.pin", "cs => cs.map(c => c.textContent)"),
    }
    shot(page, "conversation-talk")
    # The long answer shows its first lines; a click on them opens the rest.
    fold = page.locator("#talk li.turn .said.agent details.fold")
    long = {
        "shown": fold.locator("summary .shown").inner_text(),
        "more": fold.locator("summary .more").inner_text(),
        "open_before": fold.evaluate("d => d.open"),
        "rest_visible_before": fold.locator(".rest").is_visible(),
    }
    fold.locator("summary").click()
    fold.locator(".rest").wait_for(state="visible", timeout=TIMEOUT_MS)
    long["open_after"] = fold.evaluate("d => d.open")
    long["rest_visible_after"] = fold.locator(".rest").is_visible()
    long["more_visible_after"] = fold.locator("summary .more").is_visible()
    long["rest"] = fold.locator(".rest").inner_text()
    result["long"] = long
    shot(page, "conversation-talk-open")
    # Each turn still links to its session.
    page.click("#talk li.turn:first-child .meta a.session")
    page.wait_for_selector("#session", timeout=TIMEOUT_MS)
    result["landed"] = page.url.rsplit("/", 1)[-1]
    result["errors"] = errors
    return result


def main():
    serve({"talk": talk})


if __name__ == "__main__":
    main()
