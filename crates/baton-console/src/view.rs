//! The pages, rendered on the server. Every value from NATS goes through
//! maud's escaping: agent output is untrusted text.

use std::collections::BTreeMap;

use baton_proto::Context;
use maud::{DOCTYPE, Markup, html};
use uuid::Uuid;

use crate::index::{Summary, label};

mod session;

pub(crate) use session::{Detail, session};

/// A page of the console: the navigation, then `main`.
pub(crate) fn page(title: &str, current: &str, main: Markup) -> Markup {
    let nav = [
        ("sessions", "/", "Sessions"),
        ("agents", "/agents", "Agents"),
        ("versions", "/versions", "Versions"),
        ("dlq", "/dlq", "Dead letters"),
        ("inbox", "/inbox", "Inbox"),
        ("conversations", "/conversations", "Conversations"),
    ];
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Baton" }
                link rel="stylesheet" href="/static/console.css";
                script src="/static/console.js" defer {}
            }
            body data-page=(current) {
                header {
                    span.brand { "Baton" }
                    nav {
                        @for (key, href, label) in nav {
                            a href=(href) class=[(key == current).then_some("current")] { (label) }
                        }
                    }
                    span #live title="live updates" { "●" }
                }
                main #main { (main) }
            }
        }
    }
}

/// Unix ms as UTC `HH:MM:SS.mmm` (dates are on the session page).
pub(crate) fn clock(ms: u64) -> String {
    let day = ms % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        day / 3_600_000,
        day / 60_000 % 60,
        day / 1000 % 60,
        day % 1000
    )
}

/// A duration in ms, short.
pub(crate) fn span(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min {} s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{} h {} min", ms / 3_600_000, ms / 60_000 % 60),
    }
}

pub(crate) use baton_gateway::text::value_pretty as text;

fn map_json(map: &baton_proto::Map) -> String {
    serde_json::to_string_pretty(map).unwrap_or_default()
}

/// The link to conversation `id`'s page (an id may hold any text).
pub(crate) fn conversation_href(id: &str) -> String {
    let encoded = percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC);
    format!("/conversations/{encoded}")
}

pub(crate) fn short(id: Uuid) -> String {
    id.to_string()[..8].to_owned()
}

fn snippet(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

/// The agents of a path, each with the version that ran it:
/// `a → b@2 → c`.
pub(crate) fn path_text(summary: &Summary) -> String {
    summary
        .path
        .iter()
        .map(|hop| summary.versions.hop_label(hop))
        .collect::<Vec<_>>()
        .join(" → ")
}

/// One row of the sessions table; also what the live feed sends.
pub(crate) fn row(summary: &Summary, now: u64) -> Markup {
    let state = summary.state.as_str();
    let agent = summary.agent.as_deref().unwrap_or("");
    // The live feed's filter (console.js) matches `TYPE@VERSION` on these.
    let version = summary
        .agent
        .as_deref()
        .and_then(|a| summary.versions.of(a));
    let end = if summary.ended() {
        summary.updated
    } else {
        now
    };
    let what = match (&summary.output, &summary.reason) {
        (Some(output), _) => snippet(&text(output), 120),
        (None, Some(reason)) => match &summary.detail {
            Some(detail) => snippet(&format!("{reason}: {detail}"), 120),
            None => reason.clone(),
        },
        (None, None) => String::new(),
    };
    html! {
        tr id=(format!("s-{}", summary.id)) data-state=(state) data-agent=(agent) data-version=[version] {
            td.id {
                a href=(format!("/sessions/{}", summary.id)) { (short(summary.id)) }
                @if let Some((id, turn)) = &summary.conversation {
                    " " a.turn href=(conversation_href(id)) title=(format!("conversation {id}")) { "turn " (turn) }
                }
            }
            td { span class=(format!("state {state}")) { (state) } }
            td.agent { (summary.agent_label().unwrap_or_default()) }
            td.path { (path_text(summary)) }
            td.num { (summary.path.len()) }
            td.num { time data-at=(summary.started) { (span(now.saturating_sub(summary.started))) } }
            td.num { (span(end.saturating_sub(summary.started))) }
            td.what { (what) }
        }
    }
}

/// Filters of the sessions list.
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub(crate) struct Filter {
    /// `running`, `waiting`, `completed` or `failed`.
    #[serde(default)]
    pub(crate) state: String,
    /// Agent type that has (or had last) the session, or `TYPE@VERSION`
    /// for the sessions it has at that version.
    #[serde(default)]
    pub(crate) agent: String,
    /// Text in the id, path, agent, answer or failure.
    #[serde(default)]
    pub(crate) q: String,
}

impl Filter {
    /// Whether `summary` passes.
    pub(crate) fn admits(&self, summary: &Summary) -> bool {
        let q = self.q.trim().to_lowercase();
        (self.state.is_empty() || summary.state.as_str() == self.state)
            && self.admits_agent(summary)
            && (q.is_empty() || {
                let what = summary.output.as_ref().map(text).unwrap_or_default();
                let hay = format!(
                    "{} {} {} {what} {} {}",
                    summary.id,
                    path_text(summary),
                    summary.agent_label().unwrap_or_default(),
                    summary.reason.as_deref().unwrap_or(""),
                    summary.detail.as_deref().unwrap_or("")
                );
                hay.to_lowercase().contains(&q)
            })
    }

    /// Whether `summary`'s agent is the filter's: `TYPE` at any version
    /// (or none), `TYPE@VERSION` at that version only.
    fn admits_agent(&self, summary: &Summary) -> bool {
        let wanted = self.agent.trim();
        if wanted.is_empty() {
            return true;
        }
        let Some(agent) = summary.agent.as_deref() else {
            return false;
        };
        match wanted.split_once('@') {
            Some((kind, version)) => agent == kind && summary.versions.of(agent) == Some(version),
            None => agent == wanted,
        }
    }
}

/// The sessions list.
pub(crate) fn sessions(rows: &[Summary], filter: &Filter, total: usize, now: u64) -> Markup {
    let states = ["", "running", "waiting", "completed", "failed"];
    html! {
        h1 { "Sessions" }
        form.filters method="get" action="/" {
            label { "State " select name="state" {
                @for state in states {
                    option value=(state) selected[filter.state == state] {
                        (if state.is_empty() { "any" } else { state })
                    }
                }
            } }
            label title="an agent type, or TYPE@VERSION for one version of it" {
                "Agent " input name="agent" value=(filter.agent) placeholder="TYPE or TYPE@VERSION";
            }
            label { "Text or session id " input name="q" value=(filter.q) placeholder="search"; }
            button type="submit" { "Filter" }
        }
        p.count { "Showing " span #shown { (rows.len()) } " of " span #total { (total) } " sessions, most recently active first; changes appear live." }
        table #sessions {
            thead { tr {
                th { "Session" } th { "State" } th { "Agent@version" } th { "Path" }
                th title="agents visited, counting repeat visits" { "Hops (agents visited)" }
                th { "Age (since first event)" } th { "Duration (first to latest event)" } th { "Answer or reason" }
            } }
            tbody { @for summary in rows { (row(summary, now)) } }
        }
    }
}

/// A session's pins as text, agent type to version, as the views take them.
pub(crate) fn pins(
    versions: &BTreeMap<baton_proto::AgentName, baton_proto::Version>,
) -> BTreeMap<String, String> {
    let pairs = versions.iter();
    pairs
        .map(|(agent, version)| (agent.to_string(), version.to_string()))
        .collect()
}

/// The whole context: conversation, variables, trace and state; the
/// agents in it named with the version each ran at (`versions`, by agent
/// type).
pub(crate) fn context_view(context: &Context, versions: &BTreeMap<String, String>) -> Markup {
    let agent = |name: &str| label(name, versions.get(name).map(|version| version.as_str()));
    html! {
        @if !context.problem.is_empty() { p { b { "Problem: " } (context.problem) } }
        h3 { "Messages" }
        ol.messages {
            @for message in &context.messages {
                li class=(format!("msg {}", message.role.as_str())) {
                    span.role {
                        (message.role.as_str())
                        // A tool message's name is the tool's, not an agent's.
                        @if let Some(name) = &message.name {
                            " · " @if message.role == baton_proto::Role::Agent { (agent(name)) } @else { (name) }
                        }
                    }
                    div.content { (message.content) }
                }
            }
        }
        @if !context.variables.is_empty() { h3 { "Variables" } pre.vars { (map_json(&context.variables)) } }
        @if !context.trace.is_empty() {
            h3 { "Trace" }
            table.trace {
                thead { tr { th { "Agent@version" } th { "Action" } th { "Outcome" } th { "Reasoning" } } }
                tbody { @for step in &context.trace {
                    tr { td.agent { (agent(step.agent.as_deref().unwrap_or_default())) } td { (step.action) } td { (step.outcome) } td { (step.reasoning) } }
                } }
            }
        }
        @if !context.state.is_empty() { h3 { "State" } pre.vars { (map_json(&context.state)) } }
        @if !context.metadata.is_empty() { h3 { "Metadata" } pre.vars { (map_json(&context.metadata)) } }
    }
}

/// The hidden CSRF field every form carries.
pub(crate) fn csrf(token: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(token); }
}

/// A message page: an outcome of an action, or an error.
pub(crate) fn notice(title: &str, message: &str, back: &str) -> Markup {
    html! { h1 { (title) } p #notice { (message) } p { a href=(back) { "Back" } } }
}

/// Bytes that are not an envelope, shown safely: printable ASCII as is,
/// everything else as `\xNN`.
pub(crate) fn raw_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes.iter().take(4096) {
        if b.is_ascii_graphic() || b == b' ' {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    if bytes.len() > 4096 {
        out.push_str(&format!("… ({} bytes in all)", bytes.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::session::{delegation, timeline};
    use super::*;
    use crate::index::Versions;
    use baton_proto::Event;
    use baton_proto::{Envelope, EventType, Value};

    #[test]
    fn untrusted_text_is_escaped_everywhere() {
        let evil = "<script>window.pwned=1</script><img src=x onerror=alert(1)>";
        let mut summary = Summary::new(Uuid::nil(), 1);
        summary.output = Some(Value::from(evil));
        summary.agent = Some(evil.to_owned());
        let row = row(&summary, 2).into_string();
        assert!(!row.contains("<script>") && !row.contains("<img"), "{row}");
        let task = Envelope::task(evil);
        let mut event = Event::new(Uuid::nil(), Uuid::nil(), EventType::Completed);
        event.detail = Some(evil.to_owned());
        event.path = vec![baton_proto::Hop::new(
            baton_proto::AgentName::unchecked(evil),
            "w",
            None,
        )];
        let started = Event::new(Uuid::nil(), Uuid::nil(), EventType::Started);
        let events = [started, event];
        let replay = crate::replay::section(&summary, &events, "t");
        assert!(replay.0.contains("Replay from here"), "{}", replay.0);
        let page = session(&Detail {
            summary: &summary,
            events: &events,
            context: Some(("ended", &task.context)),
            dead_letters: vec![],
            trace_link: None,
            csrf: "t",
            actions: replay,
        })
        .into_string();
        assert!(
            !page.contains("<script>") && !page.contains("<img"),
            "{page}"
        );
        assert!(page.contains("&lt;script&gt;window.pwned=1&lt;/script&gt;"));
    }

    #[test]
    fn delegations_nest_under_the_child_that_delegates_again() {
        let event = |kind: EventType, agent: &str, to: &str, detail: &str| {
            let mut event = Event::new(Uuid::new_v4(), Uuid::nil(), kind);
            event.agent = Some(baton_proto::AgentName::unchecked(agent));
            event.to = Some(baton_proto::AgentName::unchecked(to));
            event.detail = Some(detail.into());
            event
        };
        let events = [
            event(EventType::Delegated, "lead", "dev", "build it"),
            event(EventType::Delegated, "dev", "tester", "test it"),
            event(
                EventType::Result,
                "dev",
                "dev",
                "completed result from tester: recorded",
            ),
            event(
                EventType::Result,
                "lead",
                "lead",
                "completed result from dev: recorded",
            ),
        ];
        let summary = Summary::new(Uuid::nil(), 0);
        let tree = delegation(&events, &summary).into_string();
        let (lead, dev, tester) = (
            tree.find("lead").unwrap(),
            tree.find("<b>dev").unwrap(),
            tree.find("<b>tester").unwrap(),
        );
        assert!(lead < dev && dev < tester, "{tree}");
        // tester's list sits inside dev's item.
        let dev_item = &tree[dev..];
        assert!(dev_item.find("<ul>").unwrap() < dev_item.find("tester").unwrap());
        assert_eq!(tree.matches("completed result from").count(), 2, "{tree}");
        assert!(!tree.contains("waiting for its result"), "{tree}");
        assert_eq!(delegation(&[], &summary).into_string(), "");
    }

    #[test]
    fn bytes_that_are_not_an_envelope_are_shown_safely() {
        assert_eq!(raw_bytes(b"a<b\x00\xff"), "a<b\\x00\\xff");
    }

    #[test]
    fn filters_match_state_agent_and_text() {
        let mut summary = Summary::new(Uuid::from_u128(7), 1);
        summary.agent = Some("refund".to_owned());
        summary.output = Some(Value::from("Refund approved"));
        let pass = |state: &str, agent: &str, q: &str| {
            Filter {
                state: state.into(),
                agent: agent.into(),
                q: q.into(),
            }
            .admits(&summary)
        };
        assert!(pass("", "", ""));
        assert!(pass("running", "refund", "APPROVED"));
        assert!(!pass("completed", "", ""));
        assert!(!pass("", "triage", ""));
        assert!(!pass("", "", "denied"));
        assert!(pass("", "", "000000000007"));
    }

    #[test]
    fn clocks_and_spans_read_well() {
        assert_eq!(clock(3_723_004), "01:02:03.004");
        assert_eq!(span(999), "999 ms");
        assert_eq!(span(1_500), "1.5 s");
        assert_eq!(span(125_000), "2 min 5 s");
    }

    #[test]
    fn the_timeline_names_the_version_that_wrote_an_event() {
        let mut accepted = Event::new(Uuid::nil(), Uuid::nil(), EventType::Accepted);
        accepted.agent = Some(baton_proto::AgentName::from_static("helper"));
        let none = Versions::default();
        let plain = timeline(std::slice::from_ref(&accepted), 0, &none).into_string();
        assert!(plain.contains("<td class=\"agent\">helper</td>"), "{plain}");
        accepted.version = Some(baton_proto::Version::unchecked("2<b>"));
        // A version label of a type with no rollout (a spec's hash) is no
        // `TYPE@VERSION`: it shows on hovering.
        let labelled = timeline(std::slice::from_ref(&accepted), 0, &none).into_string();
        assert!(
            labelled.contains("<td class=\"agent\" title=\"version label 2&lt;b&gt;\">helper</td>"),
            "{labelled}"
        );
        let mut versions = Versions::default();
        versions.take(&accepted, &crate::index::Versioned::of(["helper"]));
        let versioned = timeline(&[accepted], 0, &versions).into_string();
        assert!(
            versioned.contains("<td class=\"agent\">helper@2&lt;b&gt;</td>"),
            "{versioned}"
        );
    }

    /// A session that `helper` answered at `version` (none: unversioned),
    /// as the console learns it from the terminal event alone.
    fn answered_by(n: u128, version: Option<&str>) -> Summary {
        let mut completed = Event::new(Uuid::new_v4(), Uuid::from_u128(n), EventType::Completed);
        completed.agent = Some(baton_proto::AgentName::from_static("helper"));
        completed.instance = Some(format!("w{n}"));
        completed.version = version.map(baton_proto::Version::unchecked);
        completed.path = vec![
            baton_proto::Hop::new(baton_proto::AgentName::from_static("front"), "f", None),
            baton_proto::Hop::new(
                baton_proto::AgentName::from_static("helper"),
                format!("w{n}"),
                None,
            ),
        ];
        if let Some(version) = version {
            completed.versions.insert(
                baton_proto::AgentName::from_static("helper"),
                baton_proto::Version::unchecked(version),
            );
        }
        Summary::of(
            Uuid::from_u128(n),
            &[completed],
            &crate::index::Versioned::default(),
        )
    }

    #[test]
    fn a_row_names_the_version_its_agent_ran_at() {
        let two = row(&answered_by(1, Some("2")), 5).into_string();
        assert!(
            two.contains("data-agent=\"helper\" data-version=\"2\""),
            "{two}"
        );
        assert!(two.contains("<td class=\"agent\">helper@2</td>"), "{two}");
        assert!(
            two.contains("<td class=\"path\">front → helper@2</td>"),
            "{two}"
        );
        let plain = row(&answered_by(2, None), 5).into_string();
        assert!(
            !plain.contains("data-version") && !plain.contains('@'),
            "{plain}"
        );
        assert!(plain.contains("<td class=\"agent\">helper</td>"), "{plain}");
    }

    #[test]
    fn the_agent_filter_takes_a_type_or_type_at_version() {
        let sessions = [
            answered_by(1, Some("1")),
            answered_by(2, Some("2")),
            answered_by(3, None),
        ];
        let found = |agent: &str| -> Vec<u128> {
            let filter = Filter {
                agent: agent.into(),
                ..Filter::default()
            };
            (sessions.iter())
                .filter(|s| filter.admits(s))
                .map(|s| s.id.as_u128())
                .collect()
        };
        assert_eq!(found("helper"), [1, 2, 3]);
        assert_eq!(found(" helper@2 "), [2]);
        assert_eq!(found("helper@1"), [1]);
        assert_eq!(found("helper@3"), Vec::<u128>::new());
        assert_eq!(found("helper@"), Vec::<u128>::new());
        assert_eq!(found("front@2"), Vec::<u128>::new());
        // The text search sees the labels too.
        let filter = Filter {
            q: "HELPER@2".into(),
            ..Filter::default()
        };
        assert!(filter.admits(&sessions[1]) && !filter.admits(&sessions[0]));
    }

    #[test]
    fn the_session_page_and_its_context_name_versions() {
        let summary = answered_by(1, Some("2"));
        let mut context = Envelope::task("hi").context;
        let mut said = baton_proto::Message::new(baton_proto::Role::Agent, "done");
        said.name = Some("helper".into());
        let mut tool = baton_proto::Message::new(baton_proto::Role::Tool, "42");
        tool.name = Some("helper".into());
        context.messages = vec![said, tool];
        context.trace = vec![baton_proto::Step::new(
            baton_proto::AgentName::from_static("helper"),
            "answer",
            "ok",
        )];
        let page = session(&Detail {
            summary: &summary,
            events: &[],
            context: Some(("ended", &context)),
            dead_letters: vec![],
            trace_link: None,
            csrf: "t",
            actions: maud::html! {},
        })
        .into_string();
        assert!(page.contains("<b id=\"agent\">helper@2</b>"), "{page}");
        assert!(
            page.contains("<p id=\"path-text\">front → helper@2</p>"),
            "{page}"
        );
        assert!(page.contains(">helper@2</text>"), "{page}");
        assert!(page.contains("agent · helper@2</span>"), "{page}");
        // A tool's name is not an agent's.
        assert!(page.contains("tool · helper</span>"), "{page}");
        assert!(page.contains("<td class=\"agent\">helper@2</td>"), "{page}");
    }
}
