//! What a replay reuses for a tool call instead of making it: the result
//! the replayed session's call got when the replay reused the model answer
//! that made it; in an evaluation (`baton eval`), the result of a call the
//! replayed session made with the same arguments, wherever it made it.
//! An evaluation calls a read-only tool again, and never makes any other
//! call: the session fails with reason `would_write`.

use baton_proto::Reason;
use baton_worker::AgentError;
use serde_json::Value as Json;

use super::LlmRunner;
use super::answer::journal_of;
use super::calling::Turn;
use crate::journal::called;
use crate::tools::{Class, McpTool};

impl LlmRunner {
    /// The result a replay reuses for call `index` of a turn whose answer
    /// it reused: the one the replayed session's call got, unless the
    /// replay calls tools again or that call got none.
    pub(super) async fn replayed_result(
        &self,
        turn: &Turn<'_>,
        index: usize,
    ) -> Result<Option<(String, bool)>, AgentError> {
        let calls_again = turn
            .task
            .envelope
            .replay
            .as_ref()
            .is_some_and(|replay| replay.call_tools);
        match turn.source {
            Some(source) if !calls_again => self.answers.journal.result_at(source, index).await,
            _ => Ok(None),
        }
    }

    /// In an evaluation, the result the evaluated session's call of `tool`
    /// with `args` got; `None` when the task is not an evaluation, or when
    /// the tool is read-only and may be called again.
    ///
    /// # Errors
    ///
    /// [`AgentError::Fail`] with [`Reason::WouldWrite`] for any other call
    /// no result was recorded of: it is not made.
    pub(super) async fn evaluated(
        &self,
        turn: &Turn<'_>,
        tool: &McpTool,
        args: &Json,
    ) -> Result<Option<(String, bool)>, AgentError> {
        let Some(replay) = (turn.task.envelope.replay.as_ref()).filter(|replay| replay.eval) else {
            return Ok(None);
        };
        let asked = called(&tool.name, args);
        if let Some(result) = self
            .answers
            .journal
            .called_result(replay.of, &asked)
            .await?
        {
            return Ok(Some(result));
        }
        if tool.class == Class::ReadOnly && !tool.approve {
            return Ok(None);
        }
        Err(AgentError::fail(
            Reason::WouldWrite,
            format!(
                "would write: {} {args} ({}; no call with these arguments was recorded, \
                 and an evaluation makes none that may write)",
                tool.name,
                tool.class.as_str()
            ),
        ))
    }

    /// Indexes call `index` of a turn, whose result is recorded, by its
    /// tool and arguments, when the session may be evaluated: a replayable
    /// session that is no replay (replays are never evaluated).
    pub(super) async fn index_called(
        &self,
        turn: &Turn<'_>,
        index: usize,
        tool: &McpTool,
        args: &Json,
    ) -> Result<(), AgentError> {
        let envelope = &turn.task.envelope;
        if !envelope.replayable || envelope.replay.is_some() {
            return Ok(());
        }
        let place = (journal_of(turn.task), turn.step, index);
        (self.answers.journal)
            .index_call(envelope.session, &called(&tool.name, args), place)
            .await
    }
}
