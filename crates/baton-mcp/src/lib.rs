//! `baton mcp serve`: Baton agent types as MCP tools, through the official
//! Rust SDK (`rmcp`), over stdio or streamable HTTP.
//!
//! Each agent type is a tool named after it, described by its registry
//! entry, taking a `question`, optional `variables` and an optional
//! `budget_tokens` and `budget_cost` (capped by the gateway's own budget). A call starts a
//! session at that agent type, relays the session's events as progress
//! notifications (when the caller asked for progress; then the answers as
//! they are written come among them, `delta <agent>: <text>`), and returns
//! the answer, or the failure as a tool error. Each result names its
//! session in `_meta` (`baton/session`); the tool `baton.feedback` takes a
//! session, a `score` from 0 to 1 and a `note`, and gives the registry
//! that feedback.

use std::sync::Arc;
use std::time::Duration;

use baton_client::{Client, RegistryClient};
use baton_proto::{AgentName, Envelope, Event, EventType, LookupRequest, Value};

pub use baton_gateway::Error;
use futures::StreamExt;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, Content, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerInfo, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServiceExt};

mod conversation;
mod http;

pub use http::serve_http;

/// What the tools reach.
#[derive(Clone)]
pub struct Gateway {
    client: Client,
    registry: RegistryClient,
    /// The agent types exposed; empty: every live one the registry knows.
    only: Arc<Vec<AgentName>>,
    /// How long a call waits for its session to end.
    timeout: Duration,
    /// The most a session it starts may spend; a call may ask for less.
    budget: baton_proto::Budget,
    /// The conversations calls continue, opened on the first such call.
    talk: conversation::Talk,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("only", &self.only)
            .field("timeout", &self.timeout)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// A gateway to the agent types of `client`'s deployment: `only` these
    /// (every live one when empty), each call waiting up to `timeout`.
    #[must_use]
    pub fn new(
        client: Client,
        registry: RegistryClient,
        only: Vec<AgentName>,
        timeout: Duration,
    ) -> Self {
        Self {
            client,
            registry,
            only: Arc::new(only),
            timeout,
            budget: baton_proto::Budget::default(),
            talk: conversation::Talk::default(),
        }
    }

    /// Creates the conversations bucket, when a call is the first to need
    /// it, with `replicas`.
    #[must_use]
    pub fn with_replicas(mut self, replicas: usize) -> Self {
        self.talk = conversation::Talk::new(replicas);
        self
    }

    /// Caps what each session a call starts may spend, in tokens and cost:
    /// a call's `budget_tokens` and `budget_cost` may ask for less, not more.
    #[must_use]
    pub fn with_budget(mut self, budget: baton_proto::Budget) -> Self {
        self.budget = budget;
        self
    }

    /// Serves MCP on stdin and stdout until the client closes them.
    ///
    /// # Errors
    ///
    /// When the MCP handshake fails.
    pub async fn serve_stdio(self) -> Result<(), Error> {
        let running = self
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|err| Error::Store(format!("MCP over stdio: {err}")))?;
        running
            .waiting()
            .await
            .map_err(|err| Error::Store(format!("MCP over stdio: {err}")))?;
        Ok(())
    }

    /// The tools: every exposed agent type, described from the registry.
    async fn tools(&self) -> Result<Vec<Tool>, McpError> {
        let candidates = match self.registry.lookup(&LookupRequest::default()).await {
            Ok(answer) => answer.candidates,
            // Without a registry, the named agent types are still tools.
            Err(err) if !self.only.is_empty() => {
                tracing::warn!(error = %err, "no registry: the tools have no descriptions");
                Vec::new()
            }
            Err(err) => {
                return Err(McpError::internal_error(
                    format!(
                        "{err}: start a registry (`baton registry`), or name the agent types with --agents"
                    ),
                    None,
                ));
            }
        };
        Ok(baton_gateway::exposed(&self.only, &candidates)
            .into_iter()
            .map(|name| {
                let found = candidates.iter().find(|c| c.agent == name);
                let mut description = found
                    .and_then(|c| c.description.clone())
                    .unwrap_or_else(|| format!("The Baton agent type {name}"));
                if let Some(c) = found.filter(|c| !c.capabilities.is_empty()) {
                    description.push_str(&format!(
                        ". Capabilities: {}; domains: {}; tier {}.",
                        c.capabilities.join(", "),
                        if c.domains.is_empty() {
                            "any".to_owned()
                        } else {
                            c.domains.join(", ")
                        },
                        c.tier
                    ));
                }
                Tool::new(name, description, input_schema())
            })
            .chain(std::iter::once(feedback_tool()))
            .collect())
    }

    /// Runs one session at `agent` and turns its end into a tool result.
    async fn run(
        &self,
        agent: AgentName,
        arguments: JsonObject,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let Some(question) = arguments.get("question").and_then(|q| q.as_str()) else {
            return Ok(CallToolResult::error(vec![Content::text(
                "the argument `question` (a string) is required",
            )]));
        };
        let mut task = Envelope::task(question);
        task.replayable = true;
        let (tokens, cost) = (arguments.get("budget_tokens"), arguments.get("budget_cost"));
        match baton_gateway::budget(tokens, cost, self.budget) {
            Ok(budget) => task.budget = budget,
            Err(why) => return Ok(CallToolResult::error(vec![Content::text(why)])),
        }
        if let Some(variables) = arguments.get("variables") {
            let Some(variables) = variables.as_object() else {
                return Ok(CallToolResult::error(vec![Content::text(
                    "the argument `variables` must be an object",
                )]));
            };
            for (key, value) in variables {
                let value = rmpv::ext::to_value(value).unwrap_or(Value::Nil);
                task.context.variables.insert(key.clone(), value);
            }
        }
        // Through the ingress, as `baton send --to` does: the client role may
        // publish there, and the router moves the task to the agent type.
        task = task.with_to(agent.to_string());
        // A caller that asked for progress gets the answers as they are
        // written, as progress messages.
        task.stream = context.meta.get_progress_token().is_some();
        match arguments.get("conversation") {
            None => {}
            Some(serde_json::Value::String(id)) if !id.is_empty() => {
                return self.turn(id, task, context).await;
            }
            Some(_) => {
                return Ok(CallToolResult::error(vec![Content::text(
                    "the argument `conversation` must be a non-empty string: any id, a new one starts a conversation",
                )]));
            }
        }
        if let Err(err) = self.client.submit(&task).await {
            return Ok(CallToolResult::error(vec![Content::text(format!(
                "cannot start a session at {agent}: {err}"
            ))]));
        }
        let session = task.session;
        let (result, _) = self.end((session, 0, false), context).await?;
        Ok(with_session(result, session))
    }

    /// Follows `session` (after its first `skip` events) to its end, or,
    /// for a conversation's `turn`, until it waits for the user, within the
    /// timeout, and turns it into a tool result: the answer, or the question
    /// (then `true`: the session waits).
    async fn end(
        &self,
        (session, skip, turn): (uuid::Uuid, usize, bool),
        context: &RequestContext<RoleServer>,
    ) -> Result<(CallToolResult, bool), McpError> {
        let followed = self.follow((session, skip, turn), context);
        let end = tokio::select! {
            end = tokio::time::timeout(self.timeout, followed) => end,
            () = context.ct.cancelled() => {
                return Err(McpError::internal_error(format!("the call was cancelled; session {session} goes on"), None));
            }
        };
        let waits = matches!(&end, Ok(Ok(end)) if end.kind == EventType::Waiting);
        let result = match end {
            Ok(Ok(end)) if end.kind == EventType::Completed => {
                let text = end
                    .output
                    .as_ref()
                    .map(baton_gateway::text::value)
                    .unwrap_or_default();
                CallToolResult::success(vec![Content::text(text)])
            }
            // An agent asked the user: the next call in the conversation answers.
            Ok(Ok(end)) if end.kind == EventType::Waiting => {
                CallToolResult::success(vec![Content::text(end.detail.unwrap_or_default())])
            }
            Ok(Ok(end)) => CallToolResult::error(vec![Content::text(format!(
                "session {session} failed: {}{}",
                end.reason.as_ref().map_or("failed", |r| r.as_str()),
                end.detail.map(|d| format!(": {d}")).unwrap_or_default()
            ))]),
            Ok(Err(err)) => CallToolResult::error(vec![Content::text(format!(
                "cannot follow session {session}: {err}"
            ))]),
            Err(_) => CallToolResult::error(vec![Content::text(format!(
                "session {session} did not end within {:?} (it may wait for a person: `baton inbox ls`); it goes on",
                self.timeout
            ))]),
        };
        Ok((result, waits))
    }

    /// `baton.feedback`: says how well a session went.
    async fn feedback(&self, arguments: JsonObject) -> CallToolResult {
        let session = arguments.get("session").and_then(|s| s.as_str());
        let score = arguments.get("score").and_then(serde_json::Value::as_f64);
        let (Some(session), Some(score)) = (session, score) else {
            return CallToolResult::error(vec![Content::text(
                "the arguments `session` (a session id) and `score` (a number from 0 to 1) are required",
            )]);
        };
        let request = baton_proto::FeedbackRequest {
            session: session.to_owned(),
            score,
            note: arguments
                .get("note")
                .and_then(|n| n.as_str())
                .map(str::to_owned),
            extra: baton_proto::Map::new(),
        };
        match self.registry.feedback(&request).await {
            Ok(reply) => CallToolResult::success(vec![Content::text(format!(
                "feedback {score} recorded for session {session}, credited to {}",
                reply.credited.join(", ")
            ))]),
            Err(err) => CallToolResult::error(vec![Content::text(format!(
                "no feedback was recorded: {err}"
            ))]),
        }
    }

    /// Follows `session` to its end, sending each event as progress when
    /// the caller asked for it.
    async fn follow(
        &self,
        (session, skip, turn): (uuid::Uuid, usize, bool),
        context: &RequestContext<RoleServer>,
    ) -> Result<Event, String> {
        let token = context.meta.get_progress_token();
        let mut events = self
            .client
            .follow(session)
            .await
            .map_err(|err| baton_nats::error_chain(&err))?
            .skip(skip);
        let mut seen = 0u32;
        let mut last = None;
        let mut shown = baton_proto::Shown::default();
        while let Some(event) = events.next().await {
            let event = event.map_err(|err| baton_nats::error_chain(&err))?;
            let message = match baton_proto::Delta::of(&event) {
                // A piece of an answer: `delta <agent>: <text not sent yet>`.
                Some(delta) => match shown.fresh(&delta) {
                    "" => continue,
                    fresh => format!("delta {}: {fresh}", event.agent.as_deref().unwrap_or("-")),
                },
                None => baton_gateway::text::progress(&event),
            };
            seen += 1;
            if let Some(token) = &token {
                let mut progress = ProgressNotificationParam::new(token.clone(), f64::from(seen));
                progress.message = Some(message);
                if let Err(err) = context.peer.notify_progress(progress).await {
                    tracing::debug!(error = %err, "a progress notification was not sent");
                }
            }
            // A conversation's turn that waits (for the user's answer, or a
            // person's) ends the call: the next call in it answers.
            if event.kind == EventType::Waiting && turn {
                return Ok(event);
            }
            if event.kind.is_terminal() {
                last = Some(event);
            }
        }
        last.ok_or_else(|| "the event stream ended before the session did".to_owned())
    }
}

/// The name of the feedback tool: a dot, which no agent type has.
pub const FEEDBACK_TOOL: &str = "baton.feedback";

/// `baton.feedback`: how well a session (named in a result's `_meta`,
/// `baton/session`) went.
fn feedback_tool() -> Tool {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "session": {"type": "string", "description": "The session, as a tool result's _meta `baton/session` names it"},
            "score": {"type": "number", "minimum": 0, "maximum": 1, "description": "How well it went: 0 (not resolved) to 1 (fully resolved)"},
            "note": {"type": "string", "description": "What to say about it (optional)"}
        },
        "required": ["session", "score"]
    });
    let schema = match schema {
        serde_json::Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    Tool::new(
        FEEDBACK_TOOL,
        "Say how well a finished session went, from 0 to 1: the agents of its path are credited, and the registry learns from it.",
        schema,
    )
}

/// `result`, naming its session in `_meta` (`baton/session`), so that the
/// caller can give feedback on it or watch it.
fn with_session(mut result: CallToolResult, session: uuid::Uuid) -> CallToolResult {
    let mut meta = result.meta.take().unwrap_or_default();
    meta.0.insert(
        "baton/session".to_owned(),
        serde_json::Value::from(session.to_string()),
    );
    result.meta = Some(meta);
    result
}

/// The tools' input: the question and optional shared variables.
fn input_schema() -> JsonObject {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "The task for the agent, as the user would ask it"},
            "variables": {"type": "object", "description": "Shared context variables the agents may read (optional)"},
            "budget_tokens": {"type": "integer", "minimum": 1, "description": "The most tokens the session may spend on models (optional; the server's own budget, when it has one, caps it)"},
            "budget_cost": {"type": ["number", "string"], "description": "The most the session may cost, as an amount such as 0.50 in the currency of the agents' price tables (optional; the server's own budget, when it has one, caps it)"},
            "conversation": {"type": "string", "description": "Continue this conversation: any id, a new one starts it at this agent type (optional). The question goes to the agent that holds the conversation, with the conversation so far; when an agent asked the user something, it is the answer. The result's structuredContent names the conversation and the session."}
        },
        "required": ["question"]
    });
    match schema {
        serde_json::Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerInfo {
        ServerInfo::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("baton", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Each tool is a Baton agent type. A call runs a whole session, which may \
                 hand off across agents, and returns its answer.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools().await?))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let name = request.name.to_string();
        if name == FEEDBACK_TOOL {
            return Ok(self.feedback(request.arguments.unwrap_or_default()).await);
        }
        let exposed = if self.only.is_empty() {
            self.client
                .check_served(&AgentName::new(name.as_str()).map_err(|err| {
                    McpError::invalid_params(format!("no tool {name:?}: {err}"), None)
                })?)
                .await
                .is_ok()
        } else {
            self.only.iter().any(|a| a.as_str() == name)
        };
        let agent = match AgentName::new(name.as_str()) {
            Ok(agent) if exposed => agent,
            _ => {
                return Err(McpError::invalid_params(
                    format!("no tool {name:?}: list the tools with tools/list"),
                    None,
                ));
            }
        };
        self.run(agent, request.arguments.unwrap_or_default(), &context)
            .await
    }
}
