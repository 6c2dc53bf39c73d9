//! Chat messages as the chat-completions API reads them, and the model's
//! tool calls:
//!
//! - [`ChatMessage`]: a message of the conversation ([`Spoken`]) or a tool's
//!   result handed back within the hop ([`ToolResult`]), each written with
//!   its fields in the order they were always written, so the request's
//!   bytes, and so its digest, stay those of earlier versions;
//! - [`AsSent`]: a part of the model's answer read through typed fields and
//!   written back byte for byte as it came (its extra fields, their order);
//! - [`ToolCall`]: one call the model made, `{id, function: {name,
//!   arguments}}`;
//! - [`lenient`]: how the answer's fields are read: a field of another
//!   shape reads as absent, as reading the JSON by key always did.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value as Json;

use crate::limits::{json_len, quoted_len};

/// Who says a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ChatRole {
    System,
    User,
    Assistant,
    Tool,
}

impl ChatRole {
    fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }
}

/// One message sent to the model.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub(crate) enum ChatMessage {
    /// A message of the conversation, or the agent's own within the hop.
    Spoken(Spoken),
    /// A tool's result, as the hop hands it back to the model.
    Result(ToolResult),
    /// A message as a program wrote it (`ctx.model`), sent as it is.
    Raw(Json),
}

/// A message: `role`, `content`, then what it has of `name`, `tool_calls`
/// and `tool_call_id`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Spoken {
    pub(crate) role: ChatRole,
    pub(crate) content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    /// The calls as the conversation recorded them, whatever their shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_calls: Option<Json>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_call_id: Option<String>,
}

/// A tool's result within the hop: `role`, then the call's id before the
/// content, as the hop always wrote it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ToolResult {
    role: ChatRole,
    /// The call's id as the model gave it (a string, or what it sent instead).
    tool_call_id: Json,
    content: String,
}

impl ChatMessage {
    /// A message of `role` saying `content`, and nothing else.
    pub(crate) fn spoken(role: ChatRole, content: impl Into<String>) -> Self {
        Self::Spoken(Spoken {
            role,
            content: content.into(),
            name: None,
            tool_calls: None,
            tool_call_id: None,
        })
    }

    /// The agent's message that made the tool `calls`, sent back as they came.
    pub(crate) fn asked(content: &str, calls: &[ToolCall]) -> Self {
        let mut said = Spoken {
            role: ChatRole::Assistant,
            content: content.to_owned(),
            name: None,
            tool_calls: None,
            tool_call_id: None,
        };
        said.tool_calls = Some(calls_as_sent(calls));
        Self::Spoken(said)
    }

    /// The result of the call whose id is `id`.
    pub(crate) fn result(id: impl Into<Json>, content: impl Into<String>) -> Self {
        Self::Result(ToolResult {
            role: ChatRole::Tool,
            tool_call_id: id.into(),
            content: content.into(),
        })
    }

    /// What the message says.
    pub(crate) fn content(&self) -> &str {
        match self {
            Self::Spoken(said) => &said.content,
            Self::Result(result) => &result.content,
            Self::Raw(raw) => raw
                .get("content")
                .and_then(Json::as_str)
                .unwrap_or_default(),
        }
    }

    /// The length in bytes of the message written as JSON, counted without
    /// writing it: a long conversation is measured before every model call.
    pub(crate) fn json_len(&self) -> usize {
        let quoted = |text: &str| quoted_len(text);
        match self {
            Self::Spoken(said) => {
                let mut fields = vec![
                    ("role", quoted(said.role.as_str())),
                    ("content", quoted(&said.content)),
                ];
                if let Some(name) = &said.name {
                    fields.push(("name", quoted(name)));
                }
                if let Some(calls) = &said.tool_calls {
                    fields.push(("tool_calls", json_len(calls)));
                }
                if let Some(id) = &said.tool_call_id {
                    fields.push(("tool_call_id", quoted(id)));
                }
                object_len(&fields)
            }
            Self::Result(result) => object_len(&[
                ("role", quoted(result.role.as_str())),
                ("tool_call_id", json_len(&result.tool_call_id)),
                ("content", quoted(&result.content)),
            ]),
            Self::Raw(raw) => json_len(raw),
        }
    }
}

/// About how many tokens `messages` are, as JSON: four characters a token.
pub(crate) fn tokens_in(messages: &[ChatMessage]) -> u64 {
    let characters: usize = messages.iter().map(ChatMessage::json_len).sum();
    (characters as u64).div_ceil(4)
}

/// The length of a JSON object of `fields` (plain keys, and their values'
/// lengths): its braces, a colon per field and a comma between two.
fn object_len(fields: &[(&str, usize)]) -> usize {
    let inside: usize = fields
        .iter()
        .map(|(key, value)| key.len() + 3 + value)
        .sum();
    2 + inside + fields.len().saturating_sub(1)
}

/// `calls` as one JSON array of the calls as they came.
pub(crate) fn calls_as_sent(calls: &[ToolCall]) -> Json {
    Json::Array(calls.iter().map(|call| call.raw.clone()).collect())
}

/// A part of the model's answer: `value`, read through typed fields, and
/// `raw`, the JSON it came as, which is what it is written back as.
#[derive(Debug, Clone, Default)]
pub(crate) struct AsSent<T> {
    pub(crate) value: T,
    pub(crate) raw: Json,
}

impl<T> std::ops::Deref for AsSent<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<'de, T: DeserializeOwned + Default> Deserialize<'de> for AsSent<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Json::deserialize(deserializer)?;
        let value = T::deserialize(&raw).unwrap_or_default();
        Ok(Self { value, raw })
    }
}

impl<T> Serialize for AsSent<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(serializer)
    }
}

/// One tool call the model made, as it came.
pub(crate) type ToolCall = AsSent<Call>;

/// A tool call's parts.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Call {
    /// The call's id as the model gave it (a string, as a rule).
    #[serde(default)]
    pub(crate) id: Json,
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) function: Function,
}

/// The function a tool call calls.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Function {
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) name: String,
    /// The arguments as JSON text, when they are text.
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) arguments: Option<String>,
}

impl Call {
    /// The call's id, when it is text.
    pub(crate) fn id(&self) -> Option<&str> {
        self.id.as_str()
    }

    /// The call's arguments as a JSON value: absent or empty ones are `{}`.
    pub(crate) fn parsed_arguments(&self) -> Result<Json, serde_json::Error> {
        let text = self.function.arguments.as_deref().unwrap_or("{}");
        serde_json::from_str(if text.trim().is_empty() { "{}" } else { text })
    }
}

/// `value` read as a `T`, when it is a JSON object (never a list of its
/// fields) of `T`'s shape.
pub(crate) fn read_object<T: DeserializeOwned>(value: &Json) -> Option<T> {
    value
        .is_object()
        .then(|| T::deserialize(value).ok())
        .flatten()
}

/// Reads a field of any shape: one that is not a `T` reads as `T`'s default.
pub(crate) fn lenient<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    let value = Json::deserialize(deserializer)?;
    Ok(T::deserialize(&value).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn messages_are_written_as_the_objects_they_were_built_as() {
        let calls: Vec<ToolCall> = serde_json::from_value(json!([
            {"index": 0, "id": "c1", "type": "function", "function": {"name": "look", "arguments": "{\"q\":1}"}, "x": [1]},
            {"function": {"arguments": 3}},
        ]))
        .unwrap();
        assert_eq!(calls[0].id(), Some("c1"));
        assert_eq!(calls[0].function.name, "look");
        assert_eq!(calls[1].function.arguments, None);
        let mut named = Spoken {
            role: ChatRole::User,
            content: "é \"日本\"\n".to_owned(),
            name: Some("ann".to_owned()),
            tool_calls: Some(json!([{"id": "a"}])),
            tool_call_id: Some("a".to_owned()),
        };
        let built = [
            (
                ChatMessage::Spoken(named.clone()),
                json!({"role": "user", "content": "é \"日本\"\n", "name": "ann", "tool_calls": [{"id": "a"}], "tool_call_id": "a"}),
            ),
            (
                ChatMessage::spoken(ChatRole::System, "be brief"),
                json!({"role": "system", "content": "be brief"}),
            ),
            (
                ChatMessage::asked("", &calls),
                json!({"role": "assistant", "content": "", "tool_calls": [calls[0].raw, calls[1].raw]}),
            ),
            (
                ChatMessage::result("c1", "found\u{1}"),
                json!({"role": "tool", "tool_call_id": "c1", "content": "found\u{1}"}),
            ),
            (
                ChatMessage::result(Json::Null, "x"),
                json!({"role": "tool", "tool_call_id": null, "content": "x"}),
            ),
            (
                ChatMessage::Spoken({
                    named.name = None;
                    named.tool_calls = None;
                    named
                }),
                json!({"role": "user", "content": "é \"日本\"\n", "tool_call_id": "a"}),
            ),
        ];
        for (message, object) in &built {
            let written = serde_json::to_string(message).unwrap();
            assert_eq!(written, serde_json::to_string(object).unwrap());
            assert_eq!(message.json_len(), written.len(), "{written}");
        }
        assert_eq!(
            serde_json::to_string(&calls).unwrap(),
            r#"[{"index":0,"id":"c1","type":"function","function":{"name":"look","arguments":"{\"q\":1}"},"x":[1]},{"function":{"arguments":3}}]"#
        );
    }
}
