//! A session's page: its header, path, timeline, tool calls, delegations
//! and context, each agent named with the version that ran it.

use baton_proto::Event;
use maud::{Markup, html};

use super::*;
use crate::index::{Summary, Versions};

/// What a session page shows beyond its events.
pub(crate) struct Detail<'a> {
    /// Where it stands.
    pub(crate) summary: &'a Summary,
    /// Its events, in order.
    pub(crate) events: &'a [Event],
    /// The context it ended with, waits with, or died with.
    pub(crate) context: Option<(&'a str, &'a Context)>,
    /// Dead letters of the session (their sequence numbers).
    pub(crate) dead_letters: Vec<u64>,
    /// The tracing UI's link to its trace.
    pub(crate) trace_link: Option<String>,
    /// The token the page's forms carry.
    pub(crate) csrf: &'a str,
    /// What can be done with it: replay it, give feedback.
    pub(crate) actions: Markup,
}

/// A session's page (its `main`).
pub(crate) fn session(detail: &Detail<'_>) -> Markup {
    let summary = detail.summary;
    let state = summary.state.as_str();
    let graph = crate::path::Graph::of(&summary.path, detail.events, &summary.versions);
    html! {
        div #session data-id=(summary.id) data-state=(state) {
            h1 { "Session " code { (summary.id) } }
            p.status {
                span class=(format!("state {state}")) #state { (state) }
                @if let Some(agent) = summary.agent_label() { " · agent " b #agent { (agent) } }
                @if let Some((id, turn)) = &summary.conversation {
                    " · turn " (turn) " of conversation " a #conversation href=(conversation_href(id)) { (id) }
                }
                " · " (summary.path.len()) " hops · " (span(summary.updated.saturating_sub(summary.started)))
                @if let Some(usage) = detail.events.iter().rev().find_map(|e| e.usage.as_ref()) {
                    " · spent " span #spent { (baton_gateway::text::spent(usage)) }
                }
                @match (&summary.trace_id, &detail.trace_link) {
                    (Some(_), Some(link)) => { " · " a #trace href=(link) { "trace" } }
                    (Some(trace), None) => { " · trace " code #trace { (trace) } }
                    _ => {}
                }
            }
            @if matches!(summary.state, crate::index::State::Running | crate::index::State::Waiting) {
                details #cancel-session data-keep {
                    summary { "Cancel…" }
                    form method="post" action=(format!("/sessions/{}/cancel", summary.id)) {
                        (csrf(detail.csrf))
                        p { "The session ends as failed (cancelled); a running agent is stopped, and a task waiting for a person leaves the inbox." }
                        button #cancel.danger type="submit" { "Cancel this session" }
                    }
                }
            }
            @if let Some(writing) = summary.writing.as_ref().filter(|_| !summary.ended()) {
                section #writing { h2 { "Being written" } p { b { (summary.versions.label(&writing.agent)) } ": " span #writing-text { (writing.text) } } }
            }
            @if let Some(output) = &summary.output {
                section { h2 { "Answer" } pre #answer { (text(output)) } }
            } @else if summary.state == crate::index::State::Failed {
                section { h2 { "Failure" } p #failure {
                    b { (summary.reason.as_deref().unwrap_or("failed")) }
                    @if let Some(detail) = &summary.detail { ": " (detail) }
                } }
            }
            @for seq in &detail.dead_letters {
                p { "Dead letter " a href=(format!("/dlq#dl-{seq}")) { "#" (seq) } " can be replayed." }
            }
            section { h2 { "Path" } p #path-text { (path_text(summary)) } (crate::path::svg(&graph)) }
            (delegation(detail.events, summary))
            (tool_calls(detail.events, &summary.versions))
            section { h2 { "Events" } (timeline(detail.events, summary.started, &summary.versions)) }
            (detail.actions)
            @if let Some((source, context)) = detail.context {
                section #context { h2 { "Context " small { "(" (source) ")" } } (context_view(context, summary.versions.by_agent())) }
            } @else {
                section #context { h2 { "Context" } p.muted { "The context is shown once the session ends, waits for a person, or has a dead letter." } }
            }
        }
    }
}

/// The agent of `event`, `TYPE@VERSION` where the type is versioned; a
/// version label that names no deploy (a spec's hash) in its title.
fn event_agent(event: &Event, versions: &Versions) -> Markup {
    let labelled = versions.event_label(event);
    let title = event
        .version
        .as_ref()
        .filter(|_| versions.of_event(event).is_none())
        .map(|v| format!("version label {v}"));
    html! { td.agent title=[title] { (labelled) } }
}

pub(super) fn timeline(events: &[Event], start: u64, versions: &Versions) -> Markup {
    html! {
        table #timeline {
            thead { tr {
                th title="milliseconds since the session started" { "+ms (since start)" } th { "Event" } th { "Agent@version" }
                th { "Instance" } th { "To" } th { "Reason" } th { "Detail" }
                th title="tokens the session had spent" { "Tokens spent (so far)" }
            } }
            tbody {
                @for event in events {
                    tr class=(format!("ev {}", event.kind.as_str())) {
                        td.num title=(clock(event.at)) { (event.at.saturating_sub(start)) }
                        td { (event.kind.as_str()) @if let Some(n) = event.attempt.filter(|n| *n > 1) { " #" (n) } }
                        (event_agent(event, versions))
                        td { (event.instance.as_deref().unwrap_or("")) }
                        td { (event.to.as_deref().unwrap_or("")) }
                        td { (event.reason.as_ref().map_or("", |r| r.as_str())) }
                        td { (event.detail.as_deref().map(|d| snippet(d, 300)).unwrap_or_default()) }
                        td.num { (event.usage.map(|u| u.total().to_string()).unwrap_or_default()) }
                    }
                }
            }
        }
    }
}

/// The tools the session's agents called, in order (`tool_called` events).
fn tool_calls(events: &[Event], versions: &Versions) -> Markup {
    let calls: Vec<&Event> = events
        .iter()
        .filter(|event| event.kind == baton_proto::EventType::ToolCalled)
        .collect();
    let field = |event: &Event, key: &str| -> String {
        let found = match &event.output {
            Some(baton_proto::Value::Map(entries)) => entries
                .iter()
                .find(|(k, _)| k.as_str() == Some(key))
                .map(|(_, v)| v.clone()),
            _ => None,
        };
        match found {
            Some(baton_proto::Value::String(text)) => text.as_str().unwrap_or_default().to_owned(),
            Some(other) => other.to_string(),
            None => String::new(),
        }
    };
    html! {
        @if !calls.is_empty() {
            section #tool-calls {
                h2 { "Tool calls" }
                table {
                    thead { tr { th { "Tool" } th { "Agent@version" } th { "Outcome" } th { "Duration (ms)" } } }
                    tbody {
                        @for call in &calls {
                            tr.call data-outcome=(field(call, "outcome")) {
                                td.tool { (field(call, "tool")) }
                                (event_agent(call, versions))
                                td.outcome { (field(call, "outcome")) }
                                td.num { (field(call, "duration_ms")) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Delegations as a tree: each `delegated` event under the open delegation
/// whose child is the delegating agent, with what became of its result.
pub(super) fn delegation(events: &[Event], summary: &Summary) -> Markup {
    struct Node {
        agent: String,
        input: String,
        result: Option<String>,
        children: Vec<usize>,
    }
    let mut nodes: Vec<Node> = Vec::new();
    let mut roots = Vec::new();
    for event in events {
        match event.kind {
            baton_proto::EventType::Delegated => {
                let parent_agent = event.agent.as_deref().unwrap_or_default().to_owned();
                let parent = (0..nodes.len())
                    .rev()
                    .find(|&i| nodes[i].agent == parent_agent && nodes[i].result.is_none());
                nodes.push(Node {
                    agent: event.to.as_deref().unwrap_or_default().to_owned(),
                    input: event.detail.clone().unwrap_or_default(),
                    result: None,
                    children: Vec::new(),
                });
                let index = nodes.len() - 1;
                match parent {
                    Some(parent) => nodes[parent].children.push(index),
                    None => roots.push((parent_agent, index)),
                }
            }
            baton_proto::EventType::Result => {
                let detail = event.detail.clone().unwrap_or_default();
                if let Some(node) = nodes.iter_mut().find(|n| {
                    n.result.is_none() && detail.contains(&format!("result from {}:", n.agent))
                }) {
                    node.result = Some(detail);
                }
            }
            _ => {}
        }
    }
    if nodes.is_empty() {
        return html! {};
    }
    fn item(nodes: &[Node], index: usize, summary: &Summary) -> Markup {
        let node = &nodes[index];
        html! {
            li {
                b { (summary.versions.label(&node.agent)) } " — " (snippet(&node.input, 200))
                " " span.result { (node.result.as_deref().unwrap_or("waiting for its result")) }
                @if !node.children.is_empty() {
                    ul { @for child in &node.children { (item(nodes, *child, summary)) } }
                }
            }
        }
    }
    html! {
        section #delegation { h2 { "Delegation" }
            ul.tree { @for (parent, child) in &roots {
                li { b { (summary.versions.label(parent)) } " delegated" ul { (item(&nodes, *child, summary)) } }
            } }
        }
    }
}
