//! What the endpoint answers, read through typed fields (each read as
//! absent when it has another shape, as reading the JSON by key did):
//!
//! - [`ChatResponse`]: a chat completion, its [`Choice`]s, their
//!   [`AnswerMessage`] and the [`TokenUsage`] reported;
//! - [`Chunk`]: one event of a streamed completion, its [`Delta`]s;
//! - [`Whole`]: a streamed answer put back together, written as the plain
//!   answer it stands for (what the hop journal records).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};

use super::chat::{AsSent, ToolCall, lenient};

/// A chat completion. The hop journal keeps the JSON it came as; this is
/// how the hop reads it.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ChatResponse {
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) model: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) choices: Vec<Choice>,
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) usage: TokenUsage,
}

/// One choice of a completion.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Choice {
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) message: AsSent<AnswerMessage>,
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) finish_reason: Option<String>,
}

/// The model's message: its text, and the tools it calls.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct AnswerMessage {
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) content: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) tool_calls: Vec<ToolCall>,
}

/// The tokens a call used, as the endpoint reports them.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub(crate) struct TokenUsage {
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) prompt_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) completion_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) total_tokens: Option<u64>,
}

impl ChatResponse {
    /// `answer` read (a part of another shape reads as absent).
    pub(crate) fn of(answer: &Json) -> Self {
        // Read by field, as an object (never as a list of its fields).
        match answer.is_object() {
            true => Self::deserialize(answer).unwrap_or_default(),
            false => Self::default(),
        }
    }

    /// The first choice's message (JSON `null` when there is none).
    pub(crate) fn message(&self) -> AsSent<AnswerMessage> {
        self.choices
            .first()
            .map(|choice| choice.message.clone())
            .unwrap_or_default()
    }

    /// The first choice's text.
    pub(crate) fn text(&self) -> &str {
        self.choices
            .first()
            .and_then(|choice| choice.message.content.as_deref())
            .unwrap_or_default()
    }
}

/// One event of a streamed completion.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Chunk {
    /// The endpoint's error, when the event is one (even a `null` one).
    #[serde(default, deserialize_with = "present")]
    pub(crate) error: Option<Json>,
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) model: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) usage: Option<Map<String, Json>>,
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) choices: Vec<ChunkChoice>,
}

/// A streamed choice: what it adds, and why it ended.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ChunkChoice {
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) finish_reason: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) delta: Delta,
}

/// What an event adds to the answer.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Delta {
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) content: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) tool_calls: Vec<DeltaCall>,
}

/// A piece of a tool call: its index among the answer's calls, and what it
/// adds to the call's id, name and arguments.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct DeltaCall {
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) index: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) function: DeltaFunction,
}

/// A piece of a tool call's function.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct DeltaFunction {
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) name: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub(crate) arguments: Option<String>,
}

/// Reads a field that counts by being there, whatever it holds.
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Json>, D::Error> {
    Json::deserialize(deserializer).map(Some)
}

/// A streamed answer put together, written as a plain answer is:
/// `object`, `choices`, then `model` and `usage` when the stream said them.
#[derive(Debug, Serialize)]
pub(crate) struct Whole {
    object: &'static str,
    choices: [WholeChoice; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Map<String, Json>>,
}

#[derive(Debug, Serialize)]
struct WholeChoice {
    index: u32,
    message: WholeMessage,
    finish_reason: Option<String>,
}

#[derive(Debug, Serialize)]
struct WholeMessage {
    role: &'static str,
    content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<WholeCall>>,
}

/// A streamed tool call, whole.
#[derive(Debug, Serialize)]
pub(crate) struct WholeCall {
    id: String,
    r#type: &'static str,
    function: WholeFunction,
}

#[derive(Debug, Serialize)]
struct WholeFunction {
    name: String,
    arguments: String,
}

impl WholeCall {
    pub(crate) fn new(id: String, name: String, arguments: String) -> Self {
        Self {
            id,
            r#type: "function",
            function: WholeFunction { name, arguments },
        }
    }
}

impl Whole {
    /// The answer of `content` and `calls` (none: no `tool_calls` at all).
    pub(crate) fn new(content: String, calls: Vec<WholeCall>, finish: Option<String>) -> Self {
        let message = WholeMessage {
            role: "assistant",
            content,
            tool_calls: (!calls.is_empty()).then_some(calls),
        };
        Self {
            object: "chat.completion",
            choices: [WholeChoice {
                index: 0,
                message,
                finish_reason: finish,
            }],
            model: None,
            usage: None,
        }
    }

    /// With the model and usage the stream said.
    pub(crate) fn with(mut self, model: Option<String>, usage: Option<Map<String, Json>>) -> Self {
        self.model = model;
        self.usage = usage;
        self
    }

    /// As JSON, for the hop journal.
    pub(crate) fn json(&self) -> Json {
        // Strings, numbers and maps with string keys: cannot fail.
        serde_json::to_value(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn answers_of_any_shape_are_read_as_by_key() {
        let message =
            json!({"content": "hi", "tool_calls": [{"id": "c", "function": {"name": "f"}}]});
        let answer = json!({
            "model": "m",
            "choices": [{"message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": "x", "total_tokens": 9},
        });
        let read = ChatResponse::of(&answer);
        assert_eq!(read.text(), "hi");
        assert_eq!(read.message().tool_calls[0].function.name, "f");
        assert_eq!(read.message().raw, message);
        assert_eq!(
            (
                read.usage.prompt_tokens,
                read.usage.completion_tokens,
                read.usage.total_tokens
            ),
            (Some(3), None, Some(9))
        );
        let odd = ChatResponse::of(&json!({"choices": "none", "model": 3}));
        assert!(odd.choices.is_empty() && odd.model.is_none());
        assert_eq!(odd.message().raw, Json::Null);
        let chunk: Chunk = serde_json::from_value(json!({"error": null})).unwrap();
        assert_eq!(chunk.error, Some(Json::Null));
    }

    #[test]
    fn a_whole_streamed_answer_is_the_object_it_was_built_as() {
        let usage = json!({"prompt_tokens": 1}).as_object().cloned();
        let whole = Whole::new(
            "hi".to_owned(),
            vec![WholeCall::new("c".into(), "f".into(), "{}".into())],
            Some("tool_calls".into()),
        )
        .with(Some("m".into()), usage);
        let built = json!({
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}],
            "model": "m",
            "usage": {"prompt_tokens": 1},
        });
        assert_eq!(whole.json().to_string(), built.to_string());
        let plain = Whole::new(String::new(), Vec::new(), None).json();
        let built = json!({"object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": null}]});
        assert_eq!(plain.to_string(), built.to_string());
    }
}
