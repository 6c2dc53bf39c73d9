//! The body of a chat completion request, written once per call and
//! without copying the conversation: a long conversation's request is
//! megabytes, and its digest (what is asked, see `replay`) is taken of
//! the same bytes the endpoint gets.
//!
//! A request's messages are typed ([`ChatMessage`]); the bytes are those
//! `serde_json` writes for the body as a JSON object
//! built field by field (`model`, `messages`, `stream`, `stream_options`,
//! `tools`, `temperature`, `max_tokens`), so digests recorded by earlier
//! versions still match.

use serde::Serialize;
use serde_json::{Value as Json, json};

use super::chat::ChatMessage;

/// What one model call asks: the model, the chat messages, the tools
/// offered (as the API lists them) and the spec's sampling settings.
pub(crate) struct Request<'a> {
    pub(crate) model: &'a str,
    pub(crate) messages: &'a [ChatMessage],
    pub(crate) tools: Option<Vec<Json>>,
    pub(crate) temperature: Option<f32>,
    pub(crate) max_tokens: Option<u32>,
    /// Other fields of the body a program asked for (`ctx.model`'s
    /// `params`: `tool_choice`, `response_format`, ...), written last.
    pub(crate) params: Option<&'a serde_json::Map<String, Json>>,
    /// About how many tokens `messages` are (measured once per call).
    pub(crate) prompt: u64,
    /// The body written without streaming, when it was written already
    /// (for the digest of what is asked), so the call sends those bytes
    /// instead of writing them again.
    pub(crate) plain: Option<bytes::Bytes>,
}

impl Request<'_> {
    /// The request body, written: streamed or not.
    pub(crate) fn written(&self, streamed: bool) -> bytes::Bytes {
        let mut body = Body::new(self.model, self.messages, streamed);
        body.tools.clone_from(&self.tools);
        body.temperature = self.temperature.map(|temperature| json!(temperature));
        body.max_tokens = self.max_tokens;
        body.params = self.params;
        body.written()
    }

    /// The body to send: the plain one written already, unless `streamed`.
    pub(crate) fn body(&self, streamed: bool) -> bytes::Bytes {
        match (streamed, &self.plain) {
            (false, Some(plain)) => plain.clone(),
            _ => self.written(streamed),
        }
    }
}

/// A request body that borrows the conversation (of messages `M`).
#[derive(Serialize)]
struct Body<'a, M> {
    model: &'a str,
    messages: &'a [M],
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<Json>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<Json>>,
    /// As a JSON number made from the spec's `f32`, as it always was.
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<Json>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    /// A program's other fields, last; nothing when absent.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    params: Option<&'a serde_json::Map<String, Json>>,
}

impl<'a, M: Serialize> Body<'a, M> {
    fn new(model: &'a str, messages: &'a [M], streamed: bool) -> Self {
        Self {
            model,
            messages,
            stream: streamed.then_some(true),
            stream_options: streamed.then(|| json!({"include_usage": true})),
            tools: None,
            temperature: None,
            max_tokens: None,
            params: None,
        }
    }

    fn written(&self) -> bytes::Bytes {
        // Strings, numbers and maps with string keys: writing cannot fail.
        serde_json::to_vec(self).unwrap_or_default().into()
    }
}

#[cfg(test)]
mod tests {
    use super::super::offer::{ToolSource, function, parameters};
    use super::*;

    /// The body as it was built before it was written without copying:
    /// a JSON object, field by field.
    fn as_object(body: &Body<'_, Json>) -> Json {
        let mut object = json!({"model": body.model, "messages": body.messages});
        if body.stream.is_some() {
            object["stream"] = json!(true);
            object["stream_options"] = json!({"include_usage": true});
        }
        if let Some(tools) = &body.tools {
            object["tools"] = tools.iter().cloned().collect();
        }
        if let Some(temperature) = &body.temperature {
            object["temperature"] = temperature.clone();
        }
        if let Some(max_tokens) = body.max_tokens {
            object["max_tokens"] = json!(max_tokens);
        }
        object
    }

    #[test]
    fn the_written_body_is_byte_for_byte_the_object_it_was() {
        let messages = [
            json!({"role": "system", "content": "Answer \"briefly\".\n"}),
            json!({"role": "user", "content": "é 日本 \u{1}", "name": "ann"}),
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{\"q\":1}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "found"}),
        ];
        let tools = vec![function(
            "look",
            "Looks.",
            parameters(&ToolSource::HandBack),
        )];
        for streamed in [false, true] {
            for with in 0..4 {
                let mut body = Body::new("gpt-x", &messages, streamed);
                if with & 1 == 1 {
                    body.tools = Some(tools.clone());
                }
                if with & 2 == 2 {
                    body.temperature = Some(json!(0.7_f32));
                    body.max_tokens = Some(300);
                }
                let expected = serde_json::to_vec(&as_object(&body)).unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&body.written()),
                    String::from_utf8_lossy(&expected),
                    "streamed {streamed}, with {with}"
                );
            }
        }
    }

    #[test]
    fn a_request_of_typed_messages_is_written_as_one_of_json_objects() {
        use super::super::chat::{ChatMessage, ChatRole, ToolCall};
        let calls: Vec<ToolCall> = serde_json::from_value(json!([
            {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{\"q\":1}"}},
        ]))
        .unwrap();
        let typed = [
            ChatMessage::spoken(ChatRole::System, "Answer \"briefly\".\n"),
            ChatMessage::spoken(ChatRole::User, "é 日本 \u{1}"),
            ChatMessage::asked("", &calls),
            ChatMessage::result("c1", "found"),
        ];
        let objects = [
            json!({"role": "system", "content": "Answer \"briefly\".\n"}),
            json!({"role": "user", "content": "é 日本 \u{1}"}),
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{\"q\":1}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "found"}),
        ];
        let tools = Some(vec![function(
            "look",
            "Looks.",
            parameters(&ToolSource::HandBack),
        )]);
        let request = Request {
            model: "gpt-x",
            messages: &typed,
            tools: tools.clone(),
            temperature: Some(0.7),
            max_tokens: Some(300),
            params: None,
            prompt: 0,
            plain: None,
        };
        for streamed in [false, true] {
            let mut body = Body::new("gpt-x", &objects, streamed);
            body.tools.clone_from(&tools);
            body.temperature = Some(json!(0.7_f32));
            body.max_tokens = Some(300);
            assert_eq!(
                request.written(streamed),
                body.written(),
                "streamed {streamed}"
            );
            // Equal bytes, so equal digests of what is asked.
            assert_eq!(request.body(streamed), body.written());
        }
    }
}
