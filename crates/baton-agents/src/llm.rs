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

use std::sync::Arc;
use std::time::Duration;

use baton_proto::{Message, Reason, Role, Value};
use baton_worker::{
    AgentError, ChildTask, ContextUpdate, DelegateMode, Outcome, Results, Route, Routing, Task,
};
use serde_json::{Value as Json, json};

use crate::StartError;
use crate::journal::Journal;
use crate::limits::Limiter;
use crate::spec::{DelegateSpec, LlmSpec, McpSpec};
use crate::tools::Toolbox;

mod answer;
mod asking;
mod body;
mod bound;
mod budget;
use budget::out_of_budget;
mod calling;
mod chat;
pub(crate) mod headers;
mod offer;
mod replay;
mod stream;
mod waiting;
use calling::Turn;
use offer::{Tool, ToolSource, offered};
use replay::Answered;

/// Calls the model for a task.
#[derive(Debug, Clone)]
pub struct LlmRunner {
    settings: LlmSpec,
    api_key: Option<String>,
    http: reqwest::Client,
    tools: Vec<Tool>,
    handoffs: Vec<Route>,
    delegates: Vec<DelegateSpec>,
    /// Tokens in and out, by model (`baton.llm.tokens`).
    tokens: opentelemetry::metrics::Counter<u64>,
    /// What the calls cost by `[llm.price]`, by model (`baton.llm.cost`).
    cost: opentelemetry::metrics::Counter<f64>,
    /// Tools from the spec's MCP servers.
    toolbox: Arc<Toolbox>,
    /// What the hop's model and tool calls returned, replayed on redelivery.
    journal: Arc<Journal>,
    /// MCP tool calls, by tool and outcome (`baton.tool.calls`).
    tool_calls: opentelemetry::metrics::Counter<u64>,
    /// How long MCP tool calls take (`baton.tool.duration`).
    tool_seconds: opentelemetry::metrics::Histogram<f64>,
    /// The endpoint's shared rate limit (none only for a runner built
    /// without NATS, in unit tests).
    limiter: Option<Arc<Limiter>>,
    /// The limit's rate, waits and refusals on the metrics endpoint.
    limit_metrics: crate::limits::Metrics,
    /// Where tool calls wait for a person (an unknown outcome, an approval).
    inbox: Option<baton_worker::Inbox>,
    /// In-doubt tool calls, by tool and decision (`baton.tool.in_doubt`).
    in_doubt: opentelemetry::metrics::Counter<u64>,
    /// Tool calls that needed approval, by tool and decision (`baton.tool.approvals`).
    approvals: opentelemetry::metrics::Counter<u64>,
    /// Conversations compacted under `[llm.history]`, by kind
    /// (`baton.conversation.compactions`).
    compactions: opentelemetry::metrics::Counter<u64>,
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
    ) -> Result<Self, StartError> {
        let api_key = match &settings.api_key_env {
            Some(var) => Some(std::env::var(var).map_err(|_| {
                StartError::new(format!(
                    "[llm] api_key_env names {var}, which is not set: export {var}=<your key>"
                ))
            })?),
            None => None,
        };
        let http = crate::http()
            .timeout(Duration::from_millis(settings.request_timeout_ms))
            .build()
            .map_err(|err| StartError::new(format!("cannot build the HTTP client: {err}")))?;
        let tools = offered(routing, delegates, settings.hand_back);
        Ok(Self {
            settings: settings.clone(),
            api_key,
            http,
            tools,
            handoffs: routing.handoffs.clone(),
            delegates: delegates.to_vec(),
            tokens: baton_worker::meter()
                .u64_counter("baton.llm.tokens")
                .with_description("Tokens the model read (type input) and wrote (type output), by model, from its usage report")
                .build(),
            cost: baton_worker::meter()
                .f64_counter("baton.llm.cost")
                .with_description("What the model calls cost by the spec's [llm.price], by model, from their usage reports")
                .build(),
            toolbox: Arc::default(),
            journal: Arc::default(),
            limiter: None,
            limit_metrics: crate::limits::Metrics::new(&settings.base_url, &settings.model),
            tool_calls: baton_worker::meter()
                .u64_counter("baton.tool.calls")
                .with_description("MCP tool calls, by tool and outcome (ok, error: the tool said isError, failed: no answer)")
                .build(),
            inbox: None,
            in_doubt: waiting::in_doubt(),
            approvals: waiting::approvals(),
            compactions: baton_worker::meter()
                .u64_counter("baton.conversation.compactions")
                .with_description("Conversations whose older exchanges gave way to one message under [llm.history], by kind (summarized, dropped)")
                .build(),
            tool_seconds: baton_worker::meter()
                .f64_histogram("baton.tool.duration")
                .with_unit("s")
                .with_description("How long MCP tool calls take, by tool and outcome")
                .build(),
        })
    }

    /// Records model answers and tool results in `journal` before acting on them.
    /// Takes turns from the endpoint's shared rate limit.
    pub(crate) fn with_limiter(mut self, limiter: Limiter) -> Self {
        self.limiter = Some(Arc::new(limiter));
        self
    }

    pub(crate) fn with_journal(mut self, journal: Journal) -> Self {
        self.journal = Arc::new(journal);
        self
    }

    /// Offers the tools of `mcp` too, reaching each server now.
    ///
    /// # Errors
    ///
    /// As [`Toolbox::connect`]: a message that names the server and the tool.
    pub(crate) async fn with_mcp(mut self, mcp: &[McpSpec]) -> Result<Self, StartError> {
        let taken: Vec<String> = self.tools.iter().map(|tool| tool.name.clone()).collect();
        self.toolbox = Arc::new(Toolbox::connect(mcp, &taken).await?);
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
        let compacted = match self.compaction(task).await? {
            Ok(compacted) => compacted,
            Err(overrun) => return Ok(out_of_budget(overrun, ContextUpdate::default())),
        };
        let Some(compacted) = compacted else {
            return self.converse(task, self.conversation(task)).await;
        };
        let kept = &task.envelope.context.messages[compacted.replaces..];
        let read = self.conversation_of(std::iter::once(&compacted.message).chain(kept));
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
            messages.push(json!({
                "role": "tool",
                "tool_call_id": result.tag.clone().unwrap_or_default(),
                "content": content,
            }));
        }
        let mut outcome = self.converse(task, messages.clone()).await?;
        // Keep the tool results in the session's conversation.
        let recorded: Vec<Message> = results
            .results
            .iter()
            .zip(&messages[messages.len() - results.results.len()..])
            .map(|(result, sent)| {
                let mut message =
                    Message::new(Role::Tool, sent["content"].as_str().unwrap_or_default());
                message.tool_call_id.clone_from(&result.tag);
                message
            })
            .collect();
        outcome.update_mut().messages.splice(0..0, recorded);
        Ok(outcome)
    }

    async fn converse(&self, task: &Task, mut messages: Vec<Json>) -> Result<Outcome, AgentError> {
        let mut update = ContextUpdate::default();
        let mut corrected = false;
        let mut steps = 0;
        loop {
            steps += 1;
            if steps > self.settings.max_steps {
                return Ok(self.out_of_steps(update));
            }
            let Answered { answer, source } = match self
                .answer(task, (steps, answer::Asking::Turn), &messages)
                .await?
            {
                Ok(answered) => answered,
                Err(overrun) => return Ok(out_of_budget(overrun, update)),
            };
            let message = &answer["choices"][0]["message"];
            let content = message["content"].as_str().unwrap_or_default().to_owned();
            let calls = message["tool_calls"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let Some(call) = calls.first() else {
                if !content.is_empty() {
                    update
                        .messages
                        .push(Message::new(Role::Agent, content.clone()));
                }
                return Ok(Outcome::answer(content).with_update(update).into());
            };
            let turn = Turn {
                task,
                content: &content,
                calls: &calls,
                step: steps,
                source: source.as_deref(),
            };
            if self.asks_user(task) && asking::is_ask(&calls) {
                match self.ask(&turn, &mut messages, &mut update).await? {
                    Some(waiting) => return Ok(waiting),
                    None => continue,
                }
            }
            if self.all_mcp(&calls) {
                match self
                    .call_tools(turn, &mut messages, &mut update, &mut corrected)
                    .await?
                {
                    calling::Turned::Called(calls_made) => {
                        steps += calls_made;
                        continue;
                    }
                    calling::Turned::Corrected => continue,
                    calling::Turned::Unknown(outcome) => return Ok(*outcome),
                }
            }
            if let Some(children) = self.delegations(&calls) {
                // Every call asks a delegate: one parallel delegation, one child per call.
                update.messages.push(asked(&content, json!(calls)));
                let delegation = Outcome::delegate(children, DelegateMode::Parallel);
                return Ok(delegation.with_update(update).into());
            }
            let (tool, arguments) = match self.checked_call(call) {
                Ok(checked) => checked,
                Err(problem) if !corrected => {
                    // Tell the model once, then ask again.
                    corrected = true;
                    self.correct(&mut messages, &content, call, &problem);
                    continue;
                }
                Err(problem) => {
                    return Err(AgentError::fatal(format!(
                        "the model made an invalid tool call twice: {problem}"
                    )));
                }
            };
            return self.transfer(tool, &arguments, call, content, update);
        }
    }

    /// Tells the model what is wrong with its `call`, to ask again.
    fn correct(&self, messages: &mut Vec<Json>, content: &str, call: &Json, problem: &str) {
        let id = call["id"].as_str().unwrap_or("call");
        messages.push(json!({"role": "assistant", "content": content, "tool_calls": [call]}));
        messages.push(json!({
            "role": "tool",
            "tool_call_id": id,
            "content": format!("error: {problem}. Call one of {:?}, or answer in text.", self.tool_names()),
        }));
    }

    /// The outcome of a checked handoff or condition `call` of `tool`: the
    /// call and its result are recorded in the conversation.
    fn transfer(
        &self,
        tool: &Tool,
        arguments: &Json,
        call: &Json,
        content: String,
        mut update: ContextUpdate,
    ) -> Result<Outcome, AgentError> {
        let name = call["function"]["name"].as_str().unwrap_or_default();
        let id = call["id"].as_str().unwrap_or("call").to_owned();
        update.messages.push(asked(&content, json!([call])));
        let mut result = Message::new(Role::Tool, format!("transferred by {name}"));
        result.tool_call_id = Some(id);
        update.messages.push(result);
        let reason = arguments["reason"]
            .as_str()
            .map_or(Reason::LlmHandoff, Reason::parse);
        match tool.source {
            ToolSource::Handoff(index) => {
                Ok(self.handoffs[index].take(reason, Value::from(content), update))
            }
            ToolSource::HandBack => {
                let answer = arguments["answer"].as_str().unwrap_or(&content).to_owned();
                update
                    .messages
                    .push(Message::new(Role::Agent, answer.clone()));
                Ok(Outcome::answer(answer)
                    .with_update(update)
                    .hand_back()
                    .into())
            }
            ToolSource::Condition(index) => Ok(Outcome::answer(content)
                .with_update(update)
                .judged(index)
                .into()),
            // Refused with the invalid calls above; never taken as a handoff.
            ToolSource::Delegate(_) => Err(AgentError::fatal(format!(
                "the model's call of {name} cannot be a handoff"
            ))),
        }
    }

    /// The tool a (non-delegate) call names and its arguments, or what is
    /// wrong with the call, to tell the model.
    fn checked_call(&self, call: &Json) -> Result<(&Tool, Json), String> {
        let name = call["function"]["name"].as_str().unwrap_or_default();
        let arguments = call["function"]["arguments"].as_str().unwrap_or("{}");
        let parsed: Result<Json, _> = serde_json::from_str(if arguments.is_empty() {
            "{}"
        } else {
            arguments
        });
        let tool = self.tools.iter().find(|tool| tool.name == name);
        match (tool, parsed) {
            (None, _) if self.toolbox.find(name).is_some() => Err(format!(
                "{name} was called beside a transfer_to_ or agent_run_ call: call tools in a turn of their own, then hand off"
            )),
            (None, _) => Err(format!("there is no tool {name:?}")),
            (Some(tool), _) if matches!(tool.source, ToolSource::Delegate(_)) => Err(
                "agent_run_ calls need a `task` string, and go without transfer_to_ calls in the same turn"
                    .to_owned(),
            ),
            (Some(_), Err(err)) => Err(format!("the arguments are not JSON: {err}")),
            (Some(tool), Ok(arguments)) if arguments.is_object() => Ok((tool, arguments)),
            (Some(_), Ok(_)) => Err("the arguments are not a JSON object".to_owned()),
        }
    }

    /// The calls as child tasks, if every one is a valid delegate call.
    fn delegations(&self, calls: &[Json]) -> Option<Vec<ChildTask>> {
        calls
            .iter()
            .map(|call| {
                let name = call["function"]["name"].as_str()?;
                let tool = self.tools.iter().find(|tool| tool.name == name)?;
                let ToolSource::Delegate(index) = tool.source else {
                    return None;
                };
                let arguments: Json =
                    serde_json::from_str(call["function"]["arguments"].as_str()?).ok()?;
                let input = arguments["task"].as_str()?.to_owned();
                let id = call["id"].as_str().unwrap_or_default();
                let child = ChildTask::new(self.delegates[index].target.clone(), input);
                Some(child.tag(id))
            })
            .collect()
    }

    fn tool_names(&self) -> Vec<&str> {
        let mcp = self.toolbox.tools().iter().map(|tool| tool.name.as_str());
        self.tools
            .iter()
            .map(|tool| tool.name.as_str())
            .chain(mcp)
            .collect()
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

/// The agent's message that made the tool `calls`, for the conversation.
fn asked(content: &str, calls: Json) -> Message {
    let mut asked = Message::new(Role::Agent, content);
    asked.tool_calls = Some(rmpv::ext::to_value(calls).unwrap_or(Value::Nil));
    asked
}
