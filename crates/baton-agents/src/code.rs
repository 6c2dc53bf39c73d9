//! Agents written in Rust get what Python agents get: durable steps, and
//! the worker's model and MCP tools, on the same hop journal
//! (proto-schemas/exec-calls.md).
//!
//! [`Machinery::open`] reaches the model (an `[llm]` table's settings) and
//! the tools (`[[mcp]]` servers) once per worker; [`Machinery::run`] runs one
//! hop of a task with a [`Ctx`]:
//!
//! - [`Ctx::step`]: a side effect of your own, run once: its value is in
//!   the hop journal before the hop goes on, and a task that runs again
//!   (redelivered after a crash, a retry) gets the value back without the
//!   step running again. A step that started and left no value runs again
//!   when idempotent ([`Ctx::idempotent_step`]), else goes to a person;
//! - [`Ctx::model`]: the model, under the shared limits and the budgets,
//!   streamed to the caller, journaled and replayed at zero tokens;
//! - [`Ctx::tool`]: an MCP tool, with its class, approvals and calls in
//!   doubt sent to a person;
//! - [`Ctx::say`]: a message for the conversation.
//!
//! A hop runs again from the start and must make the same calls in the
//! same order; a hop that does not fails for good, naming both calls.

use std::future::Future;
use std::sync::Arc;

use baton_proto::{ExecOp, Subjects};
use baton_worker::{AgentError, Outcome, Task};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value as Json;

use crate::exec::calls::{Answer, Hop};
use crate::spec::{LlmSpec, McpSpec};
use crate::{Error, ErrorKind, LlmRunner, journal, limits};

/// The model, the tools and the hop journal of one worker.
#[derive(Clone)]
pub struct Machinery {
    runner: Arc<LlmRunner>,
}

impl std::fmt::Debug for Machinery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Machinery").finish_non_exhaustive()
    }
}

/// Why a hop stops before its end: it waits (a person, a budget), or failed.
#[derive(Debug)]
pub enum Stop {
    /// The hop ends with this outcome (it waits for a person, a budget
    /// ran out): [`Machinery::run`] returns it.
    Ended(Box<Outcome>),
    /// The hop failed.
    Failed(AgentError),
}

impl From<AgentError> for Stop {
    fn from(err: AgentError) -> Self {
        Self::Failed(err)
    }
}

impl From<serde_json::Error> for Stop {
    fn from(err: serde_json::Error) -> Self {
        Self::Failed(AgentError::fatal(format!(
            "a value is not what the hop expects: {err}"
        )))
    }
}

/// A tool's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    /// What it said.
    pub text: String,
    /// Whether it said the call failed.
    pub is_error: bool,
}

/// One hop's calls.
#[derive(Clone)]
pub struct Ctx {
    hop: Arc<Hop>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx").finish_non_exhaustive()
    }
}

impl Machinery {
    /// Reaches `llm`'s model (none: [`Ctx::model`] refuses) and the `mcp`
    /// servers, and opens the hop journal, the shared limits and the inbox
    /// under `subjects` (buckets created with `replicas`), for agent type
    /// `agent`.
    ///
    /// # Errors
    ///
    /// As a spec agent's start: an unset API key variable, an MCP server
    /// that cannot be reached, a bucket JetStream refuses.
    pub async fn open(
        client: &async_nats::Client,
        (subjects, replicas): (&Subjects, usize),
        agent: &str,
        llm: Option<&LlmSpec>,
        mcp: &[McpSpec],
    ) -> Result<Self, Error> {
        // Without a model, `model` says so.
        let settings = match llm {
            Some(llm) => llm.clone(),
            None => toml::from_str::<LlmSpec>("model = \"\"")
                .map_err(|err| Error::new(ErrorKind::Config, format!("no model: {err}")))?,
        };
        let tokens = crate::signin::tokens_for(mcp, client, subjects).await?;
        let mut runner = LlmRunner::new(&settings, &baton_worker::Routing::default(), &[])?
            .with_mcp(mcp, tokens.as_ref())
            .await?
            .with_journal(journal::Journal::open(client, subjects, replicas).await?);
        if llm.is_some() {
            let limiter = limits::Limiter::open(client, subjects, replicas, &settings, agent);
            runner = runner.with_limiter(limiter.await?);
        }
        let inbox = match crate::open_inbox(client, subjects, replicas).await {
            Ok(inbox) => Some(inbox),
            Err(err) if runner.may_wait() => {
                return Err(Error::new(
                    err.kind(),
                    format!(
                        "{err}: this agent's tool calls may wait there for a person (see `baton check --tools`); under generated permissions, grant it with `baton permissions worker {agent} --human`"
                    ),
                ));
            }
            Err(err) => {
                tracing::warn!(error = %err, "steps that may have run cannot go to a person: grant the inbox with `baton permissions worker {agent} --human`");
                None
            }
        };
        Ok(Self {
            runner: Arc::new(runner.with_inbox(inbox, agent)),
        })
    }

    /// The runner the calls go through.
    pub(crate) fn runner(&self) -> Arc<LlmRunner> {
        Arc::clone(&self.runner)
    }

    /// Runs one hop of `task` with `hop`: its outcome, the outcome a call
    /// ended it with, or its failure. Messages said with [`Ctx::say`] come
    /// first in the outcome's update.
    ///
    /// # Errors
    ///
    /// The hop's failure: its own, or a call's (drift from the record,
    /// the journal out of reach).
    pub async fn run<F, Fut>(&self, task: &Task, hop: F) -> Result<Outcome, AgentError>
    where
        F: FnOnce(Ctx) -> Fut,
        Fut: Future<Output = Result<Outcome, Stop>>,
    {
        let calls = Arc::new(Hop::new(
            (task, task),
            Arc::clone(&self.runner),
            None,
            None,
            baton_worker::ContextUpdate::default(),
        ));
        let ctx = Ctx {
            hop: Arc::clone(&calls),
        };
        match hop(ctx).await {
            Ok(mut outcome) => {
                let said = calls.said();
                let update = outcome.update_mut();
                update.messages.splice(0..0, said.messages);
                Ok(outcome)
            }
            Err(Stop::Ended(outcome)) => Ok(*outcome),
            Err(Stop::Failed(err)) => Err(err),
        }
    }
}

impl Ctx {
    /// Runs `step` once per hop under `name`: its value from the journal
    /// when the hop ran it before, else `step`'s, journaled before it is
    /// returned. `step` gets the step's idempotency key, the same on every
    /// delivery, for an API that deduplicates by key.
    ///
    /// # Errors
    ///
    /// The hop ends ([`Stop::Ended`]) when the step started before and left
    /// no value: a person says whether it happened. It fails when the hop
    /// does not make the calls it made before.
    pub async fn step<T, F, Fut>(&self, name: &str, step: F) -> Result<T, Stop>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = T>,
    {
        self.stepped(name, false, step).await
    }

    /// [`Ctx::step`] for a step that may run again when a start left no
    /// value: a repeat has no further effect.
    ///
    /// # Errors
    ///
    /// As for [`Ctx::step`], without the person.
    pub async fn idempotent_step<T, F, Fut>(&self, name: &str, step: F) -> Result<T, Stop>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = T>,
    {
        self.stepped(name, true, step).await
    }

    async fn stepped<T, F, Fut>(&self, name: &str, idempotent: bool, step: F) -> Result<T, Stop>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = T>,
    {
        let op = ExecOp::Step {
            name: name.to_owned(),
            idempotent,
        };
        let started = self.call(op).await?;
        if started["recorded"] == true {
            return Ok(serde_json::from_value(started["value"].clone())?);
        }
        let key = started["key"].as_str().unwrap_or_default().to_owned();
        let value = step(key.clone()).await;
        let kept = serde_json::to_value(&value)?;
        let done = ExecOp::StepDone {
            name: name.to_owned(),
            key: Some(key),
            value: Some(kept.clone()),
            error: None,
        };
        self.call(done).await?;
        Ok(serde_json::from_value(kept)?)
    }

    /// The model's answer to `messages` (OpenAI chat messages), offering
    /// `tools` (OpenAI's format), with `params` (`temperature`, ...):
    /// `{message, usage, finish_reason}`.
    ///
    /// # Errors
    ///
    /// Fails when the machinery has no model, or the call cannot be made;
    /// ends the hop when a budget would be passed.
    pub async fn model(
        &self,
        messages: Vec<Json>,
        tools: Option<Vec<Json>>,
        params: serde_json::Map<String, Json>,
    ) -> Result<Json, Stop> {
        let op = ExecOp::Model {
            messages,
            tools,
            params,
        };
        self.call(op).await
    }

    /// The MCP tools, in OpenAI's `tools` format.
    ///
    /// # Errors
    ///
    /// None in practice; a [`Stop`] for the same signature as the others.
    pub async fn tools(&self) -> Result<Vec<Json>, Stop> {
        let listed = self.call(ExecOp::Tools).await?;
        Ok(serde_json::from_value(listed["tools"].clone())?)
    }

    /// Calls the MCP tool `name` with `arguments` (an object).
    ///
    /// # Errors
    ///
    /// Fails for an unknown tool or arguments its schema refuses; ends the
    /// hop when the call waits for a person (an approval, a call in doubt).
    pub async fn tool(&self, name: &str, arguments: Json) -> Result<ToolResult, Stop> {
        let op = ExecOp::Tool {
            name: name.to_owned(),
            arguments,
        };
        let result = self.call(op).await?;
        Ok(ToolResult {
            text: result["text"].as_str().unwrap_or_default().to_owned(),
            is_error: result["is_error"] == true,
        })
    }

    /// Adds a message to the conversation, once per hop.
    ///
    /// # Errors
    ///
    /// When the journal cannot be read.
    pub async fn say(&self, text: impl Into<String>) -> Result<(), Stop> {
        self.call(ExecOp::Say { text: text.into() }).await.map(drop)
    }

    async fn call(&self, op: ExecOp) -> Result<Json, Stop> {
        match self.hop.answer(op).await {
            Answer::Result(result) => Ok(result),
            Answer::Error(_, why) => Err(Stop::Failed(AgentError::fatal(why))),
            Answer::End(ended) => match *ended {
                Ok(outcome) => Err(Stop::Ended(Box::new(outcome))),
                Err(err) => Err(Stop::Failed(err)),
            },
        }
    }
}
