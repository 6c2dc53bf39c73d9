//! The operator's pages: agent pools, dead letters and the human inbox.

use std::collections::HashMap;

use baton_client::DeadLetterEntry;
use baton_client::InboxEntry;
use baton_proto::{Candidate, Envelope, Gate, Reason};
use maud::{Markup, html};

use crate::index::{Versioned, label};
use crate::view::{clock, context_view, csrf, raw_bytes, span};

/// The latest heartbeat of each instance of each agent type.
pub(crate) type Heartbeats = HashMap<String, HashMap<String, Beat>>;

/// What an instance's latest heartbeat said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Beat {
    /// When it arrived, unix ms.
    pub(crate) at: u64,
    /// The version the instance runs, if it names one.
    pub(crate) version: Option<String>,
}

/// The agent pools (the table is what live updates replace).
pub(crate) fn agents(
    candidates: &[Candidate],
    beats: &Heartbeats,
    versioned: &Versioned,
    now: u64,
) -> Markup {
    html! {
        h1 { "Agents" }
        p.muted { "Every agent type the registry knows, refreshed as heartbeats arrive." }
        (agents_table(candidates, beats, versioned, now))
    }
}

/// The agents table alone; each instance says which version it runs, as
/// `TYPE@VERSION` for a versioned type, else as the label its heartbeat
/// carries (a spec's hash), which no work is pinned to.
pub(crate) fn agents_table(
    candidates: &[Candidate],
    beats: &Heartbeats,
    versioned: &Versioned,
    now: u64,
) -> Markup {
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "–".to_owned());
    html! {
        table #agents {
            thead { tr {
                th { "Agent" } th { "Workers (live)" } th { "Versions (live workers each)" } th { "Tier" }
                th { "Capabilities" } th { "Domains" }
                th title="messages being handled / how many the live workers take at once" { "In flight / capacity (messages)" }
                th title="0 idle, 1 at capacity, above 1 with a backlog" { "Load (1 = at capacity)" }
                th title="messages waiting in the agent type's consumer" { "Backlog (messages waiting)" }
                th title="share of handled messages that did not fail" { "Success (% of handled messages)" }
                th { "Instances (version run, last heartbeat)" }
            } }
            tbody {
                @if candidates.is_empty() {
                    tr { td colspan="11" { "No live agents: start workers with " code { "baton worker <type>" } "." } }
                }
                @for c in candidates {
                    tr id=(format!("a-{}", c.agent)) {
                        td { b { (c.agent) } @if let Some(text) = &c.description { br; small.muted { (text) } } }
                        td.num { (c.instances) }
                        td.versions { (or_dash(versions(c))) }
                        td.num { (c.tier) }
                        td { (c.capabilities.join(", ")) }
                        td { (c.domains.join(", ")) }
                        td.num { (or_dash(c.in_flight.zip(c.capacity).map(|(i, cap)| format!("{i}/{cap}")))) }
                        td.num { (format!("{:.2}", c.load)) }
                        td.num { (or_dash(c.backlog.map(|b| b.to_string()))) }
                        td.num { (or_dash(c.success_ratio.map(|r| format!("{:.0}%", r * 100.0)))) }
                        td.beats {
                            @for (instance, beat) in instances(beats, &c.agent) {
                                span.beat data-instance=(instance) data-version=[beat.version.as_deref()] title=(clock(beat.at)) {
                                    @let deployed = beat.version.as_deref().filter(|_| versioned.contains(&c.agent));
                                    (instance) " runs " b.runs { (label(&c.agent, deployed)) }
                                    @if let (None, Some(v)) = (deployed, &beat.version) { " (version label " code { (v) } ")" }
                                    ", heard " (span(now.saturating_sub(beat.at))) " ago"
                                } " "
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The instances of `agent` that sent heartbeats, by instance id (a
/// stable order for a table that refreshes live).
fn instances<'a>(beats: &'a Heartbeats, agent: &str) -> Vec<(&'a String, &'a Beat)> {
    let mut all: Vec<_> = beats.get(agent).into_iter().flatten().collect();
    all.sort_by(|a, b| a.0.cmp(b.0));
    all
}

/// The versions `c`'s live instances run, each with how many workers run
/// it: `1 (2 workers), 2 (1 worker)`; `None` when none names one.
fn versions(c: &Candidate) -> Option<String> {
    (!c.versions.is_empty()).then(|| {
        let each = c.versions.iter().map(|(version, n)| {
            let workers = if *n == 1 { "worker" } else { "workers" };
            format!("{version} ({n} {workers})")
        });
        each.collect::<Vec<_>>().join(", ")
    })
}

/// `agent` with the version `envelope`'s session is pinned to, if any.
fn pinned(envelope: &Envelope, agent: &str) -> String {
    label(
        agent,
        envelope.versions.get(agent).map(|version| version.as_str()),
    )
}

fn envelope_summary(envelope: &Envelope) -> Markup {
    html! {
        p { "Question: " q { (envelope.context.initial_query) } }
        p { "Path: "
            @if envelope.path.is_empty() { "none yet (sent straight to this agent type)" }
            (envelope.path.iter().map(|h| pinned(envelope, &h.agent)).collect::<Vec<_>>().join(" → "))
            @if let Some(reason) = &envelope.reason { " · reason " code { (reason.as_str()) } }
            @if let Some(from) = &envelope.from { " · from " b { (pinned(envelope, from)) } }
        }
    }
}

/// The dead letters, by reason and agent.
pub(crate) fn dead_letters(entries: &[DeadLetterEntry]) -> Markup {
    let mut sorted: Vec<&DeadLetterEntry> = entries.iter().collect();
    sorted.sort_by(|a, b| {
        (a.reason.as_str(), &a.agent, a.seq).cmp(&(b.reason.as_str(), &b.agent, b.seq))
    });
    html! {
        h1 { "Dead letters" }
        @if sorted.is_empty() { p #empty { "No dead letters." } }
        @for entry in sorted {
            @let envelope = <baton_proto::Envelope as baton_proto::Wire>::from_msgpack_limited(&entry.payload, usize::MAX);
            @let agent = match &envelope { Ok(envelope) => pinned(envelope, &entry.agent), Err(_) => entry.agent.clone() };
            article.dead id=(format!("dl-{}", entry.seq)) data-session=[entry.session] {
                h2 {
                    "#" (entry.seq) " · " code { (entry.reason.as_str()) } " · " (agent)
                    " · " (entry.deliveries) " deliveries"
                }
                p.detail { (entry.detail) }
                @if let Some(session) = entry.session {
                    p { "Session " a href=(format!("/sessions/{session}")) { code { (session) } } }
                }
                @match envelope {
                    Ok(envelope) => {
                        (envelope_summary(&envelope))
                        details { summary { "Context" } (context_view(&envelope.context, &crate::view::pins(&envelope.versions))) }
                        p { a.button href=(format!("/dlq/{}/replay", entry.seq)) { "Replay…" } }
                    }
                    Err(err) => {
                        p { "Not a readable envelope (" (err) "); the bytes, as stored:" }
                        pre.raw { (raw_bytes(&entry.payload)) }
                    }
                }
            }
        }
    }
}

/// The confirmation before a replay.
pub(crate) fn confirm_replay(entry: &DeadLetterEntry, token: &str) -> Markup {
    let deadline = entry.reason.as_str() == "deadline_exceeded";
    html! {
        h1 { "Replay dead letter #" (entry.seq) "?" }
        p { "It goes back to " code { (entry.original_subject) } ", and its session runs again." }
        p.detail { code { (entry.reason.as_str()) } " · " (entry.detail) }
        form method="post" action=(format!("/dlq/{}/replay", entry.seq)) {
            (csrf(token))
            @if deadline {
                label { "More time for the session, in seconds "
                    input name="extend_deadline_s" type="number" min="1" value="300" required; }
            }
            button #confirm type="submit" { "Replay" }
            " " a href="/dlq" { "Cancel" }
        }
    }
}

/// The tasks waiting for a person, each with its whole context and the
/// answers `baton inbox reply` gives, and the tool calls waiting for one
/// with the decisions `baton inbox resolve | approve | deny` give.
pub(crate) fn inbox(entries: &[InboxEntry], token: &str, now: u64) -> Markup {
    html! {
        h1 { "Inbox" }
        @if entries.is_empty() { p #empty { "Nothing is waiting." } }
        @for entry in entries {
            @let envelope = &entry.envelope;
            @if let Some(gate) = entry.gate() {
                (call(entry, gate, token, now))
            } @else {
            article.waiting id=(format!("t-{}", envelope.id)) data-session=(envelope.session) {
                h2 { (entry.agent()) " · waiting " (span(now.saturating_sub(entry.since))) }
                p { "Session " a href=(format!("/sessions/{}", envelope.session)) { code { (envelope.session) } } }
                (envelope_summary(envelope))
                details open { summary { "Context" } (context_view(&envelope.context, &crate::view::pins(&envelope.versions))) }
                form.reply method="post" action=(format!("/inbox/{}", envelope.id)) {
                    (csrf(token))
                    label { "Answer " textarea name="text" rows="3" required {} }
                    label { "Then "
                        select name="action" {
                            option value="complete" { "complete the session with it" }
                            option value="handoff" { "hand it on to the agent type below" }
                        }
                    }
                    label { "Agent type " input name="to" placeholder="for a handoff"; }
                    label { "Answered by " input name="person" value="console"; }
                    button type="submit" { "Send" }
                }
            }
            }
        }
    }
}

/// A waiting tool call: the tool, its arguments as the model gave them,
/// and the decisions that end its wait.
fn call(entry: &InboxEntry, gate: &Gate, token: &str, now: u64) -> Markup {
    let envelope = &entry.envelope;
    let arguments = serde_json::from_str::<serde_json::Value>(&gate.arguments)
        .and_then(|args| serde_json::to_string_pretty(&args))
        .unwrap_or_else(|_| gate.arguments.clone());
    let approval = gate.reason == Reason::ApprovalRequired;
    if gate.reason == Reason::InputRequired {
        return question(entry, gate, token, now);
    }
    if let Some(authorize) = &gate.authorize {
        return sign_in(entry, gate, authorize, now);
    }
    html! {
        article.waiting.call id=(format!("t-{}", envelope.id)) data-session=(envelope.session) data-reason=(gate.reason) {
            h2 { (entry.agent()) " · " (gate.reason) " · waiting " (span(now.saturating_sub(entry.since))) }
            p { "Session " a href=(format!("/sessions/{}", envelope.session)) { code { (envelope.session) } } }
            @if approval {
                p { "The agent asks to call " code.tool { (gate.tool) } " with these arguments. It is not called until a person approves them." }
            } @else {
                p { "The agent called " code.tool { (gate.tool) } " " (span(now.saturating_sub(gate.at))) " ago, and its worker stopped before the result was recorded. The tool must not be called twice: check the system it acts on, then say what happened." }
            }
            pre.arguments { (arguments) }
            form.decide method="post" action=(format!("/inbox/{}/decide", envelope.id)) {
                (csrf(token))
                @if !approval {
                    label { "Its result, if it happened " textarea name="result" rows="2" {} }
                }
                label { "Note " textarea name="note" rows="2" placeholder=(if approval { "for the model, with a denial" } else { "with a failure" }) {} }
                label { "Decided by " input name="person" value="console"; }
                @if approval {
                    button type="submit" name="decision" value="approved" { "Approve" }
                    " " button type="submit" name="decision" value="denied" { "Deny" }
                } @else {
                    button type="submit" name="decision" value="happened" { "It happened" }
                    " " button type="submit" name="decision" value="not_happened" { "It did not happen" }
                    " " button type="submit" name="decision" value="fail" { "Fail the session" }
                }
            }
        }
    }
}

/// A call its MCP server refused until a person signs in again: the
/// server, what it asked for, and the command that signs in (the sign-in
/// comes back to the process that asks for it, so it is not a form).
fn sign_in(
    entry: &InboxEntry,
    gate: &Gate,
    authorize: &baton_proto::Authorize,
    now: u64,
) -> Markup {
    let envelope = &entry.envelope;
    html! {
        article.waiting.call id=(format!("t-{}", envelope.id)) data-session=(envelope.session) data-reason=(gate.reason) {
            h2 { (entry.agent()) " · " (gate.reason) " · waiting " (span(now.saturating_sub(entry.since))) }
            p { "Session " a href=(format!("/sessions/{}", envelope.session)) { code { (envelope.session) } } }
            p { "The MCP server " code.server { (authorize.server) } " refused the call of " code.tool { (gate.tool) } ": " (authorize.why) ". The call did not run." }
            @if let Some(scope) = &authorize.scope {
                p { "It asks for the scopes " code.scope { (scope) } "." }
            }
            p { "Sign in again, and the call is made: " code.command { "baton inbox authorize " (envelope.id) } }
        }
    }
}

/// A question an agent asked the user (`ask_user`), with a form to answer it.
fn question(entry: &InboxEntry, gate: &Gate, token: &str, now: u64) -> Markup {
    let envelope = &entry.envelope;
    let asked = serde_json::from_str::<serde_json::Value>(&gate.arguments)
        .ok()
        .and_then(|args| args["question"].as_str().map(str::to_owned))
        .unwrap_or_default();
    html! {
        article.waiting.call id=(format!("t-{}", envelope.id)) data-session=(envelope.session) data-reason=(gate.reason) {
            h2 { (entry.agent()) " · asks the user · waiting " (span(now.saturating_sub(entry.since))) }
            p { "Session " a href=(format!("/sessions/{}", envelope.session)) { code { (envelope.session) } } }
            p { "The agent asks: " q.question { (asked) } }
            form.decide method="post" action=(format!("/inbox/{}/decide", envelope.id)) {
                (csrf(token))
                label { "Answer " textarea name="answer" rows="2" required {} }
                label { "Answered by " input name="person" value="console"; }
                button type="submit" name="decision" value="answered" { "Answer" }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_table_shows_the_versions_each_type_runs() {
        let mut candidate: Candidate = serde_json::from_value(serde_json::json!({
            "agent": "helper", "tier": 1, "capabilities": [], "domains": [],
            "instances": 3, "load": 0.0, "score": 1.0,
            "versions": {"1": 2, "2": 1}
        }))
        .unwrap();
        let none = Versioned::default();
        let html = agents_table(
            std::slice::from_ref(&candidate),
            &Heartbeats::new(),
            &none,
            0,
        )
        .into_string();
        assert!(
            html.contains("<td class=\"versions\">1 (2 workers), 2 (1 worker)</td>"),
            "{html}"
        );
        assert!(
            html.contains("<th>Versions (live workers each)</th>"),
            "{html}"
        );
        candidate.versions.clear();
        let html = agents_table(&[candidate], &Heartbeats::new(), &none, 0).into_string();
        assert!(html.contains("<td class=\"versions\">–</td>"), "{html}");
    }

    #[test]
    fn each_instance_says_which_version_it_runs() {
        let candidate: Candidate = serde_json::from_value(serde_json::json!({
            "agent": "helper", "tier": 1, "instances": 2, "load": 0.0, "score": 1.0
        }))
        .unwrap();
        let beat = |at: u64, version: Option<&str>| Beat {
            at,
            version: version.map(str::to_owned),
        };
        let beats = Heartbeats::from([(
            "helper".to_owned(),
            HashMap::from([
                ("w2".to_owned(), beat(1_000, Some("2<i>"))),
                ("w1".to_owned(), beat(1_500, None)),
            ]),
        )]);
        let helper = Versioned::of(["helper"]);
        let html =
            agents_table(std::slice::from_ref(&candidate), &beats, &helper, 2_000).into_string();
        let (w1, w2) = (html.find("w1 runs").unwrap(), html.find("w2 runs").unwrap());
        assert!(w1 < w2, "instances in a stable order: {html}");
        assert!(
            html.contains("w2 runs <b class=\"runs\">helper@2&lt;i&gt;</b>, heard 1.0 s ago"),
            "{html}"
        );
        assert!(
            html.contains("w1 runs <b class=\"runs\">helper</b>, heard 500 ms ago"),
            "{html}"
        );
        // A type with no rollout: its version label (a spec's hash) is no deploy.
        let html = agents_table(&[candidate], &beats, &Versioned::default(), 2_000).into_string();
        assert!(
            html.contains(
                "w2 runs <b class=\"runs\">helper</b> (version label <code>2&lt;i&gt;</code>), heard"
            ),
            "{html}"
        );
    }
}
