//! A tool call at an agent type: one session started, followed to its end
//! (its events relayed as progress when the caller asked for it), and its
//! end turned into a tool result that names the session.

use baton_client::EventStream;
use baton_client::conversation::Question;

use crate::elicit::Elicited;
use baton_proto::{AgentName, Envelope, Event, EventType, Value};
use futures::StreamExt;
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, ProgressNotificationParam};
use rmcp::service::{RequestContext, RoleServer};

use crate::Gateway;

/// A call's task at `agent`, asking `question`: replayable, sent through
/// the ingress as `baton send --to` does (the client role may publish there,
/// and the router moves it to the agent type), its answers streamed when the
/// caller asked for progress.
fn task_for(agent: &AgentName, question: &str, context: &RequestContext<RoleServer>) -> Envelope {
    let mut task = Envelope::task(question).with_to(agent.clone());
    task.replayable = true;
    task.stream = context.meta.get_progress_token().is_some();
    task
}

impl Gateway {
    /// Runs one session at `agent` and turns its end into a tool result.
    pub(crate) async fn run(
        &self,
        agent: AgentName,
        arguments: JsonObject,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        if self.takes_own_arguments(&agent).await {
            return self.run_own(agent, arguments, context).await;
        }
        let Some(question) = arguments.get("question").and_then(|q| q.as_str()) else {
            return Ok(CallToolResult::error(vec![ContentBlock::text(
                "the argument `question` (a string) is required",
            )]));
        };
        let mut task = task_for(&agent, question, context);
        let (tokens, cost) = (arguments.get("budget_tokens"), arguments.get("budget_cost"));
        match baton_gateway::budget(tokens, cost, self.budget) {
            Ok(budget) => task.budget = budget,
            Err(why) => return Ok(CallToolResult::error(vec![ContentBlock::text(why)])),
        }
        if let Some(variables) = arguments.get("variables") {
            let Some(variables) = variables.as_object() else {
                return Ok(CallToolResult::error(vec![ContentBlock::text(
                    "the argument `variables` must be an object",
                )]));
            };
            for (key, value) in variables {
                let value = rmpv::ext::to_value(value).unwrap_or(Value::Nil);
                task.context.variables.insert(key.clone(), value);
            }
        }
        match arguments.get("conversation") {
            None => {}
            Some(serde_json::Value::String(id)) if !id.is_empty() => {
                return self.turn(id, task, context).await;
            }
            Some(_) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(
                    "the argument `conversation` must be a non-empty string: any id, a new one starts a conversation",
                )]));
            }
        }
        self.session(agent, task, context).await
    }

    /// Runs one session at `agent`, which takes arguments of its own: they
    /// are the variable `mcp.arguments`, and the task's text is their
    /// `question` when it is a string (else empty). The gateway's own
    /// arguments (budgets, variables, a conversation) are not read.
    async fn run_own(
        &self,
        agent: AgentName,
        arguments: JsonObject,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let question = arguments.get("question").and_then(|q| q.as_str());
        let mut task = task_for(&agent, question.unwrap_or_default(), context);
        task.budget = baton_gateway::budget(None, None, self.budget).unwrap_or_default();
        let said = serde_json::json!({ "arguments": arguments });
        task.context.variables.insert(
            "mcp".to_owned(),
            rmpv::ext::to_value(said).unwrap_or(Value::Nil),
        );
        self.session(agent, task, context).await
    }

    /// Starts `task`'s session at `agent` and follows it to a tool result.
    async fn session(
        &self,
        agent: AgentName,
        task: Envelope,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        if let Err(err) = self.client.submit(&task).await {
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "cannot start a session at {agent}: {err}"
            ))]));
        }
        let session = task.session;
        let events = match self.client.follow(session).await {
            Ok(events) => events,
            Err(err) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "cannot follow session {session}: {}",
                    baton_nats::error_chain(&err)
                ))]));
            }
        };
        let (result, _) = self.end((session, events, None), context).await?;
        Ok(with_session(result, session))
    }

    /// Follows `session`'s `events` to its end, or,
    /// for a conversation's turn (`answering` names the conversation and
    /// its caller), until it waits for the user, within the timeout, and
    /// turns it into a tool result: the answer, or the question (then
    /// `true`: the session waits).
    pub(crate) async fn end(
        &self,
        (session, events, answering): (uuid::Uuid, EventStream, crate::elicit::Answering<'_>),
        context: &RequestContext<RoleServer>,
    ) -> Result<(CallToolResult, bool), McpError> {
        let followed = self.follow((events, answering), context);
        let end = tokio::select! {
            end = tokio::time::timeout(self.timeout, followed) => end,
            () = context.ct.cancelled() => {
                return Err(McpError::internal_error(format!("the call was cancelled; session {session} goes on"), None));
            }
        };
        let asked = match &end {
            Ok(Ok(end)) => Question::of(end),
            _ => None,
        };
        let waits = asked.is_some();
        let result = match end {
            Ok(Ok(end)) if end.kind == EventType::Completed => {
                crate::answer::result_of(end.output.as_ref())
            }
            // An agent asked the user: the next call in the conversation answers.
            Ok(Ok(end)) if end.kind == EventType::Waiting => {
                let asked = asked.map(|asked| asked.text).unwrap_or_default();
                CallToolResult::success(vec![ContentBlock::text(asked)])
            }
            Ok(Ok(end)) => CallToolResult::error(vec![ContentBlock::text(format!(
                "session {session} failed: {}{}",
                end.reason.as_ref().map_or("failed", |r| r.as_str()),
                end.detail.map(|d| format!(": {d}")).unwrap_or_default()
            ))]),
            Ok(Err(err)) => CallToolResult::error(vec![ContentBlock::text(format!(
                "cannot follow session {session}: {err}"
            ))]),
            Err(_) => CallToolResult::error(vec![ContentBlock::text(format!(
                "session {session} did not end within {:?} (it may wait for a person: `baton inbox ls`); it goes on",
                self.timeout
            ))]),
        };
        Ok((result, waits))
    }

    /// Follows `session` to its end, sending each event as progress when
    /// the caller asked for it, and as a log notification at the level the
    /// MCP session set; a question the client answers is given on the way.
    async fn follow(
        &self,
        (mut events, answering): (EventStream, crate::elicit::Answering<'_>),
        context: &RequestContext<RoleServer>,
    ) -> Result<Event, crate::Error> {
        let token = context.meta.get_progress_token();
        let mut seen = 0u32;
        let mut last = None;
        let mut shown = baton_proto::Shown::default();
        while let Some(event) = events.next().await {
            let event = event.map_err(followed)?;
            let message = match baton_proto::Delta::of(&event) {
                // A piece of an answer: `delta <agent>: <text not sent yet>`.
                Some(delta) => match shown.fresh(&delta) {
                    "" => continue,
                    fresh => format!("delta {}: {fresh}", event.agent.as_deref().unwrap_or("-")),
                },
                None => baton_gateway::text::progress(&event),
            };
            seen += 1;
            if let Some(logged) = self.log_level.logged(&event) {
                // Logging is deprecated from MCP 2026-07-28 (SEP-2577) and
                // works through its deprecation window: see `logging`.
                #[allow(deprecated)]
                let sent = context.peer.notify_logging_message(logged).await;
                if let Err(err) = sent {
                    tracing::debug!(error = %err, "a log notification was not sent");
                }
            }
            if let Some(token) = &token {
                let mut progress = ProgressNotificationParam::new(token.clone(), f64::from(seen));
                progress.message = Some(message);
                if let Err(err) = context.peer.notify_progress(progress).await {
                    tracing::debug!(error = %err, "a progress notification was not sent");
                }
            }
            // A question the client answers (elicitation) lets the
            // session go on; else a conversation's turn that waits (for the
            // user's answer, or a person's) ends the call: the next call in
            // it answers.
            match self.elicited(&event, answering, context).await {
                Elicited::Not => {}
                Elicited::GoesOn => continue,
                // The answer's own turn: the asking session after its question.
                Elicited::Turn(next) => {
                    events = next;
                    continue;
                }
            }
            if event.kind == EventType::Waiting && answering.is_some() {
                return Ok(event);
            }
            if event.kind.is_terminal() {
                last = Some(event);
            }
        }
        last.ok_or_else(|| {
            crate::Error::store("the event stream ended before the session did".to_owned())
        })
    }
}

/// A session's events that could not be followed, with their causes.
fn followed(err: baton_nats::Error) -> crate::Error {
    crate::Error::store(baton_nats::error_chain(&err))
}

/// `result`, naming its session in `_meta` (`baton/session`), so that the
/// caller can give feedback on it or watch it.
pub(crate) fn with_session(mut result: CallToolResult, session: uuid::Uuid) -> CallToolResult {
    let mut meta = result.meta.take().unwrap_or_default();
    meta.0.insert(
        "baton/session".to_owned(),
        serde_json::Value::from(session.to_string()),
    );
    result.meta = Some(meta);
    result
}
