//! A model answer within a hop: the journal's when a redelivered hop was
//! answered before, a replay's when the replayed session asked the same,
//! else asked (in its turn under the shared limit) and recorded in the hop
//! journal before the hop goes on.

use baton_worker::{AgentError, Task};
use serde_json::Value as Json;

use super::body::Asked;
use super::chat::Offer;
use super::replay::{self, Answered};
use super::{LlmRunner, budget, journal_of, stream};

/// What a model call asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Asking<'a> {
    /// The agent's own answer, with its tools.
    Turn,
    /// A summary of older messages, by the model named, with no tools.
    Summary(&'a str),
}

impl LlmRunner {
    /// The model's answer at `step` of `task`'s hop: the journal's, when a
    /// redelivered hop had it answered before; a replay's, when the
    /// replayed session asked exactly this; else asked and recorded. `Err`
    /// holds the budget asking would pass. What a call spent is added to
    /// the hop's usage, a redelivered hop's included (the attempt that paid
    /// for it sent nothing on); an answer a replay reused cost nothing.
    pub(super) async fn answer(
        &self,
        task: &Task,
        (step, asking): (u32, Asking<'_>),
        messages: &[Json],
    ) -> Result<Result<Answered, budget::Overrun>, AgentError> {
        let envelope = journal_of(task);
        let (model, offer) = self.aimed(task, asking);
        // A first delivery's answer is as good as never recorded yet: its
        // turn under the shared limit is taken while the journal is read
        // (a turn taken for an answer that was recorded goes unused).
        let prompt = crate::limits::tokens_in(messages);
        let overrun = budget::over(task, prompt, &self.settings);
        let first = task.attempt == 1
            && task.envelope.resumed.is_none()
            && task.envelope.replay.is_none()
            && overrun.is_none();
        let (recalled, taken) = if first {
            tokio::join!(
                self.journal.answer(envelope, step),
                self.turn_for(prompt, task.envelope.deadline)
            )
        } else {
            (self.journal.answer(envelope, step).await, Ok(None))
        };
        if let Some(recalled) = recalled? {
            if recalled.source.is_none() {
                self.spent(task, &recalled.answer, prompt);
            }
            return Ok(Ok(Answered::from(recalled)));
        }
        let taken = taken?;
        // What is asked matters to a replay, or to replays of this session.
        let plain = (task.envelope.replay.is_some() || task.envelope.replayable)
            .then(|| self.written(messages, false, model, offer));
        let digest = plain.as_deref().map(replay::asked);
        let asked = digest.as_deref();
        if let Some(reused) = self.reused(task, asked).await? {
            let source = reused.source.as_deref();
            self.recorded(task, (envelope, step), &reused.answer, source, asked)
                .await?;
            if asking == Asking::Turn {
                replay::show(task, step, &reused.answer).await;
            }
            return Ok(Ok(Answered::from(reused)));
        }
        if let Some(overrun) = overrun {
            return Ok(Err(overrun));
        }
        let live = (asking == Asking::Turn).then_some(stream::Live {
            progress: &task.progress,
            step,
        });
        let answer = self
            .complete(
                &Asked {
                    messages,
                    plain,
                    prompt,
                },
                model,
                live,
                offer,
                (task.envelope.deadline, taken),
            )
            .await?;
        self.recorded(task, (envelope, step), &answer, None, asked)
            .await?;
        self.spent(task, &answer, prompt);
        Ok(Ok(Answered {
            answer,
            source: None,
        }))
    }

    /// The model `asking` asks, and what it offers the model: a turn asks
    /// the agent's model (or a replay's) with its tools, a summary the
    /// model named with none.
    fn aimed<'a>(&'a self, task: &'a Task, asking: Asking<'a>) -> (&'a str, Offer) {
        match asking {
            Asking::Turn => (
                replay::model(task, &self.settings),
                Offer::Tools {
                    ask_user: self.asks_user(task),
                },
            ),
            Asking::Summary(model) => (model, Offer::Nothing),
        }
    }

    /// Records `answer` at `step` of the hop journal `envelope`, and, for a
    /// replayable session, indexes it under what was `asked`: the two
    /// writes at once, both durable before the hop goes on. (An index whose
    /// answer was not written only makes a replay ask the model.)
    async fn recorded(
        &self,
        task: &Task,
        (envelope, step): (uuid::Uuid, u32),
        answer: &Json,
        source: Option<&str>,
        asked: Option<&str>,
    ) -> Result<(), AgentError> {
        let (recorded, indexed) = tokio::join!(
            self.journal.record_answer(envelope, step, answer, source),
            self.indexed(task, asked, step)
        );
        recorded.and(indexed)
    }

    /// Adds what `answer` spent to the hop's usage.
    fn spent(&self, task: &Task, answer: &Json, prompt: u64) {
        let usage = budget::usage_of(answer, prompt, self.settings.price.as_ref());
        task.progress.spent(usage);
    }
}
