//! What the model reads: the spec's system prompt, then the session's
//! conversation as chat messages ([`conversation`]), a compaction's summary
//! under its [`SUMMARY_HEADING`]; and what a summarising model is asked
//! ([`summary_request`]).

use baton_proto::{Message, Role};
use serde_json::Value as Json;

use super::chat::{ChatMessage, ChatRole, Spoken};

/// How a summary is shown to the agent's model.
pub(crate) const SUMMARY_HEADING: &str = "Summary of the conversation before the messages below:";

/// What the summarising model is told.
const SUMMARIZE: &str = "Summarise the conversation below for the agent that continues it. Keep every name, number, decision, promise and open question; leave out greetings and repetition. Answer with the summary alone.";

/// `system_prompt` (unless empty), then `conversation`, as chat messages:
/// a compaction's summary under its heading, a dropped one not at all.
pub(crate) fn conversation<'a>(
    system_prompt: &str,
    conversation: impl IntoIterator<Item = &'a Message>,
) -> Vec<ChatMessage> {
    let mut messages = Vec::new();
    if !system_prompt.is_empty() {
        messages.push(ChatMessage::spoken(ChatRole::System, system_prompt));
    }
    for message in conversation {
        if message.compaction.is_some() {
            if !message.content.is_empty() {
                let content = format!("{SUMMARY_HEADING}\n{}", message.content);
                messages.push(ChatMessage::spoken(ChatRole::System, content));
            }
            continue;
        }
        let role = match message.role {
            Role::User => ChatRole::User,
            Role::System => ChatRole::System,
            Role::Tool => ChatRole::Tool,
            _ => ChatRole::Assistant,
        };
        messages.push(ChatMessage::Spoken(Spoken {
            role,
            content: message.content.clone(),
            name: message.name.clone().filter(|_| role != ChatRole::Tool),
            tool_calls: message
                .tool_calls
                .as_ref()
                .map(|calls| serde_json::to_value(calls).unwrap_or(Json::Null)),
            tool_call_id: message.tool_call_id.clone(),
        }));
    }
    messages
}

/// What a summarising model is asked of `transcript`, the older messages.
pub(crate) fn summary_request(transcript: String) -> [ChatMessage; 2] {
    [
        ChatMessage::spoken(ChatRole::System, SUMMARIZE),
        ChatMessage::spoken(ChatRole::User, transcript),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The conversation as it was built before its messages were typed.
    fn as_objects(system_prompt: &str, conversation: &[Message]) -> Vec<Json> {
        let mut messages = Vec::new();
        if !system_prompt.is_empty() {
            messages.push(json!({"role": "system", "content": system_prompt}));
        }
        for message in conversation {
            if message.compaction.is_some() {
                if !message.content.is_empty() {
                    let content = format!("{SUMMARY_HEADING}\n{}", message.content);
                    messages.push(json!({"role": "system", "content": content}));
                }
                continue;
            }
            let role = match message.role {
                Role::User => "user",
                Role::System => "system",
                Role::Tool => "tool",
                _ => "assistant",
            };
            let mut entry = serde_json::Map::new();
            entry.insert("role".into(), json!(role));
            entry.insert("content".into(), json!(message.content));
            if let Some(name) = message.name.as_deref().filter(|_| role != "tool") {
                entry.insert("name".into(), json!(name));
            }
            if let Some(calls) = &message.tool_calls {
                let calls = serde_json::to_value(calls).unwrap_or(Json::Null);
                entry.insert("tool_calls".into(), calls);
            }
            if let Some(id) = &message.tool_call_id {
                entry.insert("tool_call_id".into(), json!(id));
            }
            messages.push(Json::Object(entry));
        }
        messages
    }

    #[test]
    fn the_conversation_is_written_as_the_objects_it_was_built_as() {
        let mut named = Message::new(Role::Agent, "I will look.\n");
        named.name = Some("helper".to_owned());
        named.tool_calls = Some(baton_proto::Value::Array(vec![baton_proto::Value::Map(
            vec![
                ("id".into(), "c1".into()),
                ("f".into(), baton_proto::Value::F32(0.7)),
            ],
        )]));
        let mut result = Message::new(Role::Tool, "found \"it\"");
        result.name = Some("look".to_owned());
        result.tool_call_id = Some("c1".to_owned());
        let mut summary = Message::new(Role::System, "earlier");
        summary.compaction = Some(baton_proto::Compaction {
            through: 3,
            model: None,
            extra: baton_proto::Map::new(),
        });
        let mut dropped = summary.clone();
        dropped.content.clear();
        let conversation = [
            summary,
            dropped,
            Message::new(Role::User, "é 日本 \u{1}"),
            named,
            result,
            Message::new(Role::System, "note"),
        ];
        for system_prompt in ["", "Be brief."] {
            let typed = super::conversation(system_prompt, &conversation);
            let built = as_objects(system_prompt, &conversation);
            assert_eq!(
                serde_json::to_string(&typed).unwrap(),
                serde_json::to_string(&built).unwrap()
            );
            let measured: usize = typed.iter().map(ChatMessage::json_len).sum();
            let lengths: usize = built.iter().map(crate::limits::json_len).sum();
            assert_eq!(measured, lengths);
        }
    }
}
