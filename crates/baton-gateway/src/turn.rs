//! What was said in a conversation's turn, read from its session's
//! events: the answer and the agent (with its version) that gave it, the
//! agents the turn went through, and each question an agent asked the
//! user with the answer the conversation's next message gave. The
//! console's conversation page and `baton conversations show` both show a
//! turn this way, so an operator reads the conversation without opening
//! every turn's session.

use std::collections::{BTreeMap, HashSet};

use baton_proto::{Event, EventType, Message, Role, Value};

/// The tool a question to the user goes through: an LLM agent's call,
/// which an exec agent's question waits as too. Its result is the answer.
const ASK_USER: &str = "ask_user";

/// An agent type with the version that ran it, as people read it and
/// `--as` takes it: `helper@2`, or `helper` when its worker names none.
#[must_use]
pub fn labelled(agent: &str, version: Option<&str>) -> String {
    match version {
        Some(version) if !version.is_empty() => format!("{agent}@{version}"),
        _ => agent.to_owned(),
    }
}

/// A question an agent asked the user within a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// Who asked, as `TYPE@VERSION`.
    pub by: String,
    /// The question.
    pub question: String,
    /// The user's answer (the conversation's next message); `None` while
    /// the turn waits for it, or when the turn's context no longer holds it.
    pub answer: Option<String>,
}

/// What was said in one turn, beyond the user's message (which the
/// conversation's listing keeps).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnRead {
    /// The answer: the `completed` event's output, as text.
    pub answer: Option<String>,
    /// The agent that answered (or ended the turn; while it runs, the one
    /// that has it), as `TYPE@VERSION`.
    pub by: Option<String>,
    /// The agents the turn went through, in order, each as `TYPE@VERSION`:
    /// more than one when it was handed off.
    pub path: Vec<String>,
    /// The questions its agents asked the user, in order.
    pub asked: Vec<Asked>,
    /// Why it failed, when it did: its reason, and the detail after it.
    pub failed: Option<String>,
}

impl TurnRead {
    /// Reads a turn from its session's `events`, in order (as
    /// `Client::history` gives them). A turn that still runs has no answer
    /// yet; a question it waits on has none either.
    #[must_use]
    pub fn read(events: &[Event]) -> Self {
        let versions = versions(events);
        let label =
            |agent: &str| labelled(agent, versions.get(agent).map(|version| version.as_str()));
        let mut hops = Vec::new();
        for event in events {
            Event::follow_path(&mut hops, event);
        }
        let end = baton_client::ending(events);
        let by = (end.and_then(|end| end.agent.as_deref()))
            .or_else(|| hops.last().map(|hop| hop.agent.as_str()))
            .or_else(|| events.iter().rev().find_map(|event| event.agent.as_deref()))
            .map(label);
        let answer = end
            .filter(|end| end.kind == EventType::Completed)
            .and_then(|end| end.output.as_ref())
            .map(crate::text::value);
        let failed = end.filter(|end| end.kind == EventType::Failed).map(|end| {
            let reason = end.reason.as_ref().map_or("unknown", |r| r.as_str());
            match end.detail.as_deref() {
                Some(detail) if !detail.is_empty() => format!("{reason}: {detail}"),
                _ => reason.to_owned(),
            }
        });
        Self {
            answer,
            by,
            path: hops.iter().map(|hop| label(&hop.agent)).collect(),
            asked: asked(events, &label),
            failed,
        }
    }
}

/// The version each agent type of the session ran on: the versions its
/// events name (a worker names its own), over the ones it was pinned to.
fn versions(events: &[Event]) -> BTreeMap<baton_proto::AgentName, baton_proto::Version> {
    let mut versions = BTreeMap::new();
    for event in events {
        versions.extend(event.versions.clone());
    }
    // The version that ran it: a worker that names a version made its type
    // versioned when it started (a rollout), whether or not this session
    // was pinned before the sender saw that rollout.
    for event in events {
        if let (Some(agent), Some(version)) = (&event.agent, &event.version) {
            versions.insert(agent.clone(), version.clone());
        }
    }
    versions
}

/// The questions of a turn with their answers.
///
/// A question is a `waiting` event in which the agent said something (its
/// `detail`, the last message of its update), other than a tool call
/// waiting for approval: a person's task (a human agent's) says nothing.
/// The answers are found in the context of the session's last event that
/// carries one (its end, or the question it waits on now): the message
/// after an exec agent's question, or the result of an `ask_user` call.
/// The latest answers belong to this turn (earlier turns' messages come
/// first), so they are paired with its answered questions from the end.
fn asked(events: &[Event], label: &dyn Fn(&str) -> String) -> Vec<Asked> {
    let questions: Vec<usize> = (events.iter().enumerate())
        .filter(|(n, event)| is_question(events, *n, event))
        .map(|(n, _)| n)
        .collect();
    if questions.is_empty() {
        return Vec::new();
    }
    // A question was answered when the session went on after it.
    let answered =
        |n: usize| (events[n + 1..].iter()).any(|later| !matches!(later.kind, EventType::Delta));
    let texts: HashSet<&str> = (questions.iter())
        .filter_map(|n| events[*n].detail.as_deref())
        .collect();
    let found = answers(&latest_messages(events), &texts);
    let expected = questions.iter().filter(|n| answered(**n)).count();
    let mut answers = found[found.len().saturating_sub(expected)..].iter();
    // Fewer found than answered (a context trimmed since): the earliest
    // questions go without.
    let mut missing = expected.saturating_sub(found.len());
    questions
        .iter()
        .map(|&n| {
            let event = &events[n];
            let answer = if !answered(n) {
                None
            } else if missing > 0 {
                missing -= 1;
                None
            } else {
                answers.next().cloned()
            };
            Asked {
                by: label(event.agent.as_deref().unwrap_or("-")),
                question: event.detail.clone().unwrap_or_default(),
                answer,
            }
        })
        .collect()
}

/// Whether event `n` of `events` is a question to the user.
fn is_question(events: &[Event], n: usize, event: &Event) -> bool {
    if event.kind != EventType::Waiting || event.detail.as_deref().is_none_or(str::is_empty) {
        return false;
    }
    let before = events[..n]
        .iter()
        .rev()
        .find(|earlier| earlier.kind != EventType::Delta);
    before.is_none_or(|earlier| earlier.kind != EventType::ToolApprovalRequested)
}

/// The messages of the session's last event that carries a context: its
/// ending context, or a waiting event's context and what the agent added
/// to it (its `output`).
fn latest_messages(events: &[Event]) -> Vec<Message> {
    let Some(last) = events.iter().rev().find(|event| event.context.is_some()) else {
        return Vec::new();
    };
    let mut messages = (last.context.as_deref())
        .map(|context| context.messages.clone())
        .unwrap_or_default();
    if last.kind == EventType::Waiting {
        messages.extend(update_messages(last.output.as_ref()));
    }
    messages
}

/// The messages of a `waiting` event's update (its `output`).
fn update_messages(output: Option<&Value>) -> Vec<Message> {
    let Some(Value::Map(fields)) = output else {
        return Vec::new();
    };
    (fields.iter())
        .find(|(name, _)| name.as_str() == Some("messages"))
        .and_then(|(_, messages)| rmpv::ext::from_value(messages.clone()).ok())
        .unwrap_or_default()
}

/// The user's answers among `messages`, in order: the result of an
/// `ask_user` call (an LLM agent's), or a user's message right after an
/// agent said one of the `questions` (an exec agent's).
fn answers(messages: &[Message], questions: &HashSet<&str>) -> Vec<String> {
    let mut found = Vec::new();
    for (n, message) in messages.iter().enumerate() {
        let called = message.role == Role::Tool && message.name.as_deref() == Some(ASK_USER);
        let replied = message.role == Role::User
            && n.checked_sub(1)
                .and_then(|before| messages.get(before))
                .is_some_and(|before| {
                    before.role == Role::Agent
                        && before.tool_calls.is_none()
                        && questions.contains(before.content.as_str())
                });
        if called || replied {
            found.push(message.content.clone());
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use baton_proto::{Context, Hop, Reason};
    use uuid::Uuid;

    use super::*;

    fn event(kind: EventType, agent: &str, version: Option<&str>) -> Event {
        let mut event = Event::new(Uuid::new_v4(), Uuid::nil(), kind);
        event.agent = Some(baton_proto::AgentName::unchecked(agent));
        event.version = version.map(baton_proto::Version::unchecked);
        event
    }

    fn hop(agent: &str) -> Hop {
        Hop::new(baton_proto::AgentName::unchecked(agent), "i1", None)
    }

    fn said(role: Role, text: &str) -> Message {
        Message::new(role, text)
    }

    fn context(messages: Vec<Message>) -> Option<Box<Context>> {
        Some(Box::new(Context {
            messages,
            ..Context::default()
        }))
    }

    #[test]
    fn a_label_names_the_version_when_there_is_one() {
        assert_eq!(labelled("helper", Some("2")), "helper@2");
        assert_eq!(labelled("helper", None), "helper");
        assert_eq!(labelled("helper", Some("")), "helper");
    }

    /// An exec agent's turn: handed off, asked once, answered.
    #[test]
    fn a_handed_off_turn_with_a_question_reads_as_said() {
        let mut handoff = event(EventType::Handoff, "front", Some("1"));
        handoff.path = vec![hop("front")];
        let mut waiting = event(EventType::Waiting, "helper", Some("2"));
        waiting.detail = Some("How many?".to_owned());
        waiting.context = context(vec![said(Role::User, "A table.")]);
        let accepted = event(EventType::Accepted, "helper", Some("2"));
        let mut done = event(EventType::Completed, "helper", Some("2"));
        done.path = vec![hop("front"), hop("helper")];
        done.output = Some(Value::from("Booked for two."));
        // The end keeps the session's pins.
        done.versions = BTreeMap::from([
            (
                baton_proto::AgentName::from_static("front"),
                baton_proto::Version::from_static("1"),
            ),
            (
                baton_proto::AgentName::from_static("helper"),
                baton_proto::Version::from_static("2"),
            ),
        ]);
        done.context = context(vec![
            said(Role::User, "Hi."),
            said(Role::Agent, "Hello."),
            said(Role::User, "A table."),
            said(Role::Agent, "How many?"),
            said(Role::User, "Two."),
            said(Role::Agent, "Booked for two."),
        ]);
        let read = TurnRead::read(&[handoff, waiting, accepted, done]);
        assert_eq!(read.answer.as_deref(), Some("Booked for two."));
        assert_eq!(read.by.as_deref(), Some("helper@2"));
        assert_eq!(read.path, ["front@1", "helper@2"]);
        assert_eq!(
            read.asked,
            [Asked {
                by: "helper@2".to_owned(),
                question: "How many?".to_owned(),
                answer: Some("Two.".to_owned()),
            }]
        );
        assert_eq!(read.failed, None);
    }

    /// An LLM agent's questions: answered as its `ask_user` calls' results;
    /// the last one still waits, its earlier answer in the update.
    #[test]
    fn an_llm_agents_questions_are_answered_by_its_calls_results() {
        let mut first = event(EventType::Waiting, "triage", None);
        first.detail = Some("Which order?".to_owned());
        first.context = context(vec![said(Role::User, "Refund.")]);
        let accepted = event(EventType::Accepted, "triage", None);
        let mut second = event(EventType::Waiting, "triage", None);
        second.detail = Some("Which card?".to_owned());
        second.context = context(vec![said(Role::User, "Refund.")]);
        let mut result = said(Role::Tool, "ABC-1");
        result.name = Some(ASK_USER.to_owned());
        let update = vec![result, said(Role::Agent, "Which card?")];
        let messages = rmpv::ext::to_value(&update).unwrap_or(Value::Nil);
        second.output = Some(Value::Map(vec![(Value::from("messages"), messages)]));
        let read = TurnRead::read(&[first, accepted, second]);
        let answers: Vec<Option<&str>> = (read.asked.iter())
            .map(|asked| asked.answer.as_deref())
            .collect();
        assert_eq!(answers, [Some("ABC-1"), None]);
        assert_eq!(read.asked[1].question, "Which card?");
        assert_eq!(read.answer, None);
        assert_eq!(read.by.as_deref(), Some("triage"));
    }

    #[test]
    fn a_failed_turn_says_why_and_a_person_task_is_no_question() {
        let human = event(EventType::Waiting, "human_support", None);
        let mut failed = event(EventType::Failed, "human_support", None);
        failed.reason = Some(Reason::Cancelled);
        failed.detail = Some("by ops".to_owned());
        let read = TurnRead::read(&[human, failed]);
        assert!(read.asked.is_empty());
        assert_eq!(read.failed.as_deref(), Some("cancelled: by ops"));
        assert_eq!(read.answer, None);
    }
}
