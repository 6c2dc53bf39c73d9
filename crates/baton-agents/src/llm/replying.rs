//! `a2a_reply`: for a task that came through A2A (its variable `a2a` is
//! set) and a spec that offers it, the model may answer in A2A's own terms:
//! a direct Message, artifacts of text, file and data parts, or a
//! rejection. The call's arguments become the `a2a` entry of the session's
//! output, as an exec program prints it (proto-schemas/PROTOCOL.md, "A2A
//! answers"), and the session completes.

use baton_proto::{Message, Role};
use baton_worker::{ContextUpdate, Outcome, Task};
use serde_json::{Map, Value as Json};

use super::calling::Turn;
use super::types::chat::{ToolCall, calls_as_sent};
use super::types::offer::A2A_REPLY;
use super::{LlmRunner, Refusal, asked};

/// Whether the model's calls are one call of `a2a_reply`.
pub(super) fn is_reply(calls: &[ToolCall]) -> bool {
    calls.len() == 1 && calls[0].function.name == A2A_REPLY
}

impl LlmRunner {
    /// Whether the model may answer in A2A's terms: the spec offers
    /// `a2a_reply` and the task came through A2A.
    pub(super) fn replies_a2a(&self, task: &Task) -> bool {
        self.settings.a2a_reply && task.envelope.context.variables.contains_key("a2a")
    }
}

/// The session's end the model's `a2a_reply` call says, with the call, its
/// result and the answer as text kept in the conversation; or what is wrong
/// with the call, to tell the model.
pub(super) fn reply(turn: &Turn<'_>, update: &mut ContextUpdate) -> Result<Outcome, Refusal> {
    let call = &turn.calls[0];
    let arguments: Json = serde_json::from_str(call.function.arguments.as_deref().unwrap_or("{}"))
        .map_err(|err| Refusal::from(format!("the arguments are not JSON: {err}")))?;
    let said = checked(arguments)?;
    let output = rmpv::ext::to_value(serde_json::json!({ "a2a": said }))
        .map_err(|err| Refusal::from(format!("the arguments cannot be sent: {err}")))?;
    let mut update = std::mem::take(update);
    update
        .messages
        .push(asked(turn.content, &calls_as_sent(turn.calls)));
    let mut result = Message::new(Role::Tool, "sent to the A2A client");
    result.tool_call_id = Some(call.id().unwrap_or("call").to_owned());
    result.name = Some(A2A_REPLY.to_owned());
    update.messages.push(result);
    update
        .messages
        .push(Message::new(Role::Agent, as_text(&said)));
    Ok(Outcome::complete(output).with_update(update).into())
}

/// The arguments as an `a2a` entry: `message`, `artifacts` (an id made up
/// for one the model left out) or `reject`, at least one; each part one of
/// `text`, `raw`, `url` or `data`.
fn checked(arguments: Json) -> Result<Map<String, Json>, Refusal> {
    let Json::Object(mut said) = arguments else {
        return Err("the arguments are not a JSON object".into());
    };
    said.retain(|key, _| matches!(key.as_str(), "message" | "artifacts" | "reject"));
    if said.is_empty() {
        return Err("give `message`, `artifacts` or `reject`".into());
    }
    if let Some(reject) = said.get("reject") {
        reject.as_str().ok_or("`reject` is the reason, a string")?;
    }
    if let Some(parts) = said.get("message") {
        check_parts(parts, "`message`")?;
    }
    if let Some(artifacts) = said.get_mut("artifacts") {
        let Json::Array(artifacts) = artifacts else {
            return Err("`artifacts` is a list of artifacts".into());
        };
        for (index, artifact) in artifacts.iter_mut().enumerate() {
            let Json::Object(artifact) = artifact else {
                return Err(format!("artifact {index} is not an object").into());
            };
            let parts = artifact.get("parts").unwrap_or(&Json::Null);
            check_parts(parts, &format!("artifact {index}'s `parts`"))?;
            artifact
                .entry("artifactId")
                .or_insert_with(|| Json::from(format!("artifact-{}", index + 1)));
        }
    }
    Ok(said)
}

/// Checks that `parts` is a non-empty list of A2A parts.
fn check_parts(parts: &Json, what: &str) -> Result<(), Refusal> {
    let Some(parts) = parts.as_array().filter(|parts| !parts.is_empty()) else {
        return Err(format!("{what} is a non-empty list of parts").into());
    };
    for part in parts {
        let kinds = ["text", "raw", "url", "data"]
            .iter()
            .filter(|kind| part.get(**kind).is_some())
            .count();
        let strings = ["text", "raw", "url"]
            .iter()
            .all(|kind| part.get(*kind).is_none_or(Json::is_string));
        if kinds != 1 || !strings {
            return Err(format!(
                "each part of {what} has one of `text`, `raw` (base64), `url` or `data`: {part}"
            )
            .into());
        }
    }
    Ok(())
}

/// The answer as the conversation keeps it: the text parts, or the reason
/// for a rejection, or what was sent.
fn as_text(said: &Map<String, Json>) -> String {
    if let Some(why) = said.get("reject").and_then(Json::as_str) {
        return format!("Declined: {why}");
    }
    let parts = said
        .get("message")
        .into_iter()
        .chain(
            said.get("artifacts")
                .and_then(Json::as_array)
                .into_iter()
                .flatten()
                .filter_map(|artifact| artifact.get("parts")),
        )
        .filter_map(Json::as_array)
        .flatten();
    let text: Vec<&str> = parts
        .filter_map(|part| part.get("text").and_then(Json::as_str))
        .collect();
    if text.is_empty() {
        format!("(sent over A2A: {})", Json::Object(said.clone()))
    } else {
        text.concat()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn artifacts_get_an_id_and_bad_parts_are_refused() {
        let said = checked(json!({"artifacts": [{"parts": [{"text": "a"}]}], "other": 1})).unwrap();
        assert_eq!(
            Json::Object(said),
            json!({"artifacts": [{"artifactId": "artifact-1", "parts": [{"text": "a"}]}]})
        );
        let refused = |arguments: Json| checked(arguments).unwrap_err().to_string();
        assert!(refused(json!({})).contains("give `message`"));
        assert!(refused(json!([1])).contains("not a JSON object"));
        assert!(refused(json!({"reject": 3})).contains("`reject` is the reason"));
        assert!(refused(json!({"message": []})).contains("non-empty list"));
        assert!(refused(json!({"message": [{"text": "a", "data": 1}]})).contains("one of"));
        assert!(refused(json!({"message": [{"raw": 5}]})).contains("one of"));
        assert!(refused(json!({"artifacts": [{"artifactId": "x"}]})).contains("artifact 0"));
    }

    #[test]
    fn the_conversation_keeps_the_text_or_the_reason() {
        let text = |arguments: Json| as_text(&checked(arguments).unwrap());
        assert_eq!(text(json!({"reject": "not mine"})), "Declined: not mine");
        assert_eq!(
            text(
                json!({"artifacts": [{"artifactId": "r", "parts": [{"text": "one "}, {"data": {}}]},
                                      {"artifactId": "r", "parts": [{"text": "two"}], "append": true}]})
            ),
            "one two"
        );
        assert!(text(json!({"message": [{"data": {"n": 1}}]})).starts_with("(sent over A2A: "));
    }
}
