//! A model answer within a hop, above the HTTP client and below the
//! compaction and the runner: the journal's when a redelivered hop was
//! answered before, a replay's when the replayed session asked the same,
//! else asked (in its turn under the shared limit) and recorded in the hop
//! journal before the hop goes on.
//!
//! - [`Answers`]: the endpoint and the hop journal;
//! - [`Reply`]: the answer, or the budget asking would pass;
//! - `replay`: a replay's reuse of answers, and the index by request;
//! - `budget`: what an answer spent, and the check before each call.

use std::sync::Arc;

use baton_worker::{AgentError, Task};
use serde_json::Value as Json;

use super::http::Endpoint;
use super::http::stream::Live;
use super::types::chat::{ChatMessage, tokens_in};
use super::types::offer::{Builtins, Offered};
use super::types::request::Request;
use crate::journal::Journal;
use crate::spec::LlmSpec;

pub(crate) mod budget;
pub(crate) mod replay;

use budget::Overrun;
use replay::Answered;

/// Where a hop's model answers come from: the endpoint, and the hop
/// journal that keeps them.
#[derive(Debug, Clone)]
pub(crate) struct Answers {
    settings: Arc<LlmSpec>,
    pub(crate) endpoint: Endpoint,
    /// What the hop's model and tool calls returned, replayed on redelivery.
    pub(crate) journal: Arc<Journal>,
}

/// What a model call asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Asking<'a> {
    /// The agent's own answer, with the tools `offered` and the
    /// `builtins` this call may offer.
    Turn {
        offered: &'a Offered,
        builtins: Builtins,
    },
    /// A summary of older messages, by the model named, with no tools.
    Summary(&'a str),
    /// A program's call (`ctx.model`), with the tools and other fields
    /// it offers.
    Program {
        tools: Option<&'a [Json]>,
        params: &'a serde_json::Map<String, Json>,
        /// How many model calls the hop made before this one: a request
        /// asked twice in a hop is indexed for replays once each.
        nth: usize,
    },
}

/// What asking the model came to.
pub(crate) enum Reply {
    /// The model's answer (the journal's, a replay's, or the model's own).
    Answered(Answered),
    /// Asking would pass this budget: the model was not asked.
    Overrun(Overrun),
}

impl Answers {
    /// Answers from `endpoint`, recorded in no journal yet.
    pub(crate) fn new(settings: Arc<LlmSpec>, endpoint: Endpoint) -> Self {
        Self {
            settings,
            endpoint,
            journal: Arc::default(),
        }
    }

    /// The model's answer at `step` of `task`'s hop: the journal's, when a
    /// redelivered hop had it answered before; a replay's, when the
    /// replayed session asked exactly this; else asked and recorded.
    /// [`Reply::Overrun`] holds the budget asking would pass. What a call
    /// spent is added to the hop's usage, a redelivered hop's included (the
    /// attempt that paid for it sent nothing on); an answer a replay reused
    /// cost nothing.
    pub(crate) async fn answer(
        &self,
        task: &Task,
        (step, asking): (u32, Asking<'_>),
        messages: &[ChatMessage],
    ) -> Result<Reply, AgentError> {
        let envelope = journal_of(task);
        // A first delivery's answer is as good as never recorded yet: its
        // turn under the shared limit is taken while the journal is read
        // (a turn taken for an answer that was recorded goes unused).
        let prompt = tokens_in(messages);
        let overrun = budget::over(task, prompt, &self.settings);
        let first = task.attempt == 1
            && task.envelope.resumed.is_none()
            && task.envelope.replay.is_none()
            && overrun.is_none();
        let (recalled, taken) = if first {
            tokio::join!(
                self.journal.answer(envelope, step),
                self.endpoint.turn_for(prompt, task.envelope.deadline)
            )
        } else {
            (self.journal.answer(envelope, step).await, Ok(None))
        };
        if let Some(recalled) = recalled? {
            let answered = Answered::from(recalled);
            if answered.source.is_none() {
                self.spent(task, &answered, prompt);
            }
            return Ok(Reply::Answered(answered));
        }
        let taken = taken?;
        let mut request = self.request(task, asking, messages, prompt);
        // What is asked matters to a replay, or to replays of this session.
        request.plain = (task.envelope.replay.is_some() || task.envelope.replayable)
            .then(|| request.written(false));
        let digest = request.plain.as_deref().map(replay::asked);
        // A program's call is known by its place too: two hops asking the
        // same keep their own answers.
        let digest = match asking {
            Asking::Program { nth, .. } => {
                digest.map(|asked| crate::journal::placed(task, &format!("{asked}\0{nth}")))
            }
            _ => digest,
        };
        let asked = digest.as_deref();
        if let Some(reused) = self.reused(task, asked).await? {
            let reused = Answered::from(reused);
            let source = reused.source.as_deref();
            self.recorded(task, (envelope, step), &reused.answer, source, asked)
                .await?;
            if !matches!(asking, Asking::Summary(_)) {
                replay::show(task, step, &reused).await;
            }
            return Ok(Reply::Answered(reused));
        }
        if let Some(overrun) = overrun {
            return Ok(Reply::Overrun(overrun));
        }
        let live = (!matches!(asking, Asking::Summary(_))).then_some(Live {
            progress: &task.progress,
            step,
        });
        let answer = self
            .endpoint
            .complete(&request, live, (task.envelope.deadline, taken))
            .await?;
        self.recorded(task, (envelope, step), &answer, None, asked)
            .await?;
        let answered = Answered::new(answer, None);
        self.spent(task, &answered, prompt);
        Ok(Reply::Answered(answered))
    }

    /// What `asking` asks of `messages` (about `prompt` tokens): a turn asks
    /// the agent's model (or a replay's) with its tools, a summary the
    /// model named with none.
    fn request<'a>(
        &'a self,
        task: &'a Task,
        asking: Asking<'a>,
        messages: &'a [ChatMessage],
        prompt: u64,
    ) -> Request<'a> {
        let (model, tools, params) = match asking {
            Asking::Turn { offered, builtins } => (
                replay::model(task, &self.settings),
                offered.listed(builtins),
                None,
            ),
            Asking::Summary(model) => (model, None, None),
            Asking::Program { tools, params, .. } => (
                replay::model(task, &self.settings),
                tools.map(<[Json]>::to_vec),
                Some(params),
            ),
        };
        // A program's own sampling settings win over the spec's.
        let has = |field: &str| params.is_some_and(|params| params.contains_key(field));
        Request {
            model,
            messages,
            tools,
            temperature: self.settings.temperature.filter(|_| !has("temperature")),
            max_tokens: self.settings.max_tokens.filter(|_| !has("max_tokens")),
            params: params.filter(|params| !params.is_empty()),
            prompt,
            plain: None,
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

    /// Adds what `answered` spent to the hop's usage.
    fn spent(&self, task: &Task, answered: &Answered, prompt: u64) {
        let usage = budget::usage_of(&answered.response, prompt, self.settings.price.as_ref());
        task.progress.spent(usage);
    }
}

/// The envelope whose hop journal `task`'s hop reads and writes: its own
/// id, or, for a hop sent back after a person's decision on a waiting tool
/// call, the id the hop first ran under.
pub(crate) fn journal_of(task: &Task) -> uuid::Uuid {
    task.envelope
        .resumed
        .as_ref()
        .map_or(task.envelope.id, |resumed| resumed.journal)
}
