//! The HTTP side: cards, and JSON-RPC calls answered as JSON or, for the
//! streaming methods, as server-sent events (one JSON-RPC response each).

use std::convert::Infallible;
use std::net::SocketAddr;

use a2a::{
    CancelTaskRequest, GetTaskRequest, JsonRpcError, JsonRpcId, JsonRpcRequest, JsonRpcResponse,
    ListTasksRequest, SendMessageRequest, SendMessageResponse, StreamResponse,
    SubscribeToTaskRequest, error_code, methods,
};
use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use baton_gateway::callers::{Caller, Callers};
use baton_proto::AgentName;
use futures::{Stream, StreamExt};
use serde::de::DeserializeOwned;

use crate::Gateway;
use crate::ops::error;

pub(crate) async fn serve(
    gateway: Gateway,
    listen: SocketAddr,
    callers: Option<Callers>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), crate::Error> {
    let calls = axum::Router::new()
        .route("/", post(ingress_call))
        .route("/agents/{name}", post(agent_call))
        .route_layer(axum::middleware::from_fn_with_state(
            callers.map(std::sync::Arc::new),
            baton_gateway::callers::identify,
        ));
    let app = axum::Router::new()
        .route("/.well-known/agent-card.json", get(ingress_card))
        .route(
            "/agents/{name}/.well-known/agent-card.json",
            get(agent_card),
        )
        .merge(calls)
        .with_state(gateway);
    let listener = baton_gateway::listen::bind(listen).await?;
    let local = listener
        .local_addr()
        .map_err(|err| crate::Error::Serve("A2A server", err))?;
    tracing::info!(url = %format!("http://{local}"), "A2A server listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|err| crate::Error::Serve("A2A server", err))
}

/// The base URL of this gateway as the client reached it.
fn base(gateway: &Gateway, headers: &HeaderMap) -> String {
    if let Some(url) = &gateway.public_url {
        return url.clone();
    }
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    format!("http://{host}")
}

async fn ingress_card(State(gateway): State<Gateway>, headers: HeaderMap) -> Response {
    let skills = gateway
        .exposed()
        .await
        .iter()
        .map(|(name, found)| crate::card::skill(name, found.as_ref()))
        .collect();
    let description = "A Baton deployment: a task goes to its ingress, and its agents hand it \
                       on until one answers (each skill is an agent type)"
        .to_owned();
    let url = format!("{}/", base(&gateway, &headers));
    let card = crate::card::card("baton", description, url, skills, gateway.token_required);
    Json(card).into_response()
}

async fn agent_card(
    State(gateway): State<Gateway>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let agent = match exposed(&gateway, &name).await {
        Ok(agent) => agent,
        Err(missing) => return missing,
    };
    let found = gateway
        .exposed()
        .await
        .into_iter()
        .find(|(n, _)| n == agent.as_str())
        .and_then(|(_, found)| found);
    let skill = crate::card::skill(agent.as_str(), found.as_ref());
    let url = format!("{}/agents/{agent}", base(&gateway, &headers));
    let card = crate::card::card(
        agent.as_str(),
        skill.description.clone(),
        url,
        vec![skill],
        gateway.token_required,
    );
    Json(card).into_response()
}

/// Agent type `name`, if it is exposed; else a 404 that says so.
async fn exposed(gateway: &Gateway, name: &str) -> Result<AgentName, Response> {
    match AgentName::new(name) {
        Ok(agent) if gateway.exposes(&agent).await => Ok(agent),
        _ => Err((
            StatusCode::NOT_FOUND,
            format!("no agent type {name:?} is served here\n"),
        )
            .into_response()),
    }
}

async fn ingress_call(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    call(&gateway, None, &caller, &headers, &body).await
}

async fn agent_call(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let agent = match exposed(&gateway, &name).await {
        Ok(agent) => agent,
        Err(missing) => return missing,
    };
    call(&gateway, Some(&agent), &caller, &headers, &body).await
}

fn reply(id: JsonRpcId, result: Result<serde_json::Value, JsonRpcError>) -> Response {
    let response = match result {
        Ok(value) => JsonRpcResponse::success(id, value),
        Err(err) => JsonRpcResponse::error(id, err),
    };
    Json(response).into_response()
}

fn params<T: DeserializeOwned>(request: &JsonRpcRequest) -> Result<T, JsonRpcError> {
    let value = request.params.clone().unwrap_or_default();
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
async fn call(
    gateway: &Gateway,
    target: Option<&AgentName>,
    caller: &Caller,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
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
    if let Some(version) = headers
        .get(a2a::SVC_PARAM_VERSION)
        .and_then(|v| v.to_str().ok())
        && !version.is_empty()
        && !version.starts_with("1.")
        && version != "1"
    {
        let message = format!("A2A version {version} is not supported; this server speaks 1.0");
        return reply(id, Err(error(error_code::VERSION_NOT_SUPPORTED, message)));
    }
    match request.method.as_str() {
        methods::SEND_STREAMING_MESSAGE => {
            let result = match params::<SendMessageRequest>(&request) {
                Ok(send) => gateway.start(target, &send, true, caller).await,
                Err(err) => Err(err),
            };
            match result {
                Ok(begun) => sse(id, gateway.stream(begun.session, begun.context, begun.skip)),
                Err(err) => reply(id, Err(err)),
            }
        }
        methods::SUBSCRIBE_TO_TASK => {
            let result = match params::<SubscribeToTaskRequest>(&request) {
                Ok(subscribe) => gateway.subscribe(&subscribe.id, caller).await,
                Err(err) => Err(err),
            };
            match result {
                Ok(stream) => sse(id, stream),
                Err(err) => reply(id, Err(err)),
            }
        }
        _ => reply(id, unary(gateway, target, caller, &request).await),
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
            let crate::ops::Begun {
                session,
                context,
                skip,
            } = gateway.start(target, &send, false, caller).await?;
            let immediately = send
                .configuration
                .as_ref()
                .and_then(|c| c.return_immediately)
                .unwrap_or(false);
            let last = if immediately {
                None
            } else {
                gateway.wait(session, skip, gateway.timeout).await?
            };
            if last.as_ref().is_some_and(|end| end.kind.is_terminal()) {
                gateway.settle_soon(&context);
            }
            let task = gateway.task(session, &context, last.as_ref(), true).await;
            json(&SendMessageResponse::Task(task))
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
        | methods::DELETE_PUSH_CONFIG => Err(error(
            error_code::PUSH_NOTIFICATION_NOT_SUPPORTED,
            "push notifications are not supported: stream with SendStreamingMessage or SubscribeToTask",
        )),
        methods::GET_EXTENDED_AGENT_CARD => Err(error(
            error_code::EXTENDED_CARD_NOT_CONFIGURED,
            "there is no extended card: the public card is the whole card",
        )),
        other => Err(error(
            error_code::METHOD_NOT_FOUND,
            format!("no method {other:?}"),
        )),
    }
}

/// A stream of responses as server-sent events, each a JSON-RPC response
/// with the call's id; an error ends it.
fn sse(
    id: JsonRpcId,
    stream: impl Stream<Item = Result<StreamResponse, JsonRpcError>> + Send + 'static,
) -> Response {
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
