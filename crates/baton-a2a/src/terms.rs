//! What an agent says in A2A's own terms: a completed session whose
//! output is a map with an `a2a` entry (proto-schemas/PROTOCOL.md,
//! "A2A answers"). Any agent kind can give it, an exec agent by printing
//! it as its `output`:
//!
//! - `artifacts`: A2A artifacts (text, file and data parts), each with
//!   `append` and `lastChunk` when it is a chunk of one streamed in pieces;
//! - `message`: parts of a direct answer, a Message instead of a Task;
//! - `reject`: why the agent declines the task (`TASK_STATE_REJECTED`).

use a2a::{Artifact, Part};
use baton_proto::{Event, EventType, Value};
use serde::Deserialize;

/// One artifact, or a chunk of one.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Chunk {
    #[serde(flatten)]
    pub(crate) artifact: Artifact,
    #[serde(default)]
    pub(crate) append: Option<bool>,
    #[serde(default)]
    pub(crate) last_chunk: Option<bool>,
}

/// The `a2a` entry of a completed session's output.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Answer {
    #[serde(default)]
    pub(crate) artifacts: Vec<Chunk>,
    #[serde(default)]
    pub(crate) message: Option<Vec<Part>>,
    #[serde(default)]
    pub(crate) reject: Option<String>,
}

impl Answer {
    /// What a completed event's output says in A2A terms, if it is a map
    /// with an `a2a` entry that reads as one.
    pub(crate) fn of(event: &Event) -> Option<Self> {
        if event.kind != EventType::Completed {
            return None;
        }
        let said = baton_gateway::text::entry(event.output.as_ref(), "a2a")?;
        let json = serde_json::to_value(said).ok()?;
        match serde_json::from_value(json) {
            Ok(said) => Some(said),
            Err(err) => {
                tracing::warn!(error = %err, "an answer's `a2a` entry is not A2A: shown as data");
                None
            }
        }
    }

    /// The artifacts whole, for a task: chunks appended to the artifact
    /// with their id.
    pub(crate) fn whole(&self) -> Vec<Artifact> {
        let mut whole: Vec<Artifact> = Vec::new();
        for chunk in &self.artifacts {
            let id = &chunk.artifact.artifact_id;
            match whole.iter_mut().find(|a| &a.artifact_id == id) {
                Some(before) if chunk.append == Some(true) => {
                    before.parts.extend(chunk.artifact.parts.iter().cloned());
                }
                Some(before) => *before = chunk.artifact.clone(),
                None => whole.push(chunk.artifact.clone()),
            }
        }
        whole
    }
}

/// What of the A2A message reaches the agent beside its text, as the
/// variable `a2a`: `message_id`, `metadata`, `reference_task_ids`, and
/// `files` (its raw and URL parts, in A2A's JSON; its text is the task's
/// text, its data objects variables).
pub(crate) fn to_agent(message: &a2a::Message) -> Value {
    let json = serde_json::json!({
        "message_id": message.message_id,
        "metadata": message.metadata.clone().unwrap_or_default(),
        "reference_task_ids": message.reference_task_ids.clone().unwrap_or_default(),
        "files": message
            .parts
            .iter()
            .filter(|p| matches!(p.content, a2a::PartContent::Raw(_) | a2a::PartContent::Url(_)))
            .collect::<Vec<_>>(),
    });
    rmpv::ext::to_value(json).unwrap_or(Value::Nil)
}

/// What an answer to a question carries to the agent that asked: the
/// variable `a2a`, as for the message that started the task.
pub(crate) fn answer_variables(message: &a2a::Message) -> Value {
    Value::Map(vec![(Value::from("a2a"), to_agent(message))])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completed(output: serde_json::Value) -> Event {
        let mut event = Event::new(
            uuid::Uuid::new_v4(),
            uuid::Uuid::new_v4(),
            EventType::Completed,
        );
        event.output = Some(rmpv::ext::to_value(output).unwrap());
        event
    }

    #[test]
    fn chunks_make_one_artifact_and_files_keep_their_names() {
        let event = completed(serde_json::json!({"a2a": {"artifacts": [
            {"artifactId": "a", "parts": [{"text": "chunk-1 "}], "append": true},
            {"artifactId": "a", "parts": [{"text": "chunk-2"}], "append": true, "lastChunk": true},
            {"artifactId": "f", "parts": [{"raw": "dGNr", "filename": "output.txt", "mediaType": "text/plain"}]},
        ]}}));
        let said = Answer::of(&event).unwrap();
        assert_eq!(said.artifacts.len(), 3);
        assert_eq!(said.artifacts[1].last_chunk, Some(true));
        let whole = said.whole();
        assert_eq!(whole.len(), 2);
        assert_eq!(whole[0].parts.len(), 2);
        let file = serde_json::to_value(&whole[1]).unwrap();
        assert_eq!(file["parts"][0]["filename"], "output.txt");
        assert_eq!(file["parts"][0]["raw"], "dGNr");
    }

    #[test]
    fn plain_outputs_say_nothing_in_a2a_terms() {
        assert!(Answer::of(&completed(serde_json::json!({"status": "done"}))).is_none());
        assert!(Answer::of(&completed(serde_json::json!("text"))).is_none());
        let reject = Answer::of(&completed(serde_json::json!({"a2a": {"reject": "no"}}))).unwrap();
        assert_eq!(reject.reject.as_deref(), Some("no"));
    }
}
