//! Values and events as text, the same in every gateway.

use baton_proto::{Event, Usage, Value};

/// A value as text: a string as itself, anything else as JSON on one line.
#[must_use]
pub fn value(value: &Value) -> String {
    match value {
        Value::String(text) => text.as_str().unwrap_or_default().to_owned(),
        other => serde_json::to_string(other).unwrap_or_else(|_| format!("{other}")),
    }
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
        event.agent = Some("general_enquiry".to_owned());
        event.to = Some("refund".to_owned());
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
}
