//! A conversation as it was said: each turn's message, the questions its
//! agents asked the user and the answers, and the answer with the agent
//! (and version) that gave it, read from the turns' sessions. Long texts
//! fold (`<details>`, which needs no script) with their first lines shown.

use baton_client::Client;
use baton_gateway::turn::{TurnRead, labelled};
use baton_proto::{Conversation, ConversationTurn};
use futures::StreamExt;
use maud::{Markup, html};
use uuid::Uuid;

use crate::view::short;

/// How many sessions a page reads at once: a long conversation is read
/// in parallel, without opening a read per turn all at once.
const READS: usize = 8;

/// A text longer than this many lines folds.
const FOLD_LINES: usize = 6;
/// A text longer than this many characters folds.
const FOLD_CHARS: usize = 700;
/// What a folded text shows: its first lines...
const SHOWN_LINES: usize = 3;
/// ...and at most this many characters of them.
const SHOWN_CHARS: usize = 300;

/// A turn as read from its session: what was said, or nothing when its
/// events are gone (expired with the events stream) or could not be read.
pub(super) enum Read {
    TurnRead(TurnRead),
    Gone,
    Unread,
}

/// Reads the sessions of `turns`, and of the `running` turn, a few at a
/// time: what each said, in the turns' order, and what the running one
/// said so far.
pub(super) async fn read(
    client: &Client,
    turns: &[ConversationTurn],
    running: Option<Uuid>,
) -> (Vec<Read>, Option<TurnRead>) {
    // Owned ids: a stream borrowing `turns` would not be `Send` in a handler.
    let sessions: Vec<Uuid> = turns
        .iter()
        .map(|turn| turn.session)
        .chain(running)
        .collect();
    let mut read: Vec<Read> = futures::stream::iter(sessions)
        .map(|session| async move {
            match client.history(session).await {
                Ok(events) if events.is_empty() => Read::Gone,
                Ok(events) => Read::TurnRead(TurnRead::read(&events)),
                Err(err) => {
                    tracing::warn!(error = %err, %session, "a turn's session could not be read");
                    Read::Unread
                }
            }
        })
        .buffered(READS)
        .collect()
        .await;
    let running = match running.and_then(|_| read.pop()) {
        Some(Read::TurnRead(said)) => Some(said),
        _ => None,
    };
    (read, running)
}

/// The versions the conversation is pinned to, as `TYPE@VERSION`.
pub(super) fn pins(record: &Conversation) -> Markup {
    html! {
        @if !record.versions.is_empty() {
            p #pins {
                "Pinned to "
                @for (n, (agent, version)) in record.versions.iter().enumerate() {
                    @if n > 0 { ", " }
                    code.pin { (labelled(agent, Some(version))) }
                }
                ": its next turns go to these versions."
            }
        }
    }
}

/// The ended turns, each as it was said.
pub(super) fn turns(turns: &[ConversationTurn], said: &[Read]) -> Markup {
    html! {
        @if turns.is_empty() {
            p.muted { "No turn has ended yet." }
        }
        ol #talk {
            @for (turn, read) in turns.iter().zip(said) { (item(turn, read)) }
        }
    }
}

/// One turn: its message, its questions with their answers, its answer.
fn item(turn: &ConversationTurn, read: &Read) -> Markup {
    let session = format!("/sessions/{}", turn.session);
    html! {
        li.turn id=(format!("turn-{}", turn.turn)) data-turn=(turn.turn) data-ended=(turn.ended.as_str()) {
            p.meta {
                b { "Turn " (turn.turn) } " · "
                a.session href=(session) { "session " (short(turn.session)) } " · "
                span.ended { (turn.ended.as_str()) }
                @if let Read::TurnRead(said) = read {
                    @if !said.path.is_empty() {
                        " · " span.path title="the agents the turn went through" { (said.path.join(" → ")) }
                    }
                }
            }
            div.said.user { span.who { "user" } (text(&turn.text)) }
            @match read {
                Read::TurnRead(said) => (answered(said)),
                Read::Gone => p.muted.gone {
                    "Its session's events are no longer kept: the answer cannot be shown."
                },
                Read::Unread => p.muted.gone {
                    "Its session could not be read: open it to see the answer."
                },
            }
        }
    }
}

/// What the agents said in a turn: its questions with the user's answers,
/// then the answer or the failure.
fn answered(said: &TurnRead) -> Markup {
    let by = said.by.as_deref().unwrap_or("the agent");
    html! {
        @for asked in &said.asked {
            div.said.asked { span.who { (asked.by) " asked" } (text(&asked.question)) }
            @match &asked.answer {
                Some(answer) => div.said.user.reply { span.who { "user answered" } (text(answer)) },
                None => p.muted.unanswered { "Not answered." },
            }
        }
        @if let Some(answer) = &said.answer {
            div.said.agent { span.who.by { (by) } (text(answer)) }
        } @else if let Some(failed) = &said.failed {
            div.said.failed { span.who { (by) " failed" } div.text { (failed) } }
        }
    }
}

/// The running turn's question to the user, when it waits for the answer.
pub(super) fn asking(running: &TurnRead) -> Markup {
    html! {
        @if let Some(asked) = running.asked.last().filter(|asked| asked.answer.is_none()) {
            div.said.asked #asking {
                span.who { (asked.by) " asks" } (text(&asked.question))
                p.muted { "The conversation's next message answers it." }
            }
        }
    }
}

/// How a running turn ended, when its session has: the answer (and who
/// gave it) or why it failed.
pub(super) fn ended(running: &TurnRead) -> Option<Markup> {
    if let Some(answer) = &running.answer {
        let by = running.by.as_deref().unwrap_or("the agent");
        return Some(html! { span.who { (by) " answered" } (text(answer)) });
    }
    let failed = running.failed.as_deref()?;
    Some(html! { span.who { "failed" } (text(failed)) })
}

/// A message's text, folded when long: its first lines show, the rest
/// opens with a click.
fn text(text: &str) -> Markup {
    match fold(text) {
        None => html! { div.text { (text) } },
        Some((shown, rest)) => html! {
            details.fold {
                summary {
                    span.text.shown { (shown) }
                    span.more { "… show all " (text.lines().count()) " lines" }
                }
                div.text.rest { (rest) }
            }
        },
    }
}

/// A long text split where it folds: what shows, and the rest (without
/// the line break between them); `None` when it is short enough.
fn fold(text: &str) -> Option<(&str, &str)> {
    if text.lines().count() <= FOLD_LINES && text.chars().count() <= FOLD_CHARS {
        return None;
    }
    let mut cut = text.len();
    if let Some((at, _)) = text.match_indices('\n').nth(SHOWN_LINES - 1) {
        cut = at;
    }
    if let Some((at, _)) = text.char_indices().nth(SHOWN_CHARS) {
        cut = cut.min(at);
    }
    let (shown, rest) = text.split_at(cut);
    Some((shown, rest.strip_prefix('\n').unwrap_or(rest)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_text_folds_after_its_first_lines() {
        assert_eq!(fold("short"), None);
        let six = "1\n2\n3\n4\n5\n6";
        assert_eq!(fold(six), None);
        let seven = "1\n2\n3\n4\n5\n6\n7";
        assert_eq!(fold(seven), Some(("1\n2\n3", "4\n5\n6\n7")));
        let wide = "é".repeat(800);
        let (shown, rest) = fold(&wide).unwrap_or_default();
        assert_eq!((shown.chars().count(), rest.chars().count()), (300, 500));
    }

    #[test]
    fn a_folded_text_is_escaped_and_opens_without_script() {
        let long = format!("<b>first</b>{}", "\nmore".repeat(9));
        let markup = text(&long).into_string();
        assert!(
            markup.starts_with("<details class=\"fold\"><summary>"),
            "{markup}"
        );
        assert!(markup.contains("&lt;b&gt;first&lt;/b&gt;"), "{markup}");
        assert!(markup.contains("show all 10 lines"), "{markup}");
        assert!(!markup.contains("<b>"), "{markup}");
    }
}
