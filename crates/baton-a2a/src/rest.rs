//! The HTTP+JSON binding (A2A 1.0, section 11): the same operations as
//! JSON-RPC at REST paths, at the ingress (`/message:send`, ...) and at
//! each agent type's own base (`/agents/NAME/message:send`, ...). Errors
//! are AIP-193 bodies with the spec's statuses; streams are server-sent
//! events whose data are the stream responses themselves.

use std::convert::Infallible;

use a2a::{JsonRpcError, ListTasksRequest, SendMessageRequest, error_code};
use axum::Json;
use axum::extract::{Extension, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use baton_gateway::callers::Caller;
use baton_proto::AgentName;
use futures::StreamExt;

use crate::Gateway;
use crate::calls::Updates;
use crate::errors::{error, rest};

/// The REST routes under `base` (`""` for the ingress, `/agents/{name}`).
pub(crate) fn routes(base: &str) -> axum::Router<Gateway> {
    axum::Router::new()
        .route(&format!("{base}/message:send"), post(send))
        .route(&format!("{base}/message:stream"), post(stream))
        .route(&format!("{base}/tasks"), get(list))
        .route(&format!("{base}/tasks/{{id}}"), get(task).post(task_action))
        .route(
            &format!("{base}/tasks/{{id}}/pushNotificationConfigs"),
            any(no_push),
        )
        .route(
            &format!("{base}/tasks/{{id}}/pushNotificationConfigs/{{config}}"),
            any(no_push),
        )
        .route(&format!("{base}/extendedAgentCard"), get(no_card))
}

/// What every REST call checks first: the agent type the path names (if
/// any) is exposed, the version is spoken, and a body is JSON.
async fn prelude(
    gateway: &Gateway,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    body: bool,
) -> Result<Option<AgentName>, Response> {
    let target = match uri.path().strip_prefix("/agents/") {
        Some(tail) => {
            let name = tail.split('/').next().unwrap_or_default();
            match gateway.agent(name).await {
                Some(agent) => Some(agent),
                None => {
                    let missing = error(
                        error_code::METHOD_NOT_FOUND,
                        format!("no agent type {name:?} is served here"),
                    );
                    return Err(rest(&missing));
                }
            }
        }
        None => None,
    };
    crate::errors::version(headers, uri.query()).map_err(|err| rest(&err))?;
    if body && !crate::errors::is_json(headers) {
        let refused = error(
            error_code::CONTENT_TYPE_NOT_SUPPORTED,
            "an HTTP+JSON request body is sent as Content-Type: application/json",
        );
        return Err(rest(&refused));
    }
    Ok(target)
}

/// The request body as `T`.
/// A message request's target and body, or the answer that refuses it.
async fn message(
    gateway: &Gateway,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(Option<AgentName>, SendMessageRequest), Response> {
    let target = prelude(gateway, uri, headers, true).await?;
    let request = decode(body).map_err(|err| rest(&err))?;
    Ok((target, request))
}

fn decode<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, JsonRpcError> {
    let value = serde_json::from_slice(body).map(crate::errors::camel);
    value.and_then(serde_json::from_value).map_err(|err| {
        error(
            error_code::INVALID_PARAMS,
            format!("invalid request body: {err}"),
        )
    })
}

/// An operation's answer as JSON, or its error.
fn answer<T: serde::Serialize>(result: Result<T, JsonRpcError>) -> Response {
    match result {
        Ok(value) => Json(value).into_response(),
        Err(err) => rest(&err),
    }
}

async fn send(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Caller>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (target, request) = match message(&gateway, &uri, &headers, &body).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    answer(gateway.send(target.as_ref(), &request, &caller).await)
}

async fn stream(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Caller>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (target, request) = match message(&gateway, &uri, &headers, &body).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    match gateway
        .send_streaming(target.as_ref(), &request, &caller)
        .await
    {
        Ok(updates) => sse(updates),
        Err(err) => rest(&err),
    }
}

/// The task id of a path `.../tasks/ID[:verb]`, and the verb.
fn task_of(uri: &axum::http::Uri) -> (String, Option<String>) {
    let last = uri.path().rsplit('/').next().unwrap_or_default();
    match last.split_once(':') {
        Some((id, verb)) => (id.to_owned(), Some(verb.to_owned())),
        None => (last.to_owned(), None),
    }
}

/// The value of query parameter `key`.
fn query<'a>(uri: &'a axum::http::Uri, key: &str) -> Option<&'a str> {
    uri.query()?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find_map(|(k, v)| (k == key).then_some(v))
}

async fn task(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Caller>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = prelude(&gateway, &uri, &headers, false).await {
        return refused;
    }
    let (id, _) = task_of(&uri);
    let asked = query(&uri, "historyLength").or_else(|| query(&uri, "history_length"));
    let history = match asked.map(str::parse::<i32>) {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => {
            return rest(&error(
                error_code::INVALID_PARAMS,
                "historyLength is a number",
            ));
        }
    };
    answer(gateway.get(&id, history, &caller).await)
}

/// `POST /tasks/ID:cancel` and `POST /tasks/ID:subscribe`.
async fn task_action(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Caller>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = prelude(&gateway, &uri, &headers, false).await {
        return refused;
    }
    match task_of(&uri) {
        (id, Some(verb)) if verb == "cancel" => answer(gateway.cancel(&id, &caller).await),
        (id, Some(verb)) if verb == "subscribe" => match gateway.resubscribe(&id, &caller).await {
            Ok(updates) => sse(updates),
            Err(err) => rest(&err),
        },
        _ => rest(&error(
            error_code::METHOD_NOT_FOUND,
            "POST /tasks/ID:cancel or /tasks/ID:subscribe",
        )),
    }
}

async fn list(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Caller>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = prelude(&gateway, &uri, &headers, false).await {
        return refused;
    }
    let request = match list_request(uri.query().unwrap_or_default()) {
        Ok(request) => request,
        Err(err) => return rest(&err),
    };
    answer(gateway.list(&request, &caller).await)
}

/// A `ListTasksRequest` from query parameters (camelCase names; numbers,
/// booleans and the state as strings, the state with or without its
/// `TASK_STATE_` prefix).
fn list_request(query: &str) -> Result<ListTasksRequest, JsonRpcError> {
    let mut fields = serde_json::Map::new();
    for (key, value) in query.split('&').filter_map(|pair| pair.split_once('=')) {
        let value = percent_decode(value);
        let key = crate::errors::camel_case(key);
        let field = match key.as_str() {
            "pageSize" | "historyLength" => value
                .parse::<i64>()
                .map(serde_json::Value::from)
                .map_err(|_| error(error_code::INVALID_PARAMS, format!("{key} is a number")))?,
            "includeArtifacts" => serde_json::Value::Bool(value == "true"),
            "status" if !value.starts_with("TASK_STATE_") => {
                serde_json::Value::from(format!("TASK_STATE_{}", value.to_ascii_uppercase()))
            }
            _ => serde_json::Value::from(value),
        };
        fields.insert(key, field);
    }
    serde_json::from_value(serde_json::Value::Object(fields))
        .map_err(|err| error(error_code::INVALID_PARAMS, format!("invalid query: {err}")))
}

/// `%XX` in a query value.
fn percent_decode(value: &str) -> String {
    percent_encoding::percent_decode_str(value)
        .decode_utf8_lossy()
        .into_owned()
}

async fn no_push(uri: axum::http::Uri, headers: HeaderMap) -> Response {
    if let Err(refused) = crate::errors::version(&headers, uri.query()) {
        return rest(&refused);
    }
    rest(&crate::errors::no_push())
}

async fn no_card() -> Response {
    rest(&crate::errors::no_extended_card())
}

/// Stream responses as server-sent events; an error is the last event,
/// `{"error": ...}` as AIP-193 gives it.
fn sse(updates: Updates) -> Response {
    let events = updates.map(|item| {
        let data = match item {
            Ok(update) => serde_json::to_string(&update).unwrap_or_default(),
            Err(err) => crate::errors::rest_body(&err).1.to_string(),
        };
        Ok::<_, Infallible>(SseEvent::default().data(data))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_queries_read_as_requests() {
        let request =
            list_request("contextId=c%2D1&status=working&pageSize=2&includeArtifacts=true")
                .unwrap();
        assert_eq!(request.context_id.as_deref(), Some("c-1"));
        assert_eq!(request.status, Some(a2a::TaskState::Working));
        assert_eq!(request.page_size, Some(2));
        assert_eq!(request.include_artifacts, Some(true));
        assert!(list_request("pageSize=two").is_err());
    }

    #[test]
    fn task_paths_give_the_id_and_verb() {
        let uri: axum::http::Uri = "/agents/a/tasks/123:cancel".parse().unwrap();
        assert_eq!(task_of(&uri), ("123".to_owned(), Some("cancel".to_owned())));
        let uri: axum::http::Uri = "/tasks/123?historyLength=1".parse().unwrap();
        assert_eq!(task_of(&uri), ("123".to_owned(), None));
        assert_eq!(query(&uri, "historyLength"), Some("1"));
    }
}
