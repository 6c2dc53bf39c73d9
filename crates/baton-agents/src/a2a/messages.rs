//! A2A tasks and messages from and into Baton's terms: the conversation
//! sent, the answer read back.

use a2a::{Message, Part, PartContent, Role, Task, TaskState, TaskStatus};
use baton_proto::Value;
use baton_worker::Task as BatonTask;

/// Whether a task in `state` is at rest: ended, or waiting for its caller.
pub(super) fn at_rest(state: &TaskState) -> bool {
    state.is_terminal() || matches!(state, TaskState::InputRequired | TaskState::AuthRequired)
}

pub(super) fn empty(id: &str, context: &str) -> Task {
    Task {
        id: id.to_owned(),
        context_id: context.to_owned(),
        status: TaskStatus {
            state: TaskState::Submitted,
            message: None,
            timestamp: None,
        },
        artifacts: None,
        history: None,
        metadata: None,
    }
}

/// A direct reply (a message instead of a task) as a completed task.
pub(super) fn answered(context: &str, reply: Message) -> Task {
    let mut task = empty(&reply.message_id, context);
    task.status = TaskStatus {
        state: TaskState::Completed,
        message: Some(reply),
        timestamp: None,
    };
    task
}

/// The text of a message's text parts.
pub(super) fn text_of(message: &Message) -> String {
    message
        .parts
        .iter()
        .filter_map(Part::as_text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The answer in a task's artifacts: their text, or one data part as is.
pub(super) fn answer(task: &Task) -> Option<Value> {
    let parts: Vec<&Part> = task
        .artifacts
        .iter()
        .flatten()
        .flat_map(|a| &a.parts)
        .collect();
    if let [part] = parts.as_slice()
        && let PartContent::Data(data) = &part.content
    {
        return rmpv::ext::to_value(data).ok();
    }
    let texts: Vec<&str> = parts.iter().filter_map(|p| p.as_text()).collect();
    (!texts.is_empty()).then(|| Value::from(texts.join("\n")))
}

/// The task as one A2A message: the last user message as its text part,
/// and a data part with the whole conversation (role, name and content of
/// each message) and the shared variables; the session and envelope ids in
/// the message's metadata.
pub(super) fn conversation(task: &BatonTask, context: &str, message_id: String) -> Message {
    let envelope = &task.envelope;
    let messages: Vec<serde_json::Value> = envelope
        .context
        .messages
        .iter()
        .map(|m| serde_json::json!({"role": m.role.as_str(), "name": m.name, "content": m.content}))
        .collect();
    let variables = serde_json::to_value(&envelope.context.variables).unwrap_or_default();
    let data = serde_json::json!({"conversation": messages, "variables": variables});
    let parts = vec![Part::text(task.last_user_message()), Part::data(data)];
    let mut message = Message::new(Role::User, parts);
    message.message_id = message_id;
    message.context_id = Some(context.to_owned());
    let meta = serde_json::json!({"baton": {"session": envelope.session, "envelope": envelope.id}});
    message.metadata = serde_json::from_value(meta).ok();
    message
}
