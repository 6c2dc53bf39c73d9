//! `kind = "a2a"`: each task goes to a remote agent over A2A (Agent2Agent
//! v1.0, JSON-RPC binding), and the remote task's end is the outcome.
//!
//! - The card is read once (and again after a failure) for the JSON-RPC
//!   endpoint and whether the agent streams.
//! - The envelope id is the A2A context id, so a redelivery finds the remote
//!   task it started (`ListTasks` by context) and follows it instead of
//!   starting a second one. A task that failed (or was cancelled, as a run
//!   that timed out cancels its own) is retried as a new remote task in the
//!   same context.
//! - A streamed task is read to its end; otherwise it is polled. Meanwhile
//!   the worker keeps the Baton message alive.
//! - `completed` is the answer, then the routing rules; `input-required` a
//!   handoff to `[a2a] input_required` or the fallback; `failed` a retryable
//!   failure; `rejected`, `canceled` and `auth-required` fatal ones.
//! - A run that is abandoned midway (its session cancelled, or it timed out)
//!   cancels the remote task; one that returns, even with an error, does not.

mod messages;
mod rpc;

use std::time::Duration;

use a2a::{
    JsonRpcResponse, ListTasksResponse, Message, SendMessageResponse, StreamResponse, Task,
    TaskState,
};
use baton_proto::{AgentName, Reason, Value};
use baton_worker::{AgentError, Outcome, Task as BatonTask};
use futures::StreamExt;
use tokio::sync::Mutex;

use crate::spec::A2aSpec;
use crate::{Error, ErrorKind};
use messages::{answer, answered, at_rest, conversation, empty, text_of};
use rpc::{Abandoned, Rpc, RpcError, fetch, result};

/// Where the remote agent takes calls, from its card.
#[derive(Debug, Clone)]
struct Endpoint {
    rpc: String,
    streaming: bool,
}

/// Runs tasks on a remote A2A agent.
pub struct A2aRunner {
    settings: A2aSpec,
    rpc: Rpc,
    endpoint: Mutex<Option<Endpoint>>,
    /// Where an `input-required` task goes: `[a2a] input_required`, else the fallback.
    ask: Option<AgentName>,
}

/// A call that failed, and whether trying again may help.
struct Failure {
    detail: String,
    retryable: bool,
}

impl Failure {
    fn retry(detail: impl Into<String>) -> Self {
        Self {
            detail: detail.into(),
            retryable: true,
        }
    }

    fn fatal(detail: impl Into<String>) -> Self {
        Self {
            detail: detail.into(),
            retryable: false,
        }
    }
}

impl From<Failure> for AgentError {
    fn from(failure: Failure) -> Self {
        if failure.retryable {
            AgentError::retryable(failure.detail)
        } else {
            AgentError::fatal(failure.detail)
        }
    }
}

fn secret(var: &str, what: &str) -> Result<String, Error> {
    std::env::var(var).map_err(|_| {
        Error::config(format!(
            "[a2a] {what} names {var}, which is not set: export {var}=<the remote agent's credential>"
        ))
    })
}

impl A2aRunner {
    /// A runner for `settings`; `fallback` takes input-required tasks when
    /// `input_required` is not set.
    ///
    /// # Errors
    ///
    /// When a credential variable is not set, or a name is invalid.
    pub fn new(settings: &A2aSpec, fallback: Option<&AgentName>) -> Result<Self, Error> {
        use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
        let mut headers = HeaderMap::new();
        headers.insert(a2a::SVC_PARAM_VERSION, HeaderValue::from_static("1.0"));
        let invalid = |what: &str| {
            Error::new(
                ErrorKind::Config,
                format!("[a2a] {what} is not a valid header value"),
            )
        };
        if let Some(var) = &settings.token_env {
            let value = HeaderValue::from_str(&format!("Bearer {}", secret(var, "token_env")?))
                .map_err(|_| invalid("the token"))?;
            headers.insert(AUTHORIZATION, value);
        }
        if let Some(var) = &settings.api_key_env {
            let name = HeaderName::from_bytes(settings.api_key_header.as_bytes())
                .map_err(|_| invalid("api_key_header"))?;
            let value = HeaderValue::from_str(&secret(var, "api_key_env")?)
                .map_err(|_| invalid("the API key"))?;
            headers.insert(name, value);
        }
        let ask = match &settings.input_required {
            Some(agent) => Some(AgentName::new(agent.as_str()).map_err(|err| {
                Error::new(ErrorKind::Config, format!("[a2a] input_required: {err}"))
            })?),
            None => fallback.cloned(),
        };
        let http = crate::http()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|err| {
                Error::new(
                    ErrorKind::Http,
                    format!("cannot build the HTTP client: {err}"),
                )
            })?;
        Ok(Self {
            settings: settings.clone(),
            rpc: Rpc {
                http,
                headers,
                timeout: Duration::from_millis(settings.request_timeout_ms.max(1)),
            },
            endpoint: Mutex::new(None),
            ask,
        })
    }

    /// The remote's endpoint, from its card (read once, and again after a failed call).
    async fn endpoint(&self) -> Result<Endpoint, Failure> {
        let mut cached = self.endpoint.lock().await;
        if let Some(endpoint) = cached.as_ref() {
            return Ok(endpoint.clone());
        }
        let url = format!(
            "{}{}",
            self.settings.url.trim_end_matches('/'),
            self.settings.card_path
        );
        let unreadable =
            |err: RpcError| Failure::retry(format!("cannot read the agent card at {url}: {err}"));
        let request = self
            .rpc
            .http
            .get(&url)
            .headers(self.rpc.headers.clone())
            .timeout(self.rpc.timeout);
        let card: a2a::AgentCard = fetch(request).await.map_err(unreadable)?;
        let interface = card
            .supported_interfaces
            .iter()
            .find(|i| {
                i.protocol_binding.eq_ignore_ascii_case(a2a::TRANSPORT_PROTOCOL_JSONRPC)
                    && i.protocol_version.starts_with('1')
            })
            .ok_or_else(|| {
                Failure::fatal(format!(
                    "the agent card at {url} offers no JSON-RPC interface of A2A 1.x, which Baton speaks"
                ))
            })?;
        let endpoint = Endpoint {
            rpc: interface.url.clone(),
            streaming: card.capabilities.streaming.unwrap_or(false),
        };
        *cached = Some(endpoint.clone());
        Ok(endpoint)
    }

    /// One JSON-RPC call; its result.
    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        endpoint: &Endpoint,
        method: &str,
        params: serde_json::Value,
    ) -> Result<T, Failure> {
        self.rpc
            .call(endpoint, method, params)
            .await
            .map_err(|err| Failure::retry(err.to_string()))
    }

    /// Runs `task` remotely and maps the remote task's end to an outcome.
    ///
    /// # Errors
    ///
    /// Retryable when the remote cannot be reached or its task failed;
    /// fatal when it rejected the task or cannot be spoken to.
    pub async fn run(&self, task: &BatonTask) -> Result<Outcome, AgentError> {
        crate::evaluating::calls_no_remote(task)?;
        let result = self.remote_task(task).await;
        if result.is_err() {
            // The card may have changed (a new address): read it again next time.
            *self.endpoint.lock().await = None;
        }
        self.outcome(result?)
    }

    async fn remote_task(&self, task: &BatonTask) -> Result<Task, Failure> {
        let endpoint = self.endpoint().await?;
        let context = task.envelope.id.to_string();
        let mut guard = Abandoned::new(&self.rpc, &endpoint, &context);
        let found = self.follow_or_send(task, &endpoint, &mut guard).await;
        // Returned, well or not: only a run dropped midway cancels its remote task.
        guard.disarm();
        found
    }

    /// Follows the remote task this envelope started, or starts one: the
    /// first, or a new one after a failed or cancelled one (a retry).
    async fn follow_or_send(
        &self,
        task: &BatonTask,
        endpoint: &Endpoint,
        guard: &mut Abandoned,
    ) -> Result<Task, Failure> {
        let context = task.envelope.id.to_string();
        let existing = self.existing(endpoint, &context).await;
        let tried = existing.len();
        let latest = existing.into_iter().max_by_key(|t| t.status.timestamp);
        if let Some(found) =
            latest.filter(|t| !matches!(t.status.state, TaskState::Failed | TaskState::Canceled))
        {
            tracing::info!(remote = %found.id, "following the remote task this envelope started");
            guard.watch(&found.id);
            return self.poll(endpoint, found).await;
        }
        let message_id = if tried == 0 {
            context.clone()
        } else {
            format!("{context}-{tried}")
        };
        let message = conversation(task, &context, message_id);
        if endpoint.streaming && self.settings.streaming {
            return self.stream(endpoint, message, guard).await;
        }
        let params = serde_json::json!({
            "message": message,
            "configuration": {"returnImmediately": true},
        });
        match self.call(endpoint, "SendMessage", params).await? {
            SendMessageResponse::Message(reply) => Ok(answered(&context, reply)),
            SendMessageResponse::Task(started) => {
                guard.watch(&started.id);
                self.poll(endpoint, started).await
            }
        }
    }

    /// The remote tasks of context `context` (none when listing fails).
    async fn existing(&self, endpoint: &Endpoint, context: &str) -> Vec<Task> {
        let params =
            serde_json::json!({"contextId": context, "historyLength": 0, "includeArtifacts": true});
        match self
            .call::<ListTasksResponse>(endpoint, "ListTasks", params)
            .await
        {
            Ok(listed) => listed.tasks,
            Err(failure) => {
                tracing::debug!(error = %failure.detail, "cannot list the remote tasks; starting one");
                Vec::new()
            }
        }
    }

    /// Polls `task` until it ends or needs input.
    async fn poll(&self, endpoint: &Endpoint, mut task: Task) -> Result<Task, Failure> {
        let every = Duration::from_millis(self.settings.poll_ms.max(10));
        while !at_rest(&task.status.state) {
            tokio::time::sleep(every).await;
            let params = serde_json::json!({"id": task.id});
            task = self.call(endpoint, "GetTask", params).await?;
        }
        Ok(task)
    }

    /// Sends `message` as a stream and reads it until the task ends or needs
    /// input; polls when the stream ends before.
    async fn stream(
        &self,
        endpoint: &Endpoint,
        message: Message,
        guard: &mut Abandoned,
    ) -> Result<Task, Failure> {
        let failed = |err: String| {
            Failure::retry(format!("SendStreamingMessage at {}: {err}", endpoint.rpc))
        };
        let response = self
            .rpc
            .request(
                endpoint,
                "SendStreamingMessage",
                serde_json::json!({"message": message}),
            )
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|err| failed(baton_nats::error_chain(&err)))?;
        let context = message.context_id.clone().unwrap_or_default();
        let mut events = sse_stream::SseStream::from_bytes_stream(response.bytes_stream());
        let mut task: Option<Task> = None;
        while let Some(event) = events.next().await {
            let event = event.map_err(|err| failed(baton_nats::error_chain(&err)))?;
            let Some(data) = event.data.filter(|d| !d.trim().is_empty()) else {
                continue;
            };
            let response: JsonRpcResponse = serde_json::from_str(&data)
                .map_err(|err| failed(format!("unreadable event: {err}")))?;
            let update: StreamResponse = result(response).map_err(|err| failed(err.to_string()))?;
            match update {
                StreamResponse::Message(reply) => return Ok(answered(&context, reply)),
                StreamResponse::Task(started) => {
                    guard.watch(&started.id);
                    task = Some(started);
                }
                StreamResponse::StatusUpdate(update) => {
                    let current = task.get_or_insert_with(|| empty(&update.task_id, &context));
                    current.status = update.status;
                }
                StreamResponse::ArtifactUpdate(update) => {
                    let current = task.get_or_insert_with(|| empty(&update.task_id, &context));
                    current
                        .artifacts
                        .get_or_insert_with(Vec::new)
                        .push(update.artifact);
                }
            }
            if task.as_ref().is_some_and(|t| at_rest(&t.status.state)) {
                break;
            }
        }
        let task =
            task.ok_or_else(|| failed("the stream ended before the task started".to_owned()))?;
        guard.watch(&task.id);
        if at_rest(&task.status.state) {
            Ok(task)
        } else {
            self.poll(endpoint, task).await
        }
    }

    /// The outcome of a remote task that ended or needs input.
    fn outcome(&self, task: Task) -> Result<Outcome, AgentError> {
        let said = task
            .status
            .message
            .as_ref()
            .map(text_of)
            .unwrap_or_default();
        let remote = &task.id;
        match task.status.state {
            TaskState::Completed => {
                let output = answer(&task).unwrap_or_else(|| Value::from(said.as_str()));
                Ok(Outcome::answer(output).into())
            }
            TaskState::InputRequired => match &self.ask {
                Some(agent) => Ok(Outcome::handoff(agent.clone(), Reason::InputRequired)
                    .say(if said.is_empty() {
                        format!("The remote agent needs input (task {remote})")
                    } else {
                        said
                    })
                    .into()),
                None => Err(AgentError::fatal(format!(
                    "the remote agent needs input (task {remote}: {said}) and the spec names no one to ask: set [a2a] input_required or fallback"
                ))),
            },
            TaskState::Failed => Err(AgentError::retryable(format!(
                "the remote task {remote} failed: {said}"
            ))),
            TaskState::Rejected => Err(AgentError::fatal(format!(
                "the remote agent rejected the task ({remote}): {said}"
            ))),
            TaskState::Canceled => Err(AgentError::fatal(format!(
                "the remote task {remote} was cancelled: {said}"
            ))),
            TaskState::AuthRequired => Err(AgentError::fatal(format!(
                "the remote agent needs authentication (task {remote}): set [a2a] token_env or api_key_env"
            ))),
            other => Err(AgentError::retryable(format!(
                "the remote task {remote} is {other:?}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2a::{Part, Role};

    fn with(state: TaskState, said: &str) -> Task {
        let mut task = empty("t1", "c1");
        task.status.state = state;
        task.status.message = Some(Message::new(Role::Agent, vec![Part::text(said)]));
        task
    }

    fn runner(ask: Option<&str>) -> A2aRunner {
        let spec: A2aSpec = toml::from_str(&format!(
            "url = \"http://127.0.0.1:1\"\n{}",
            ask.map(|a| format!("input_required = \"{a}\""))
                .unwrap_or_default()
        ))
        .unwrap();
        A2aRunner::new(&spec, None).unwrap()
    }

    #[test]
    fn remote_states_map_to_outcomes() {
        let r = runner(Some("human_support"));
        let mut done = with(TaskState::Completed, "");
        done.artifacts = Some(vec![a2a::Artifact {
            artifact_id: "a".into(),
            name: None,
            description: None,
            parts: vec![Part::text("42")],
            metadata: None,
            extensions: None,
        }]);
        assert!(matches!(r.outcome(done), Ok(Outcome::Answer(a)) if a.output == Value::from("42")));
        match r.outcome(with(TaskState::InputRequired, "which order?")) {
            Ok(Outcome::Handoff(h)) => {
                assert_eq!(h.reason, Reason::InputRequired);
                assert_eq!(h.update.messages[0].content, "which order?");
            }
            other => panic!("{other:?}"),
        }
        let failed = r.outcome(with(TaskState::Failed, "boom")).unwrap_err();
        assert!(
            matches!(&failed, AgentError::Retryable(d) if d.contains("boom")),
            "{failed}"
        );
        let rejected = r.outcome(with(TaskState::Rejected, "no")).unwrap_err();
        assert!(matches!(rejected, AgentError::Fatal(_)), "{rejected}");
        let nobody = runner(None)
            .outcome(with(TaskState::InputRequired, "?"))
            .unwrap_err();
        assert!(nobody.to_string().contains("input_required"), "{nobody}");
    }
}
