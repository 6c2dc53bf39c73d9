//! A replay's side of an LLM agent: a session that replays another asks
//! the hop journal for the answer the replayed session got to exactly the
//! same request, and reuses it instead of calling the model; a replayable
//! session indexes its own answers by request, for replays of it.

use baton_worker::{AgentError, Task};
use serde_json::Value as Json;

use super::Answers;
use crate::journal::Recalled;
use crate::llm::types::response::ChatResponse;
use crate::spec::LlmSpec;

/// A model answer as it came (what the hop journal keeps), read, and where
/// a replay took it from (`<envelope>.<step>` of the replayed session), if
/// it did.
pub(crate) struct Answered {
    pub(crate) answer: Json,
    pub(crate) response: ChatResponse,
    pub(crate) source: Option<String>,
}

impl Answered {
    /// `answer`, read, from `source`.
    pub(crate) fn new(answer: Json, source: Option<String>) -> Self {
        Self {
            response: ChatResponse::of(&answer),
            answer,
            source,
        }
    }
}

impl From<Recalled> for Answered {
    fn from(recalled: Recalled) -> Self {
        Self::new(recalled.answer, recalled.source)
    }
}

/// The model the agent calls for `task`: a replay's, else its own.
pub(super) fn model<'a>(task: &'a Task, settings: &'a LlmSpec) -> &'a str {
    task.envelope
        .replay
        .as_ref()
        .and_then(|replay| replay.model.as_deref())
        .unwrap_or(&settings.model)
}

/// What is asked, as the SHA-256 of the written request body in hex:
/// equal requests (model, conversation, tools, sampling) have equal
/// digests.
pub(super) fn asked(body: &[u8]) -> String {
    baton_proto::hex(&<sha2::Sha256 as sha2::Digest>::digest(body))
}

/// Shows a reused answer to a session that follows its answers live: its
/// text as one piece.
pub(super) async fn show(task: &Task, step: u32, answered: &Answered) {
    let text = answered.response.text();
    if !text.is_empty() {
        task.progress.delta(step, 0, text).await;
    }
}

impl Answers {
    /// The answer the replayed session got to `asked` (what is asked, when
    /// it matters), when `task` is a replay and that session recorded one
    /// in time.
    pub(super) async fn reused(
        &self,
        task: &Task,
        asked: Option<&str>,
    ) -> Result<Option<Recalled>, AgentError> {
        let (Some(replay), Some(asked)) = (&task.envelope.replay, asked) else {
            return Ok(None);
        };
        let reused = self.journal.asked(replay.of, asked, replay.before).await?;
        if reused.is_some() {
            tracing::info!(replayed = %replay.of, "reusing the replayed session's answer");
        }
        Ok(reused)
    }

    /// Indexes the answer at `step` under `asked`, when `task`'s session
    /// may be replayed (`asked` is then known).
    pub(super) async fn indexed(
        &self,
        task: &Task,
        asked: Option<&str>,
        step: u32,
    ) -> Result<(), AgentError> {
        let Some(asked) = asked.filter(|_| task.envelope.replayable) else {
            return Ok(());
        };
        self.journal
            .index(task.envelope.session, asked, super::journal_of(task), step)
            .await
    }
}
