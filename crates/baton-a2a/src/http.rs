//! The HTTP side: the cards, and the two bindings' routes (JSON-RPC in
//! `rpc`, HTTP+JSON in `rest`), at the ingress and at each agent type's
//! base `/agents/NAME` (with or without a trailing slash).

use std::net::SocketAddr;

use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use baton_gateway::callers::{Caller, Callers};
use baton_proto::AgentName;

use crate::Gateway;

pub(crate) async fn serve(
    gateway: Gateway,
    listen: SocketAddr,
    callers: Option<Callers>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), crate::Error> {
    let calls = axum::Router::new()
        .route("/", post(ingress_call))
        .route("/agents/{name}", post(agent_call))
        .route("/agents/{name}/", post(agent_call))
        .merge(crate::rest::routes(""))
        .merge(crate::rest::routes("/agents/{name}"))
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
        .map_err(|err| crate::Error::serve("A2A server", err))?;
    tracing::info!(url = %format!("http://{local}"), "A2A server listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|err| crate::Error::serve("A2A server", err))
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
    let card = crate::card::card(
        "baton",
        description,
        &base(&gateway, &headers),
        skills,
        gateway.token_required,
    );
    crate::card::respond(&card, &headers)
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
        &url,
        vec![skill],
        gateway.token_required,
    );
    crate::card::respond(&card, &headers)
}

/// Agent type `name`, if it is exposed; else a 404 that says so.
async fn exposed(gateway: &Gateway, name: &str) -> Result<AgentName, Response> {
    gateway.agent(name).await.ok_or_else(|| {
        (
            StatusCode::NOT_FOUND,
            format!("no agent type {name:?} is served here\n"),
        )
            .into_response()
    })
}

async fn ingress_call(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Caller>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    crate::rpc::call(&gateway, None, &caller, &headers, uri.query(), &body).await
}

async fn agent_call(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let agent = match exposed(&gateway, &name).await {
        Ok(agent) => agent,
        Err(missing) => return missing,
    };
    crate::rpc::call(
        &gateway,
        Some(&agent),
        &caller,
        &headers,
        uri.query(),
        &body,
    )
    .await
}
