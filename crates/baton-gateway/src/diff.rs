//! Where two sessions part, from their stored events: the path, the tool
//! calls, the answers and the outcome, then what each spent (`baton diff`).

use baton_proto::{Event, EventType, Role, Start, Usage};

/// One part of a comparison.
#[derive(Debug)]
pub struct Part {
    /// Which part: `path`, `tools`, `answers`, `outcome`, `spent`,
    /// `versions` (when either names one), `replay`.
    pub what: &'static str,
    /// Whether the two sessions are the same in it.
    pub same: bool,
    /// The part, or where they part, as text.
    pub text: String,
}

/// What a session did, as far as its stored events tell.
#[derive(Default)]
struct Told {
    path: Vec<String>,
    /// Each tool call: the tool and its arguments.
    calls: Vec<String>,
    /// Each agent's answer: the agent and the text.
    answers: Vec<(String, String)>,
    outcome: String,
    usage: Usage,
    /// The versions it ran on, as `TYPE@VERSION`.
    versions: Vec<String>,
    replay_of: Option<uuid::Uuid>,
}

fn told(history: &[Event]) -> Told {
    let mut told = Told {
        replay_of: history
            .iter()
            .find_map(Start::from_event)
            .and_then(|start| start.replay_of),
        ..Told::default()
    };
    let Some(end) = baton_client::ending(history) else {
        told.outcome = "not finished".to_owned();
        return told;
    };
    told.path = end.path.iter().map(|hop| hop.agent.to_string()).collect();
    told.usage = end.usage.unwrap_or_default();
    told.versions = (end.versions.iter())
        .map(|(agent, version)| format!("{agent}@{version}"))
        .collect();
    told.outcome = match end.kind {
        EventType::Completed => format!(
            "completed: {}",
            end.output
                .as_ref()
                .map(crate::text::value)
                .unwrap_or_default()
        ),
        _ => format!(
            "{} [{}]",
            end.kind,
            end.reason
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default()
        ),
    };
    for message in end.context.iter().flat_map(|context| &context.messages) {
        let calls = message
            .tool_calls
            .clone()
            .and_then(|calls| rmpv::ext::from_value::<serde_json::Value>(calls).ok());
        for call in calls
            .as_ref()
            .and_then(|calls| calls.as_array())
            .into_iter()
            .flatten()
        {
            let function = &call["function"];
            told.calls.push(format!(
                "{} {}",
                function["name"].as_str().unwrap_or("?"),
                function["arguments"].as_str().unwrap_or("{}")
            ));
        }
        if message.role == Role::Agent && !message.content.is_empty() {
            let agent = message.name.clone().unwrap_or_default();
            told.answers.push((agent, message.content.clone()));
        }
    }
    told
}

/// Where sessions `a` and `b` (their stored events) part: the path, the
/// tool calls, the answers and the outcome, then what each spent.
#[must_use]
pub fn compare(a: &[Event], b: &[Event]) -> Vec<Part> {
    let (a, b) = (told(a), told(b));
    let mut parts = vec![
        list(
            "path",
            &a.path,
            &b.path,
            "hop",
            |agents| agents.join(" -> "),
            String::clone,
        ),
        list(
            "tools",
            &a.calls,
            &b.calls,
            "call",
            |calls| format!("{} calls", calls.len()),
            String::clone,
        ),
        list(
            "answers",
            &a.answers,
            &b.answers,
            "answer",
            |answers| format!("{} answers", answers.len()),
            |(agent, text)| format!("{agent}: {}", clipped(text)),
        ),
    ];
    parts.push(Part {
        what: "outcome",
        same: a.outcome == b.outcome,
        text: if a.outcome == b.outcome {
            clipped(&a.outcome)
        } else {
            format!("{} | {}", clipped(&a.outcome), clipped(&b.outcome))
        },
    });
    let spent = |usage: &Usage| crate::text::spent(usage);
    parts.push(Part {
        what: "spent",
        same: a.usage.total() == b.usage.total(),
        text: format!("{} | {}", spent(&a.usage), spent(&b.usage)),
    });
    if !(a.versions.is_empty() && b.versions.is_empty()) {
        let (x, y) = (a.versions.join(" "), b.versions.join(" "));
        parts.push(Part {
            what: "versions",
            same: x == y,
            text: if x == y { x } else { format!("{x} | {y}") },
        });
    }
    if let Some(of) = b.replay_of.or(a.replay_of) {
        parts.push(Part {
            what: "replay",
            same: true,
            text: format!("one replays {of}"),
        });
    }
    parts
}

/// Two lists compared item by item: the same (summed up by `whole`), or
/// where they part (each item shown by `item`, numbered from 1 as `noun`).
fn list<T: PartialEq>(
    what: &'static str,
    a: &[T],
    b: &[T],
    noun: &str,
    whole: impl Fn(&[T]) -> String,
    item: impl Fn(&T) -> String,
) -> Part {
    let parted = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or_else(|| (a.len() != b.len()).then(|| a.len().min(b.len())));
    let Some(at) = parted else {
        return Part {
            what,
            same: true,
            text: whole(a),
        };
    };
    let shown = |list: &[T]| list.get(at).map_or_else(|| "(none)".to_owned(), &item);
    Part {
        what,
        same: false,
        text: format!("at {noun} {}: {} | {}", at + 1, shown(a), shown(b)),
    }
}

/// `text` on one line, at most 80 characters.
fn clipped(text: &str) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= 80 {
        return line;
    }
    let mut short: String = line.chars().take(79).collect();
    short.push('…');
    short
}

#[cfg(test)]
mod tests {
    use baton_proto::{Context, Hop, Message, Value};
    use uuid::Uuid;

    use super::*;

    fn session(agents: &[&str], answers: &[&str], call: &str, output: &str) -> Vec<Event> {
        let mut end = Event::new(Uuid::new_v4(), Uuid::new_v4(), EventType::Completed);
        end.path = agents
            .iter()
            .map(|agent| Hop::new(baton_proto::AgentName::unchecked(*agent), "w", None))
            .collect();
        let mut context = Context::default();
        let mut asked = Message::new(Role::Agent, "");
        let calls = serde_json::json!([{"id": "c1", "type": "function",
            "function": {"name": "lookup_order", "arguments": call}}]);
        asked.tool_calls = Some(rmpv::ext::to_value(calls).unwrap());
        context.messages.push(asked);
        for answer in answers {
            context
                .messages
                .push(Message::new(Role::Agent, *answer).with_name("billing"));
        }
        end.context = Some(Box::new(context));
        end.output = Some(Value::from(output));
        vec![end]
    }

    fn part<'a>(parts: &'a [Part], what: &str) -> &'a Part {
        parts.iter().find(|part| part.what == what).unwrap()
    }

    #[test]
    fn equal_sessions_are_the_same_in_every_part() {
        let a = session(
            &["triage", "billing"],
            &["refunded"],
            r#"{"id":1}"#,
            "refunded",
        );
        let parts = compare(&a, &a.clone());
        assert!(parts.iter().all(|part| part.same), "{parts:?}");
        assert_eq!(part(&parts, "path").text, "triage -> billing");
        assert_eq!(part(&parts, "tools").text, "1 calls");
    }

    #[test]
    fn the_first_place_they_part_is_named() {
        let a = session(
            &["triage", "billing"],
            &["refunded", "bye"],
            r#"{"id":1}"#,
            "x",
        );
        let b = session(
            &["triage", "support"],
            &["refunded", "ciao"],
            r#"{"id":2}"#,
            "y",
        );
        let parts = compare(&a, &b);
        assert_eq!(part(&parts, "path").text, "at hop 2: billing | support");
        assert_eq!(
            part(&parts, "tools").text,
            r#"at call 1: lookup_order {"id":1} | lookup_order {"id":2}"#
        );
        assert_eq!(
            part(&parts, "answers").text,
            "at answer 2: billing: bye | billing: ciao"
        );
        assert!(!part(&parts, "outcome").same);
        let shorter = session(&["triage"], &["refunded"], r#"{"id":1}"#, "x");
        let parts = compare(&a, &shorter);
        assert_eq!(part(&parts, "path").text, "at hop 2: billing | (none)");
    }

    #[test]
    fn the_versions_each_ran_on_are_compared_when_either_names_one() {
        let a = session(&["helper"], &["hi"], "{}", "hi");
        assert!(compare(&a, &a.clone()).iter().all(|p| p.what != "versions"));
        let mut b = a.clone();
        b[0].versions.insert(
            baton_proto::AgentName::from_static("helper"),
            baton_proto::Version::from_static("2"),
        );
        let mut c = a.clone();
        c[0].versions.insert(
            baton_proto::AgentName::from_static("helper"),
            baton_proto::Version::from_static("1"),
        );
        let parts = compare(&c, &b);
        let versions = part(&parts, "versions");
        assert!(!versions.same);
        assert_eq!(versions.text, "helper@1 | helper@2");
        assert!(part(&compare(&b, &b.clone()), "versions").same);
    }
}
