//! Sessions as text, the same in the CLI and every gateway: values, paths,
//! an event as one line (`baton watch`), as a status a client reads (A2A),
//! as progress (MCP, `baton chat`), and what a session spent.

use baton_proto::{Event, EventType, Hop, Usage, Value};

/// A value as text: a string as itself, anything else as JSON on one line.
#[must_use]
pub fn value(value: &Value) -> String {
    match value {
        Value::String(text) => text.as_str().unwrap_or_default().to_owned(),
        other => serde_json::to_string(other).unwrap_or_else(|_| format!("{other}")),
    }
}

/// The entry `key` of an output map: how an answer says something in a
/// protocol's own terms (`a2a`, `mcp`), whatever the agent's kind.
#[must_use]
pub fn entry<'a>(output: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    let Some(Value::Map(entries)) = output else {
        return None;
    };
    (entries.iter())
        .find(|(name, _)| name.as_str() == Some(key))
        .map(|(_, value)| value)
}

/// A value as text for a page: a string as itself, anything else as
/// indented JSON.
#[must_use]
pub fn value_pretty(value: &Value) -> String {
    match value {
        Value::String(text) => text.as_str().unwrap_or_default().to_owned(),
        other => serde_json::to_string_pretty(other).unwrap_or_else(|_| format!("{other}")),
    }
}

/// One line about an event, as progress says it:
/// `handoff general_enquiry -> refund (knowledge_gap)`.
#[must_use]
pub fn progress(event: &Event) -> String {
    let agent = event.agent.as_deref().unwrap_or("-");
    let kind = event.kind.as_str();
    match (&event.to, &event.reason) {
        (Some(to), Some(reason)) => format!("{kind} {agent} -> {to} ({})", reason.as_str()),
        (Some(to), None) => format!("{kind} {agent} -> {to}"),
        (None, Some(reason)) => format!("{kind} {agent} ({})", reason.as_str()),
        (None, None) => format!("{kind} {agent}"),
    }
}

/// What a session spent, as people read it:
/// `180 tokens (150 in, 30 out), cost 0.2`, and `(partly estimated)` when
/// a model did not report its usage.
#[must_use]
pub fn spent(usage: &Usage) -> String {
    let mut text = format!(
        "{} tokens ({} in, {} out)",
        usage.total(),
        usage.input_tokens,
        usage.output_tokens
    );
    if usage.cost_micros > 0 {
        text.push_str(&format!(
            ", cost {}",
            baton_proto::amount(usage.cost_micros)
        ));
    }
    if usage.estimated {
        text.push_str(" (partly estimated)");
    }
    text
}

/// A path with the reason that brought control to each agent:
/// `triage -[knowledge_gap]-> refunds`.
#[must_use]
pub fn path(path: &[Hop]) -> String {
    let mut text = String::new();
    for (index, hop) in path.iter().enumerate() {
        if index > 0 {
            match &hop.reason {
                Some(reason) => text.push_str(&format!(" -[{reason}]-> ")),
                None => text.push_str(" -> "),
            }
        }
        text.push_str(&hop.agent);
    }
    text
}

/// An event as one line, after the time it happened (UTC):
/// `12:00:01.250  triage handed off to refunds [knowledge_gap]`.
#[must_use]
pub fn line(event: &Event) -> String {
    let agent = event.agent.as_deref().unwrap_or("?");
    let to = event.to.as_deref().unwrap_or("?");
    let reason = event
        .reason
        .as_ref()
        .map(|r| format!(" [{r}]"))
        .unwrap_or_default();
    let detail = event
        .detail
        .as_deref()
        .map(|d| format!(": {d}"))
        .unwrap_or_default();
    let body = match &event.kind {
        EventType::Accepted => format!(
            "{agent} accepted (attempt {}){reason}",
            event.attempt.unwrap_or(1)
        ),
        EventType::Rejected => format!("{agent} rejected{detail}"),
        EventType::Handoff => format!("{agent} handed off to {to}{reason}"),
        EventType::Delegated => format!("{agent} delegated to {to}{reason}"),
        EventType::Retrying => format!("{agent} retrying{detail}"),
        EventType::LoopDetected => format!("{agent} -> {to} refused, loop detected{detail}"),
        EventType::Escalated => format!("{agent} escalated to {to}{reason}"),
        EventType::DeadLettered => format!("{agent} dead-lettered{reason}{detail}"),
        EventType::Completed => {
            format!(
                "completed: {}",
                event.output.as_ref().map(value).unwrap_or_default()
            )
        }
        EventType::Failed => format!("failed{reason}{detail}"),
        EventType::Result => format!("{agent} got a result{detail}"),
        EventType::Waiting => {
            format!("{agent} is waiting for a person{reason} (see `baton inbox ls`)")
        }
        EventType::Reopened => format!("re-opened{detail}"),
        EventType::ToolCalled => format!(
            "{agent} called {}",
            event.detail.as_deref().unwrap_or("a tool")
        ),
        EventType::ToolApprovalRequested => format!(
            "{agent} asks a person to approve {} (see `baton inbox ls`)",
            event.detail.as_deref().unwrap_or("a tool call")
        ),
        EventType::ToolApproved => format!("{} approved {agent}'s tool call", who(event)),
        EventType::ToolDenied => format!("{} denied {agent}'s tool call{detail}", who(event)),
        EventType::Delta => format!(
            "{agent} is writing: {}",
            baton_proto::Delta::of(event)
                .map(|delta| delta.text)
                .unwrap_or_default()
        ),
        EventType::Started => {
            let start = baton_proto::Start::from_event(event).unwrap_or_default();
            match (start.replay_of, start.eval) {
                (Some(of), true) => format!("{agent} took the task (an evaluation of {of})"),
                (Some(of), false) => format!("{agent} took the task (a replay of {of})"),
                (None, _) => format!("{agent} took the task"),
            }
        }
        EventType::Other(kind) => format!("{kind} {agent}{reason}{detail}"),
    };
    let spent = event
        .usage
        .as_ref()
        .map(|usage| format!("  [spent {}]", spent(usage)))
        .unwrap_or_default();
    let secs = event.at / 1000;
    format!(
        "{:02}:{:02}:{:02}.{:03}  {body}{spent}",
        (secs / 3600) % 24,
        (secs / 60) % 60,
        secs % 60,
        event.at % 1000
    )
}

/// Who decided (a person's name, as the instance of a decision event).
fn who(event: &Event) -> &str {
    event.instance.as_deref().unwrap_or("a person")
}

/// What a person or client reads about `event`: the answer, the failure,
/// the question waiting for input, or the hop (as MCP progress says it).
#[must_use]
pub fn status(event: &Event) -> String {
    let detail = event
        .detail
        .as_deref()
        .map(|d| format!(": {d}"))
        .unwrap_or_default();
    match &event.kind {
        EventType::Completed => event.output.as_ref().map(value).unwrap_or_default(),
        EventType::Failed => {
            let why = event.reason.as_ref().map(|r| format!(" ({})", r.as_str()));
            format!("failed{}{detail}", why.unwrap_or_default())
        }
        EventType::Waiting => format!(
            "{} waits for input{}",
            event.agent.as_deref().unwrap_or("-"),
            question(event)
                .map(|q| format!(": {q}"))
                .unwrap_or_default()
        ),
        _ => format!("{}{detail}", progress(event)),
    }
}

/// The last message of the conversation a waiting event carries, if any.
fn question(event: &Event) -> Option<String> {
    let context = event.context.as_ref()?;
    context.messages.last().map(|m| m.content.clone())
}

/// Unix ms as a UTC date and time, to the second: `2026-11-27 23:30:01 UTC`.
#[must_use]
pub fn utc(ms: u64) -> String {
    let at = i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis);
    at.map_or_else(
        || format!("{ms} ms"),
        |at| at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    )
}

/// A rollout's change as a line: when, what was done to which version, and
/// where new work went after it.
#[must_use]
pub fn rollout_change(change: &baton_proto::RolloutChange) -> String {
    let v = &change.version;
    let done = match change.what.as_str() {
        "first" => format!("{v} ran first and became current"),
        "ramp" => format!("{v} rolled out"),
        "promote" => format!("{v} made current"),
        "stop" => format!("{v}'s ramp ended"),
        "back" => format!("back from {v}"),
        "retire" => format!("{v} retired"),
        "upgrade" => format!("{v}'s idle conversations move to the current version"),
        other => format!("{other} {v}"),
    };
    let now = match &change.ramp {
        Some(ramp) => format!(
            "{} {}%, {} {}%",
            change.current,
            100 - u16::from(ramp.weight),
            ramp.version,
            ramp.weight
        ),
        None => format!("{} 100%", change.current),
    };
    format!("{}  {done}: {now}", utc(change.at))
}

#[cfg(test)]
mod tests {
    use baton_proto::{EventType, Reason};

    use super::*;

    #[test]
    fn strings_stay_bare_and_the_rest_is_json() {
        assert_eq!(value(&Value::from("hi")), "hi");
        let map = Value::Map(vec![(Value::from("a"), Value::from(1))]);
        assert_eq!(value(&map), r#"{"a":1}"#);
        assert_eq!(value_pretty(&map), "{\n  \"a\": 1\n}");
    }

    #[test]
    fn progress_names_the_hop() {
        let mut event = Event::new(uuid_nil(), uuid_nil(), EventType::Handoff);
        event.agent = Some(baton_proto::AgentName::from_static("general_enquiry"));
        event.to = Some(baton_proto::AgentName::from_static("refund"));
        event.reason = Some(Reason::parse("knowledge_gap"));
        assert_eq!(
            progress(&event),
            "handoff general_enquiry -> refund (knowledge_gap)"
        );
        event.to = None;
        event.reason = None;
        assert_eq!(progress(&event), "handoff general_enquiry");
    }

    fn uuid_nil() -> uuid::Uuid {
        uuid::Uuid::nil()
    }

    #[test]
    fn a_rollout_change_says_when_what_and_where_new_work_goes() {
        let change = baton_proto::RolloutChange {
            at: 1_767_225_600_000,
            what: "ramp".to_owned(),
            version: baton_proto::Version::from_static("2"),
            current: baton_proto::Version::from_static("1"),
            ramp: Some(baton_proto::Ramp {
                version: baton_proto::Version::from_static("2"),
                weight: 25,
            }),
        };
        assert_eq!(
            rollout_change(&change),
            "2026-01-01 00:00:00 UTC  2 rolled out: 1 75%, 2 25%"
        );
    }
}
