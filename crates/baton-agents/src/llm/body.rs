//! The body of a chat completion request, written once per call and
//! without copying the conversation: a long conversation's request is
//! megabytes, and its digest (what is asked, see `replay`) is taken of
//! the same bytes the endpoint gets.
//!
//! The bytes are those `serde_json` writes for the body as a JSON object
//! built field by field (`model`, `messages`, `stream`, `stream_options`,
//! `tools`, `temperature`, `max_tokens`), so digests recorded by earlier
//! versions still match.

use serde::Serialize;
use serde_json::{Value as Json, json};

use super::chat::Offer;
use super::{LlmRunner, ToolSource};

/// What one model call asks: the chat messages, and the body written
/// without streaming when it was written already (for the digest of what
/// is asked), so the call sends those bytes instead of writing them again.
pub(super) struct Asked<'a> {
    pub(super) messages: &'a [Json],
    pub(super) plain: Option<bytes::Bytes>,
    /// About how many tokens `messages` are (measured once per call).
    pub(super) prompt: u64,
}

/// A request body that borrows the conversation.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: &'a [Json],
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
}

impl<'a> Body<'a> {
    fn new(model: &'a str, messages: &'a [Json], streamed: bool) -> Self {
        Self {
            model,
            messages,
            stream: streamed.then_some(true),
            stream_options: streamed.then(|| json!({"include_usage": true})),
            tools: None,
            temperature: None,
            max_tokens: None,
        }
    }

    fn written(&self) -> bytes::Bytes {
        // Strings, numbers and maps with string keys: writing cannot fail.
        serde_json::to_vec(self).unwrap_or_default().into()
    }
}

impl LlmRunner {
    /// The request body, written: the conversation, the tools the model
    /// may call (if `offer` offers them), and the spec's sampling settings.
    pub(super) fn written(
        &self,
        messages: &[Json],
        streamed: bool,
        model: &str,
        offer: Offer,
    ) -> bytes::Bytes {
        let mut body = Body::new(model, messages, streamed);
        body.tools = self.offered_tools(offer);
        body.temperature = self
            .settings
            .temperature
            .map(|temperature| json!(temperature));
        body.max_tokens = self.settings.max_tokens;
        body.written()
    }

    /// The tools `offer` offers the model, as the API lists them; `None`
    /// when there are none.
    fn offered_tools(&self, offer: Offer) -> Option<Vec<Json>> {
        let ask_user = matches!(offer, Offer::Tools { ask_user: true });
        let tools = !self.tools.is_empty() || !self.toolbox.tools().is_empty() || ask_user;
        if !tools || offer == Offer::Nothing {
            return None;
        }
        let mcp = self
            .toolbox
            .tools()
            .iter()
            .map(|tool| function(&tool.name, &tool.description, tool.schema.clone()));
        let own = self
            .tools
            .iter()
            .map(|tool| function(&tool.name, &tool.description, parameters(&tool.source)));
        let ask = ask_user.then(|| {
            let question = json!({"type": "object", "properties": {"question": {"type": "string", "description": "The question, as the user should read it"}}, "required": ["question"]});
            function(super::asking::ASK_USER, super::asking::DESCRIPTION, question)
        });
        Some(own.chain(mcp).chain(ask).collect())
    }
}

/// A tool as the chat completions API lists it.
fn function(name: &str, description: &str, parameters: Json) -> Json {
    json!({
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    })
}

/// The parameters of a delegate, handoff or condition tool.
fn parameters(source: &ToolSource) -> Json {
    match source {
        ToolSource::Delegate(_) => json!({
            "type": "object",
            "properties": {"task": {"type": "string", "description": "What to do, in full."}},
            "required": ["task"],
        }),
        ToolSource::HandBack => json!({
            "type": "object",
            "properties": {"answer": {"type": "string", "description": "Your final answer to the user."}},
            "required": ["answer"],
        }),
        _ => json!({
            "type": "object",
            "properties": {"reason": {"type": "string", "description": "Why the conversation moves on."}},
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The body as it was built before it was written without copying:
    /// a JSON object, field by field.
    fn as_object(body: &Body<'_>) -> Json {
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
}
