//! The JSON-RPC binding: one call per POST, answered as JSON or, for the
//! streaming methods, as server-sent events (one JSON-RPC response each).

use std::convert::Infallible;

use a2a::{
    CancelTaskRequest, GetTaskRequest, JsonRpcError, JsonRpcId, JsonRpcRequest, JsonRpcResponse,
    ListTasksRequest, SendMessageRequest, SubscribeToTaskRequest, error_code, methods,
};
use axum::Json;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use baton_gateway::callers::Caller;
use baton_proto::AgentName;
use futures::StreamExt;
use serde::de::DeserializeOwned;

use crate::Gateway;
use crate::calls::Updates;
use crate::errors::error;

fn reply(id: JsonRpcId, result: Result<serde_json::Value, JsonRpcError>) -> Response {
    let response = match result {
        Ok(value) => JsonRpcResponse::success(id, value),
        Err(err) => JsonRpcResponse::error(id, err),
    };
    Json(response).into_response()
}

fn params<T: DeserializeOwned>(request: &JsonRpcRequest) -> Result<T, JsonRpcError> {
    let value = crate::errors::camel(request.params.clone().unwrap_or_default());
    serde_json::from_value(value).map_err(|err| {
        error(
            error_code::INVALID_PARAMS,
            format!("invalid params for {}: {err}", request.method),
        )
    })
}

fn json<T: serde::Serialize>(value: &T) -> Result<serde_json::Value, JsonRpcError> {
    serde_json::to_value(value).map_err(|err| error(error_code::INTERNAL_ERROR, err.to_string()))
}

/// One JSON-RPC call.
pub(crate) async fn call(
    gateway: &Gateway,
    target: Option<&AgentName>,
    caller: &Caller,
    headers: &HeaderMap,
    query: Option<&str>,
    body: &[u8],
) -> Response {
    if !crate::errors::is_json(headers) {
        let refused = error(
            error_code::CONTENT_TYPE_NOT_SUPPORTED,
            "a JSON-RPC call is sent as Content-Type: application/json",
        );
        return reply(JsonRpcId::Null, Err(refused));
    }
    let request: JsonRpcRequest = match serde_json::from_slice(body) {
        Ok(request) => request,
        Err(err) => {
            let code = if serde_json::from_slice::<serde_json::Value>(body).is_ok() {
                error_code::INVALID_REQUEST
            } else {
                error_code::PARSE_ERROR
            };
            return reply(JsonRpcId::Null, Err(error(code, err.to_string())));
        }
    };
    let id = request.id.clone();
    if let Err(refused) = crate::errors::version(headers, query) {
        return reply(id, Err(refused));
    }
    let streamed = match request.method.as_str() {
        methods::SEND_STREAMING_MESSAGE => match params::<SendMessageRequest>(&request) {
            Ok(send) => gateway.send_streaming(target, &send, caller).await,
            Err(err) => Err(err),
        },
        methods::SUBSCRIBE_TO_TASK => match params::<SubscribeToTaskRequest>(&request) {
            Ok(subscribe) => gateway.resubscribe(&subscribe.id, caller).await,
            Err(err) => Err(err),
        },
        _ => return reply(id, unary(gateway, target, caller, &request).await),
    };
    match streamed {
        Ok(stream) => sse(id, stream),
        Err(err) => reply(id, Err(err)),
    }
}

/// The calls answered with one JSON response.
async fn unary(
    gateway: &Gateway,
    target: Option<&AgentName>,
    caller: &Caller,
    request: &JsonRpcRequest,
) -> Result<serde_json::Value, JsonRpcError> {
    match request.method.as_str() {
        methods::SEND_MESSAGE => {
            let send: SendMessageRequest = params(request)?;
            json(&gateway.send(target, &send, caller).await?)
        }
        methods::GET_TASK => {
            let get: GetTaskRequest = params(request)?;
            json(&gateway.get(&get.id, get.history_length, caller).await?)
        }
        methods::LIST_TASKS => {
            let list: ListTasksRequest = params(request)?;
            json(&gateway.list(&list, caller).await?)
        }
        methods::CANCEL_TASK => {
            let cancel: CancelTaskRequest = params(request)?;
            json(&gateway.cancel(&cancel.id, caller).await?)
        }
        methods::CREATE_PUSH_CONFIG
        | methods::GET_PUSH_CONFIG
        | methods::LIST_PUSH_CONFIGS
        | methods::DELETE_PUSH_CONFIG => Err(crate::errors::no_push()),
        methods::GET_EXTENDED_AGENT_CARD => Err(crate::errors::no_extended_card()),
        other => Err(error(
            error_code::METHOD_NOT_FOUND,
            format!("no method {other:?}"),
        )),
    }
}

/// A stream of responses as server-sent events, each a JSON-RPC response
/// with the call's id; an error ends it.
fn sse(id: JsonRpcId, stream: Updates) -> Response {
    let events = stream.map(move |item| {
        let response = match item {
            Ok(update) => match serde_json::to_value(&update) {
                Ok(value) => JsonRpcResponse::success(id.clone(), value),
                Err(err) => JsonRpcResponse::error(
                    id.clone(),
                    error(error_code::INTERNAL_ERROR, err.to_string()),
                ),
            },
            Err(err) => JsonRpcResponse::error(id.clone(), err),
        };
        let data = serde_json::to_string(&response).unwrap_or_default();
        Ok::<_, Infallible>(SseEvent::default().data(data))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}
