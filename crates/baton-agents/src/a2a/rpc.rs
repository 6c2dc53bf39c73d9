//! JSON-RPC calls to the remote agent, and the guard that cancels a remote
//! task when its run is abandoned.

use std::time::Duration;

use a2a::{JsonRpcId, JsonRpcRequest, JsonRpcResponse, ListTasksResponse, Task};

use super::Endpoint;
use super::messages::at_rest;

/// How JSON-RPC calls reach the remote agent: the client, the credential
/// headers and the timeout of one request.
#[derive(Clone)]
pub(super) struct Rpc {
    pub(super) http: reqwest::Client,
    pub(super) headers: reqwest::header::HeaderMap,
    pub(super) timeout: Duration,
}

impl Rpc {
    pub(super) fn request(
        &self,
        endpoint: &Endpoint,
        method: &str,
        params: serde_json::Value,
    ) -> reqwest::RequestBuilder {
        let id = JsonRpcId::String(uuid::Uuid::new_v4().to_string());
        let body = JsonRpcRequest::new(id, method, Some(params));
        self.http
            .post(&endpoint.rpc)
            .headers(self.headers.clone())
            .timeout(self.timeout)
            .json(&body)
    }

    /// One JSON-RPC call; its result, or what went wrong.
    pub(super) async fn call<T: serde::de::DeserializeOwned>(
        &self,
        endpoint: &Endpoint,
        method: &str,
        params: serde_json::Value,
    ) -> Result<T, RpcError> {
        let failed = |err: RpcError| RpcError::At {
            method: method.to_owned(),
            rpc: endpoint.rpc.clone(),
            error: Box::new(err),
        };
        let response: JsonRpcResponse = fetch(self.request(endpoint, method, params))
            .await
            .map_err(failed)?;
        result(response).map_err(failed)
    }

    /// Cancels the remote tasks a dropped run left: `task`, or, when the run
    /// was dropped before it learnt the task's id, every task not at rest of
    /// `context` (the envelope's).
    pub(super) async fn cancel_abandoned(
        self,
        endpoint: Endpoint,
        context: String,
        task: Option<String>,
    ) {
        let tasks = match task {
            Some(task) => vec![task],
            None => {
                let params = serde_json::json!({"contextId": context, "historyLength": 0});
                match self
                    .call::<ListTasksResponse>(&endpoint, "ListTasks", params)
                    .await
                {
                    Ok(listed) => listed
                        .tasks
                        .into_iter()
                        .filter(|t| !at_rest(&t.status.state))
                        .map(|t| t.id)
                        .collect(),
                    Err(err) => {
                        tracing::warn!(error = %err, "cannot find the abandoned remote task");
                        Vec::new()
                    }
                }
            }
        };
        for task in tasks {
            let params = serde_json::json!({"id": task});
            match self.call::<Task>(&endpoint, "CancelTask", params).await {
                Ok(_) => tracing::info!(remote = %task, "cancelled the abandoned remote task"),
                Err(err) => {
                    tracing::warn!(error = %err, remote = %task, "cannot cancel the abandoned remote task");
                }
            }
        }
    }
}

/// Cancels the remote task when the run is abandoned (its future dropped:
/// the session was cancelled, or the run timed out) before it returned.
pub(super) struct Abandoned {
    rpc: Rpc,
    endpoint: Endpoint,
    context: String,
    task: Option<String>,
    armed: bool,
}

impl Abandoned {
    pub(super) fn new(rpc: &Rpc, endpoint: &Endpoint, context: &str) -> Self {
        Self {
            rpc: rpc.clone(),
            endpoint: endpoint.clone(),
            context: context.to_owned(),
            task: None,
            armed: true,
        }
    }

    pub(super) fn watch(&mut self, task: &str) {
        self.task = Some(task.to_owned());
    }

    pub(super) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (endpoint, context, task) = (
            self.endpoint.clone(),
            std::mem::take(&mut self.context),
            self.task.take(),
        );
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(self.rpc.clone().cancel_abandoned(endpoint, context, task));
        }
    }
}

/// Sends `request` and reads a successful answer's JSON body.
pub(super) async fn fetch<T: serde::de::DeserializeOwned>(
    request: reqwest::RequestBuilder,
) -> Result<T, RpcError> {
    request
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(RpcError::Http)?
        .json()
        .await
        .map_err(RpcError::Http)
}

/// The result of a JSON-RPC response, or its error as text.
pub(super) fn result<T: serde::de::DeserializeOwned>(
    response: JsonRpcResponse,
) -> Result<T, RpcError> {
    if let Some(err) = response.error {
        return Err(RpcError::Remote(err));
    }
    let value = response.result.ok_or(RpcError::NoResult)?;
    serde_json::from_value(value).map_err(RpcError::Unexpected)
}

/// Why a JSON-RPC call to the remote agent brought no result.
#[derive(Debug, thiserror::Error)]
pub(super) enum RpcError {
    /// The request was not answered, or not with JSON.
    #[error("{}", baton_nats::error_chain(.0))]
    Http(reqwest::Error),
    /// The remote agent answered with a JSON-RPC error.
    #[error("error {}: {}", .0.code, .0.message)]
    Remote(a2a::JsonRpcError),
    /// The response has neither a result nor an error.
    #[error("a response without a result")]
    NoResult,
    /// The result is not what the method returns.
    #[error("an unexpected result: {0}")]
    Unexpected(serde_json::Error),
    /// A call of `method` at `rpc` failed.
    #[error("{method} at {rpc}: {error}")]
    At {
        method: String,
        rpc: String,
        error: Box<RpcError>,
    },
}
