//! LLM agents: any OpenAI-compatible chat-completions endpoint.
//!
//! The conversation is the spec's system prompt, then `context.messages`. The
//! spec's handoff targets and LLM conditions are offered as tools named
//! `transfer_to_<target>`. A call of a handoff tool is the agent's own
//! (function-driven) decision; a call of an LLM-condition tool says that
//! condition holds. Either way the call and its result are recorded in the
//! messages. A plain answer is left to the routing rules.
//!
//! Tools from the spec's MCP servers are offered too; their calls are made
//! within the hop (`llm/calling.rs`), and every model answer and tool result is
//! kept in the hop journal before the hop acts on it.
//!
//! A model call is built in layers, each using only those below it:
//!
//! 1. `types`: chat messages, tool calls, the answer as read, the offer,
//!    the prompt and the request;
//! 2. `http`: the endpoint's client, its shared rate limit, streaming and
//!    the provider's headers;
//! 3. `answer`: one answer within a hop, from the journal, a replay or the
//!    endpoint, and the session's budget;
//! 4. `compaction`: a bounded history, compacted before the hop's first call;
//! 5. the runner, here: [`LlmRunner`], with the hop's turns (`turn`), its
//!    MCP tool calls (`calling`), `ask_user` (`asking`), `a2a_reply`
//!    (`replying`) and the calls that wait for a person (`waiting`).

use std::sync::Arc;

use baton_proto::{Message, Role, Value};
use baton_worker::{AgentError, ContextUpdate, Outcome, Results, Routing, Task};
use opentelemetry::metrics::{Counter, Histogram};
use serde_json::Value as Json;

use crate::Error;
use crate::journal::Journal;
use crate::limits::Limiter;
use crate::spec::{DelegateSpec, LlmSpec, McpSpec};
use crate::tools::Toolbox;

mod answer;
mod asking;
mod calling;
mod compaction;
mod elicited;
pub(crate) mod http;
pub(crate) mod program;
mod replying;
mod reuse;
mod turn;
mod types;
mod waiting;

use answer::Answers;
use answer::budget::out_of_budget;
pub(crate) use answer::journal_of;
use compaction::{Compacting, Compactions};
use http::Endpoint;
use types::chat::ChatMessage;
use types::offer::Offered;
use types::prompt;

/// What is wrong with a model's tool call: told to the model, which may
/// call again (once), so the message is written for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal(String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

impl From<String> for Refusal {
    fn from(message: String) -> Self {
        Self(message)
    }
}

impl From<&str> for Refusal {
    fn from(message: &str) -> Self {
        Self(message.to_owned())
    }
}

/// Calls the model for a task.
#[derive(Debug, Clone)]
pub struct LlmRunner {
    settings: Arc<LlmSpec>,
    /// The model's answers: the endpoint, and the hop journal.
    answers: Answers,
    /// The tools offered to the model, and where their calls go.
    offered: Offered,
    /// Conversations compacted under `[llm.history]`.
    compactions: Compactions,
    /// The tool calls' instruments.
    meters: Meters,
    /// Where tool calls wait for a person (an unknown outcome, an approval).
    inbox: Option<baton_client::Inbox>,
}

/// The instruments of an agent's tool calls.
#[derive(Debug, Clone)]
struct Meters {
    /// MCP tool calls, by tool and outcome (`baton.tool.calls`).
    tool_calls: Counter<u64>,
    /// How long MCP tool calls take (`baton.tool.duration`).
    tool_seconds: Histogram<f64>,
    /// In-doubt tool calls, by tool and decision (`baton.tool.in_doubt`).
    in_doubt: Counter<u64>,
    /// Tool calls that needed approval, by tool and decision (`baton.tool.approvals`).
    approvals: Counter<u64>,
}

impl Meters {
    fn new() -> Self {
        Self {
            tool_calls: baton_nats::meter::meter()
                .u64_counter("baton.tool.calls")
                .with_description("MCP tool calls, by tool and outcome (ok, error: the tool said isError, failed: no answer)")
                .build(),
            tool_seconds: baton_nats::meter::meter()
                .f64_histogram("baton.tool.duration")
                .with_unit("s")
                .with_description("How long MCP tool calls take, by tool and outcome")
                .build(),
            in_doubt: waiting::in_doubt(),
            approvals: waiting::approvals(),
        }
    }
}

impl LlmRunner {
    /// The runner for `settings`, offering the tools of `routing`.
    ///
    /// # Errors
    ///
    /// When `api_key_env` names a variable that is not set, or the HTTP
    /// client cannot be built.
    pub fn new(
        settings: &LlmSpec,
        routing: &Routing,
        delegates: &[DelegateSpec],
    ) -> Result<Self, Error> {
        let settings = Arc::new(settings.clone());
        let endpoint = Endpoint::new(settings.clone())?;
        Ok(Self {
            answers: Answers::new(settings.clone(), endpoint),
            offered: Offered::new(routing, delegates, settings.hand_back),
            compactions: Compactions::new(),
            meters: Meters::new(),
            inbox: None,
            settings,
        })
    }

    /// Takes turns from the endpoint's shared rate limit.
    pub(crate) fn with_limiter(mut self, limiter: Limiter) -> Self {
        self.answers.endpoint.limit(limiter);
        self
    }

    /// Records model answers and tool results in `journal` before acting on them.
    pub(crate) fn with_journal(mut self, journal: Journal) -> Self {
        self.answers.journal = Arc::new(journal);
        self
    }

    /// Offers the tools of `mcp` too, reaching each server now.
    ///
    /// # Errors
    ///
    /// As [`Toolbox::connect`]: a message that names the server and the tool.
    pub(crate) async fn with_mcp(
        mut self,
        mcp: &[McpSpec],
        tokens: Option<&crate::signin::Tokens>,
    ) -> Result<Self, Error> {
        let taken: Vec<String> = self.offered.tools.iter().map(|t| t.name.clone()).collect();
        self.offered.toolbox = Arc::new(Toolbox::connect(mcp, &taken, tokens).await?);
        Ok(self)
    }

    /// Asks the model about `task`.
    ///
    /// # Errors
    ///
    /// Retryable for timeouts, connection errors, 429 and 5xx (honouring
    /// `Retry-After`); fatal for other HTTP errors and for a second invalid
    /// tool call in a row.
    pub async fn run(&self, task: &Task) -> Result<Outcome, AgentError> {
        self.count_decision(task);
        let compacting = self
            .compactions
            .compact(&self.answers, &self.settings, task)
            .await?;
        let compacted = match compacting {
            Compacting::Needless => {
                return self.converse(task, self.conversation(task)).await;
            }
            Compacting::Overrun(overrun) => {
                return Ok(out_of_budget(overrun, ContextUpdate::default()));
            }
            Compacting::Compacted(compacted) => *compacted,
        };
        let kept = &task.envelope.context.messages[compacted.replaces..];
        let conversation = std::iter::once(&compacted.message).chain(kept);
        let read = prompt::conversation(&self.settings.system_prompt, conversation);
        let mut outcome = self.converse(task, read).await?;
        outcome.update_mut().compaction = Some(compacted);
        Ok(outcome)
    }

    /// Continues after the model's delegate tool calls have been answered:
    /// each result goes back to the model as the result of its tool call.
    ///
    /// # Errors
    ///
    /// As for [`LlmRunner::run`].
    pub async fn resume(&self, task: &Task, results: &Results) -> Result<Outcome, AgentError> {
        let mut messages = self.conversation(task);
        for result in &results.results {
            let content = if result.completed() {
                match &result.output {
                    Value::String(text) => text.as_str().unwrap_or_default().to_owned(),
                    other => other.to_string(),
                }
            } else {
                format!("failed: {}", result.detail.clone().unwrap_or_default())
            };
            let id = result.tag.clone().unwrap_or_default();
            messages.push(ChatMessage::result(id, content));
        }
        let mut outcome = self.converse(task, messages.clone()).await?;
        // Keep the tool results in the session's conversation.
        let recorded: Vec<Message> = results
            .results
            .iter()
            .zip(&messages[messages.len() - results.results.len()..])
            .map(|(result, sent)| {
                let mut message = Message::new(Role::Tool, sent.content());
                message.tool_call_id.clone_from(&result.tag);
                message
            })
            .collect();
        outcome.update_mut().messages.splice(0..0, recorded);
        Ok(outcome)
    }

    /// The system prompt, then the session's conversation, as chat messages.
    fn conversation(&self, task: &Task) -> Vec<ChatMessage> {
        prompt::conversation(
            &self.settings.system_prompt,
            &task.envelope.context.messages,
        )
    }
}

/// The agent's message that made the tool `calls` (as they came), for the
/// conversation.
fn asked(content: &str, calls: &Json) -> Message {
    let mut asked = Message::new(Role::Agent, content);
    asked.tool_calls = Some(rmpv::ext::to_value(calls).unwrap_or(Value::Nil));
    asked
}

/// `messages` as OpenAI chat messages, as an LLM agent's model reads the
/// conversation (without a system prompt): what a program's request holds.
pub(crate) fn chat_messages(messages: &[Message]) -> Vec<Json> {
    (prompt::conversation("", messages).iter())
        .map(|message| serde_json::to_value(message).unwrap_or(Json::Null))
        .collect()
}
