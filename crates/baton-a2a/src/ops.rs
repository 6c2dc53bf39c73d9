//! The A2A operations on Baton sessions: send (start, or answer a task that
//! waits for input), get, list, cancel, and the event streams.

use std::time::Duration;

use a2a::{
    JsonRpcError, Message, PartContent, SendMessageRequest, StreamResponse, Task, TaskState,
    error_code,
};
use baton_client::conversation::Turn;
use baton_client::{ErrorKind, EventStream, Reply, Seen};
use baton_gateway::callers::Caller;
use baton_proto::{AgentName, Event, Value};
use futures::{Stream, StreamExt};
use uuid::Uuid;

use crate::Gateway;
use crate::task::{self, at_rest};

pub(crate) use crate::errors::error;

pub(crate) fn internal(err: impl std::fmt::Display) -> JsonRpcError {
    error(error_code::INTERNAL_ERROR, err.to_string())
}

fn not_found(id: &str) -> JsonRpcError {
    error(error_code::TASK_NOT_FOUND, format!("no task {id}"))
}

/// The text and variables of a message: its text parts, joined; its data
/// parts that are objects, as variables. Files (raw or URL parts) reach
/// the agent in the variable `a2a.files`; a message of files alone is
/// told as their names.
fn read(message: &Message) -> Result<(String, Vec<(String, Value)>), JsonRpcError> {
    let mut texts = Vec::new();
    let mut files = Vec::new();
    let mut variables = Vec::new();
    for part in &message.parts {
        match &part.content {
            PartContent::Text(text) => texts.push(text.clone()),
            PartContent::Data(serde_json::Value::Object(map)) => {
                for (key, value) in map {
                    let value = rmpv::ext::to_value(value).unwrap_or(Value::Nil);
                    variables.push((key.clone(), value));
                }
            }
            PartContent::Data(_) => {
                return Err(error(
                    error_code::CONTENT_TYPE_NOT_SUPPORTED,
                    "a data part is a JSON object (its fields become variables)",
                ));
            }
            PartContent::Raw(_) | PartContent::Url(_) => {
                let name = part.filename.as_deref().unwrap_or("a file");
                let kind = part
                    .media_type
                    .as_deref()
                    .unwrap_or("application/octet-stream");
                files.push(format!("{name} ({kind})"));
            }
        }
    }
    if texts.is_empty() && !files.is_empty() {
        texts.push(format!("[files: {}]", files.join(", ")));
    }
    if texts.is_empty() {
        return Err(error(
            error_code::INVALID_PARAMS,
            "the message needs a text part: the task, as the user would ask it",
        ));
    }
    Ok((texts.join("\n"), variables))
}

/// A session id from a task id.
fn session_of(id: &str) -> Result<Uuid, JsonRpcError> {
    id.parse().map_err(|_| not_found(id))
}

/// A message on its way: the session that runs it (the A2A task), the
/// context (the conversation) it belongs to, the session's events that
/// came before it (a follower skips them), and the conversation's turn it
/// is, whose events close it at its end.
#[derive(Debug)]
pub(crate) struct Begun {
    pub(crate) session: Uuid,
    pub(crate) context: String,
    pub(crate) seen: Seen,
    pub(crate) turn: Option<Turn>,
}

impl Gateway {
    /// The last event of `session`, and the events stored so far.
    pub(crate) async fn last(&self, session: Uuid) -> Result<(Option<Event>, Seen), JsonRpcError> {
        let events = self.client.history(session).await.map_err(internal)?;
        let seen = Seen::of(&events);
        // The last event with the session's whole path (a compact handoff
        // names only its new hop).
        Ok((Event::last_with_path(&events), seen))
    }

    /// What a session waiting for input asks: the last message of the
    /// waiting task's conversation, from the inbox.
    async fn question(&self, session: Uuid) -> Option<String> {
        let entry = self.inbox.waiting(session).await.ok()??;
        let asked = entry
            .gate()
            .filter(|gate| gate.reason == baton_proto::Reason::InputRequired)
            .and_then(|gate| serde_json::from_str::<serde_json::Value>(&gate.arguments).ok())
            .and_then(|args| args["question"].as_str().map(str::to_owned));
        let question = match asked {
            Some(question) => question,
            None => entry.envelope.context.messages.last()?.content.clone(),
        };
        Some(format!("{} waits for input: {question}", entry.agent()))
    }

    /// Session `session` as a task, with the question when it waits for input.
    pub(crate) async fn task(
        &self,
        session: Uuid,
        context: &str,
        last: Option<&Event>,
        with_history: bool,
    ) -> Task {
        let mut task = task::task(session, context, last, with_history);
        self.ask(session, &mut task.status).await;
        task
    }

    /// Puts the question in `status` when it is input-required.
    async fn ask(&self, session: Uuid, status: &mut a2a::TaskStatus) {
        if status.state != TaskState::InputRequired {
            return;
        }
        if let (Some(question), Some(message)) = (self.question(session).await, &mut status.message)
        {
            message.parts = vec![a2a::Part::text(question)];
        }
    }

    /// The context id of task `session` as `caller` may see it: recorded
    /// (and `caller`'s), or the session id for a session started elsewhere
    /// (when the gateway names no callers). `None`: no such task for them.
    async fn context_of(
        &self,
        session: Uuid,
        caller: &Caller,
    ) -> Result<Option<String>, JsonRpcError> {
        if let Some(record) = self.index.get(session).await.map_err(internal)? {
            return Ok(caller
                .owns(record.caller.as_deref())
                .then_some(record.context));
        }
        if caller.name().is_some() {
            return Ok(None);
        }
        let (last, _) = self.last(session).await?;
        Ok(last.map(|_| session.to_string()))
    }

    /// Task `id`'s session and context id, or "no such task" (another
    /// caller's task included: its existence is not told).
    async fn known(&self, id: &str, caller: &Caller) -> Result<(Uuid, String), JsonRpcError> {
        let session = session_of(id)?;
        let context = self
            .context_of(session, caller)
            .await?
            .ok_or_else(|| not_found(id))?;
        Ok((session, context))
    }

    /// `SendMessage` and `SendStreamingMessage`, up to the session running:
    /// a new session, or the answer to one waiting for input. Returns the
    /// session, its context id, and its events to skip when following it
    /// (those before this message).
    pub(crate) async fn start(
        &self,
        target: Option<&AgentName>,
        request: &SendMessageRequest,
        live: bool,
        caller: &Caller,
    ) -> Result<Begun, JsonRpcError> {
        let (text, variables) = read(&request.message)?;
        if let Some(id) = &request.message.task_id {
            let feedback = request
                .message
                .metadata
                .as_ref()
                .and_then(|m| m.get("feedback"));
            if let Some(feedback) = feedback {
                return self.feedback(id, &text, feedback, caller).await;
            }
            return self.answer(id, &text, &request.message, caller).await;
        }
        if let Some(agent) = target {
            self.client
                .check_served(agent)
                .await
                .map_err(|err| error(error_code::INVALID_PARAMS, err.to_string()))?;
        }
        self.turn(target, request, text, variables, live, caller)
            .await
    }

    /// Feedback on task `id` (metadata `feedback`: `{score, note}`, the
    /// message's text the note when it has none): given to the registry,
    /// then the task is answered as it stands.
    async fn feedback(
        &self,
        id: &str,
        text: &str,
        feedback: &serde_json::Value,
        caller: &Caller,
    ) -> Result<Begun, JsonRpcError> {
        let (session, context) = self.known(id, caller).await?;
        let score = feedback.get("score").and_then(serde_json::Value::as_f64);
        let Some(score) = score else {
            return Err(error(
                error_code::INVALID_PARAMS,
                "metadata `feedback` needs `score`, a number from 0 (not resolved) to 1 (fully resolved)",
            ));
        };
        let note = feedback
            .get("note")
            .and_then(|n| n.as_str())
            .unwrap_or(text)
            .to_owned();
        let request = baton_proto::FeedbackRequest {
            session: session.to_string(),
            score,
            note: Some(note),
            extra: baton_proto::Map::new(),
        };
        self.registry.feedback(&request).await.map_err(|err| {
            error(
                error_code::INVALID_PARAMS,
                format!("no feedback was recorded: {err}"),
            )
        })?;
        let (_, seen) = self.last(session).await?;
        Ok(Begun {
            session,
            context,
            seen,
            turn: None,
        })
    }

    /// A message to task `id`, which must wait for input: the answer goes
    /// through the inbox (completing the session, or on to the agent type
    /// the message's metadata names as `handoff`).
    pub(crate) async fn answer(
        &self,
        id: &str,
        text: &str,
        message: &Message,
        caller: &Caller,
    ) -> Result<Begun, JsonRpcError> {
        let (session, context) = self.known(id, caller).await?;
        if let Some(other) = message
            .context_id
            .as_deref()
            .filter(|c| !c.is_empty() && *c != context)
        {
            return Err(error(
                error_code::INVALID_PARAMS,
                format!(
                    "task {id} belongs to context {context}, not {other}: send it in its own context, or without a task id to start a turn of {other}"
                ),
            ));
        }
        let reply = match message
            .metadata
            .as_ref()
            .and_then(|m| m.get("handoff"))
            .and_then(|h| h.as_str())
        {
            Some(agent) => Reply::Handoff(
                AgentName::new(agent)
                    .map_err(|err| error(error_code::INVALID_PARAMS, format!("handoff: {err}")))?,
            ),
            None => Reply::Complete,
        };
        let (last, seen) = self.last(session).await?;
        let said = crate::terms::answer_variables(message);
        let answered = (self.inbox)
            .answer_session(session, text, Some(said), reply, "a2a")
            .await
            .map_err(|err| match err.kind() {
                ErrorKind::NotWaiting
                | ErrorKind::WrongAnswer
                | ErrorKind::Ended
                | ErrorKind::NoRoute
                | ErrorKind::Decode => error(error_code::INVALID_PARAMS, err.to_string()),
                _ => internal(err),
            })?;
        if !answered {
            let state = task::state(last.as_ref());
            return Err(error(
                error_code::UNSUPPORTED_OPERATION,
                format!(
                    "task {id} does not wait for input (it is {state:?}); send a new message without a task id to start a new task"
                ),
            ));
        }
        // The context's turn: followed, it closes at its end.
        let turn = self
            .conversations
            .answered_turn(&context, session, seen.clone());
        Ok(Begun {
            session,
            context,
            seen,
            turn: Some(turn),
        })
    }

    /// The events of `session` past those in `seen`, until it ends or
    /// waits for input: a conversation's `turn`'s own (which close it at its
    /// end), or the session's.
    pub(crate) async fn events(
        &self,
        session: Uuid,
        seen: Seen,
        turn: Option<Turn>,
    ) -> Result<EventStream, JsonRpcError> {
        match turn {
            Some(turn) => turn
                .events()
                .await
                .map_err(|err| internal(baton_nats::error_chain(&err))),
            None => (self.client.follow_after(session, seen).await).map_err(internal),
        }
    }

    /// Follows `session`'s `events` until it ends or waits for input, or
    /// `timeout` passes; its last event then.
    pub(crate) async fn wait(
        &self,
        session: Uuid,
        mut events: EventStream,
        timeout: Duration,
    ) -> Result<Option<Event>, JsonRpcError> {
        let mut last = None;
        let deadline = tokio::time::Instant::now() + timeout;
        while let Ok(Some(event)) = tokio::time::timeout_at(deadline, events.next()).await {
            last = Some(event.map_err(internal)?);
        }
        if last.is_none() {
            return Ok(self.last(session).await?.0);
        }
        Ok(last)
    }

    /// The events of `session` past those in `seen` (a conversation's
    /// `turn`'s own, when it is one), as A2A stream responses: the task
    /// first, then each event's updates, until the task ends or waits for
    /// input.
    pub(crate) fn stream(
        &self,
        session: Uuid,
        context: String,
        seen: Seen,
        turn: Option<Turn>,
    ) -> impl Stream<Item = Result<StreamResponse, JsonRpcError>> + Send + 'static {
        let gateway = self.clone();
        let (sender, receiver) = futures::channel::mpsc::unbounded();
        tokio::spawn(async move {
            let send = |item| sender.unbounded_send(item).is_ok();
            // A new task starts from nothing; an answered one from where it was.
            let last = if seen.is_empty() {
                None
            } else {
                match gateway.last(session).await {
                    Ok((last, _)) => last,
                    Err(err) => {
                        send(Err(err));
                        return;
                    }
                }
            };
            let mut first = task::task(session, &context, last.as_ref(), false);
            if at_rest(&first.status.state) {
                // An answer to a task that waited for input: it works again.
                first.status.state = TaskState::Working;
                first.status.message = None;
            }
            if !send(Ok(StreamResponse::Task(first))) {
                return;
            }
            let mut events = match gateway.events(session, seen, turn).await {
                Ok(events) => events,
                Err(err) => {
                    send(Err(err));
                    return;
                }
            };
            let mut shown = baton_proto::Shown::default();
            while let Some(event) = events.next().await {
                let event = match event {
                    Ok(event) => event,
                    Err(err) => {
                        send(Err(internal(err)));
                        return;
                    }
                };
                if event.kind == baton_proto::EventType::Delta {
                    let piece = task::piece(session, &context, &event, &mut shown);
                    if piece.is_some_and(|update| !send(Ok(update))) {
                        return;
                    }
                    continue;
                }
                for mut update in task::updates(session, &context, &event) {
                    if let StreamResponse::StatusUpdate(status) = &mut update {
                        gateway.ask(session, &mut status.status).await;
                    }
                    if !send(Ok(update)) {
                        return;
                    }
                }
            }
        });
        receiver
    }

    /// `GetTask`.
    pub(crate) async fn get(
        &self,
        id: &str,
        history: Option<i32>,
        caller: &Caller,
    ) -> Result<Task, JsonRpcError> {
        let (session, context) = self.known(id, caller).await?;
        let (last, _) = self.last(session).await?;
        let mut task = self.task(session, &context, last.as_ref(), true).await;
        task::trim_history(&mut task, history);
        Ok(task)
    }

    /// `SubscribeToTask`: the task's stream from now on; a task that ended
    /// has nothing more to send.
    pub(crate) async fn subscribe(
        &self,
        id: &str,
        caller: &Caller,
    ) -> Result<
        impl Stream<Item = Result<StreamResponse, JsonRpcError>> + Send + 'static,
        JsonRpcError,
    > {
        let (session, context) = self.known(id, caller).await?;
        let (last, count) = self.last(session).await?;
        if task::state(last.as_ref()).is_terminal() {
            return Err(error(
                error_code::UNSUPPORTED_OPERATION,
                format!("task {id} has ended; read it with GetTask"),
            ));
        }
        Ok(self.stream(session, context, count, None))
    }

    /// `CancelTask`: cancels the session; running agents are stopped.
    pub(crate) async fn cancel(&self, id: &str, caller: &Caller) -> Result<Task, JsonRpcError> {
        let (session, context) = self.known(id, caller).await?;
        match self
            .client
            .cancel(session, "cancelled by the A2A client")
            .await
            .map_err(internal)?
        {
            baton_client::Cancel::Cancelled(event) => {
                Ok(task::task(session, &context, Some(&event), false))
            }
            baton_client::Cancel::Ended(event) => Err(error(
                error_code::TASK_NOT_CANCELABLE,
                format!("task {id} has ended ({:?})", task::state(Some(&event))),
            )),
        }
    }
}
