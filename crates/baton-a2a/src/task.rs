//! A Baton session seen as an A2A task: the task id is the session id, the
//! state follows the session's last event, the answer is an artifact.

use a2a::{
    Artifact, Message, Part, Role, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState,
    TaskStatus, TaskStatusUpdateEvent,
};
use baton_gateway::text::value as show;
use baton_proto::{Event, EventType, Reason, Value};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::terms::Answer;

/// The A2A state of a session whose last event is `last`.
pub(crate) fn state(last: Option<&Event>) -> TaskState {
    let Some(last) = last else {
        return TaskState::Submitted;
    };
    match &last.kind {
        EventType::Completed if Answer::of(last).is_some_and(|said| said.reject.is_some()) => {
            TaskState::Rejected
        }
        EventType::Completed => TaskState::Completed,
        EventType::Failed if last.reason == Some(Reason::Cancelled) => TaskState::Canceled,
        EventType::Failed => TaskState::Failed,
        EventType::Waiting => TaskState::InputRequired,
        _ => TaskState::Working,
    }
}

/// Whether a task in `state` is at rest, so its stream is over: a terminal or an interrupted state.
pub(crate) fn at_rest(state: &TaskState) -> bool {
    state.is_terminal() || matches!(state, TaskState::InputRequired | TaskState::AuthRequired)
}

fn at(ms: u64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(i64::try_from(ms).ok()?)
}

fn agent_message(task: &str, context: &str, text: String) -> Message {
    let mut message = Message::new(Role::Agent, vec![Part::text(text)]);
    message.task_id = Some(task.to_owned());
    message.context_id = Some(context.to_owned());
    message
}

/// The status of a session whose last event is `last`.
pub(crate) fn status(task: &str, context: &str, last: Option<&Event>) -> TaskStatus {
    let state = state(last);
    let message = last.filter(|_| state != TaskState::Completed).map(|event| {
        let why = Answer::of(event).and_then(|said| said.reject);
        let text = why.unwrap_or_else(|| baton_gateway::text::status(event));
        agent_message(task, context, text)
    });
    TaskStatus {
        state,
        message,
        timestamp: last.and_then(|e| at(e.at)),
    }
}

/// The answer of a completed session, as artifacts: those it gave in
/// A2A's terms, whole, or its output as one (text, or data).
pub(crate) fn answers(session: Uuid, last: &Event) -> Vec<Artifact> {
    if let Some(said) = Answer::of(last) {
        return said.whole();
    }
    answer(session, last).into_iter().collect()
}

/// The output of a completed session, as one artifact.
fn answer(session: Uuid, last: &Event) -> Option<Artifact> {
    if last.kind != EventType::Completed {
        return None;
    }
    let output = last.output.as_ref()?;
    let part = match output {
        Value::String(_) => Part::text(show(output)),
        other => Part::data(serde_json::to_value(other).unwrap_or_default()),
    };
    Some(Artifact {
        artifact_id: format!("{session}-answer"),
        name: Some("answer".to_owned()),
        description: None,
        parts: vec![part],
        metadata: None,
        extensions: None,
    })
}

/// The direct answer of a session that completed with a message (not a
/// task) in A2A's terms.
pub(crate) fn direct(session: Uuid, context: &str, last: Option<&Event>) -> Option<Message> {
    let parts = Answer::of(last?)?.message?;
    let mut message = Message::new(Role::Agent, parts);
    message.message_id = format!("{session}-message");
    message.context_id = Some(context.to_owned());
    Some(message)
}

/// Keeps the last `length` messages of `task`'s history (all of them
/// when `None`, none when 0).
pub(crate) fn trim_history(task: &mut Task, length: Option<i32>) {
    let Some(length) = length.and_then(|n| usize::try_from(n).ok()) else {
        return;
    };
    if let Some(history) = &mut task.history {
        let extra = history.len().saturating_sub(length);
        history.drain(..extra);
        if history.is_empty() {
            task.history = None;
        }
    }
}

/// The session's conversation as A2A messages, when its last event carries it.
fn history(task: &str, context: &str, last: Option<&Event>) -> Option<Vec<Message>> {
    let messages = &last?.context.as_ref()?.messages;
    Some(
        messages
            .iter()
            .enumerate()
            .map(|(n, m)| {
                let role = if m.role == baton_proto::Role::User {
                    Role::User
                } else {
                    Role::Agent
                };
                let mut message = Message::new(role, vec![Part::text(m.content.clone())]);
                message.message_id = format!("{task}-{n}");
                message.task_id = Some(task.to_owned());
                message.context_id = Some(context.to_owned());
                message
            })
            .collect(),
    )
}

/// Session `session` as an A2A task in `context`, from its last event.
pub(crate) fn task(session: Uuid, context: &str, last: Option<&Event>, with_history: bool) -> Task {
    let id = session.to_string();
    let path: Vec<&str> = last
        .map(|e| e.path.iter().map(|hop| hop.agent.as_str()).collect())
        .unwrap_or_default();
    let metadata = serde_json::json!({ "baton": { "session": id, "path": path } });
    Task {
        status: status(&id, context, last),
        artifacts: last
            .map(|e| answers(session, e))
            .filter(|artifacts| !artifacts.is_empty()),
        history: if with_history {
            history(&id, context, last)
        } else {
            None
        },
        metadata: serde_json::from_value(metadata).ok(),
        context_id: context.to_owned(),
        id,
    }
}

/// A piece of an answer being written (a `delta` event), as an update of
/// the artifact `<task>-<envelope>-<step>` named after the agent that
/// writes it: the text `shown` has not shown yet, appended to what came
/// before. `None` for any other event, or when all of it was shown.
pub(crate) fn piece(
    session: Uuid,
    context: &str,
    event: &Event,
    shown: &mut baton_proto::Shown,
) -> Option<StreamResponse> {
    let delta = baton_proto::Delta::of(event)?;
    let fresh = shown.fresh(&delta);
    if fresh.is_empty() {
        return None;
    }
    let first = delta.offset == 0 && fresh.len() == delta.text.len();
    let id = session.to_string();
    Some(StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
        task_id: id.clone(),
        context_id: context.to_owned(),
        artifact: Artifact {
            artifact_id: format!("{id}-{}-{}", delta.envelope, delta.step),
            name: event.agent.as_ref().map(ToString::to_string),
            description: Some("an answer as it is written".to_owned()),
            parts: vec![Part::text(fresh.to_owned())],
            metadata: None,
            extensions: None,
        },
        append: Some(!first),
        last_chunk: Some(false),
        metadata: None,
    }))
}

/// What a stream sends for `event`: the answer's artifact before a
/// completion, then the status.
pub(crate) fn updates(session: Uuid, context: &str, event: &Event) -> Vec<StreamResponse> {
    let id = session.to_string();
    let mut updates = Vec::new();
    let chunks: Vec<(Artifact, Option<bool>, Option<bool>)> = match Answer::of(event) {
        Some(said) => said
            .artifacts
            .into_iter()
            .map(|c| (c.artifact, c.append, c.last_chunk))
            .collect(),
        None => answer(session, event)
            .map(|artifact| (artifact, None, Some(true)))
            .into_iter()
            .collect(),
    };
    for (artifact, append, last_chunk) in chunks {
        updates.push(StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: id.clone(),
            context_id: context.to_owned(),
            artifact,
            append,
            last_chunk,
            metadata: None,
        }));
    }
    let mut status = status(&id, context, Some(event));
    if status.state == TaskState::Working {
        status.message = Some(agent_message(
            &id,
            context,
            baton_gateway::text::status(event),
        ));
    }
    updates.push(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: id,
        context_id: context.to_owned(),
        status,
        metadata: None,
    }));
    updates
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventType) -> Event {
        Event::new(Uuid::new_v4(), Uuid::new_v4(), kind)
    }

    #[test]
    fn states_follow_the_last_event() {
        assert_eq!(state(None), TaskState::Submitted);
        assert_eq!(state(Some(&event(EventType::Accepted))), TaskState::Working);
        assert_eq!(state(Some(&event(EventType::Handoff))), TaskState::Working);
        assert_eq!(
            state(Some(&event(EventType::Waiting))),
            TaskState::InputRequired
        );
        assert_eq!(
            state(Some(&event(EventType::Completed))),
            TaskState::Completed
        );
        assert_eq!(state(Some(&event(EventType::Failed))), TaskState::Failed);
        let mut cancelled = event(EventType::Failed);
        cancelled.reason = Some(Reason::Cancelled);
        assert_eq!(state(Some(&cancelled)), TaskState::Canceled);
        assert!(at_rest(&TaskState::InputRequired) && !at_rest(&TaskState::Working));
    }

    #[test]
    fn pieces_of_an_answer_append_to_one_artifact_once_each() {
        let envelope = Uuid::new_v4();
        let session = Uuid::new_v4();
        let piece_at = |offset: u64, text: &str| {
            baton_proto::Delta {
                envelope,
                step: 1,
                offset,
                text: text.to_owned(),
            }
            .event(session, &baton_proto::AgentName::from_static("writer"))
        };
        let mut shown = baton_proto::Shown::default();
        let sent: Vec<_> = [
            piece_at(0, "Hello "),
            piece_at(6, "there"),
            piece_at(0, "Hello there"),
        ]
        .iter()
        .filter_map(|event| piece(session, "c", event, &mut shown))
        .collect();
        assert_eq!(sent.len(), 2, "the cut stream's repeat adds nothing");
        let json = serde_json::to_value(&sent).unwrap();
        let artifact = format!("{session}-{envelope}-1");
        assert_eq!(
            json[0]["artifactUpdate"]["artifact"]["artifactId"],
            artifact
        );
        assert_eq!(json[0]["artifactUpdate"]["artifact"]["name"], "writer");
        assert_eq!(json[0]["artifactUpdate"]["append"], false);
        assert_eq!(json[1]["artifactUpdate"]["append"], true);
        assert_eq!(
            json[1]["artifactUpdate"]["artifact"]["parts"][0]["text"],
            "there"
        );
        let other = event(EventType::Handoff);
        assert!(piece(session, "c", &other, &mut shown).is_none());
    }

    #[test]
    fn a_completion_streams_its_answer_then_its_status() {
        let mut done = event(EventType::Completed);
        done.output = Some(Value::from("42"));
        let sent = updates(done.session, "ctx", &done);
        let json = serde_json::to_value(&sent).unwrap();
        assert_eq!(
            json[0]["artifactUpdate"]["artifact"]["parts"][0]["text"],
            "42"
        );
        assert_eq!(
            json[1]["statusUpdate"]["status"]["state"],
            "TASK_STATE_COMPLETED"
        );
        assert_eq!(json[1]["statusUpdate"]["contextId"], "ctx");
    }

    #[test]
    fn a_hop_streams_as_working_with_what_happened() {
        let mut hop = event(EventType::Handoff);
        hop.agent = Some(baton_proto::AgentName::from_static("triage"));
        hop.to = Some(baton_proto::AgentName::from_static("refund"));
        hop.reason = Some(Reason::OutOfScope);
        let json = serde_json::to_value(updates(hop.session, "c", &hop)).unwrap();
        assert_eq!(
            json[0]["statusUpdate"]["status"]["state"],
            "TASK_STATE_WORKING"
        );
        assert_eq!(
            json[0]["statusUpdate"]["status"]["message"]["parts"][0]["text"],
            "handoff triage -> refund (out_of_scope)"
        );
    }
}
