//! MCP over streamable HTTP, on `/mcp`: loopback by default, a bearer token
//! required beyond it (a tool call starts sessions).

use std::net::SocketAddr;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::Gateway;

/// Serves MCP over streamable HTTP on `listen` at `/mcp` until `shutdown`.
///
/// # Errors
///
/// When `listen` is beyond loopback without a token, or cannot be bound.
pub async fn serve_http(
    gateway: Gateway,
    listen: SocketAddr,
    token: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let token = token.filter(|t| !t.is_empty());
    if token.is_none() && !listen.ip().is_loopback() {
        anyhow::bail!(
            "refusing to serve MCP on {listen} without a token: a tool call starts sessions. \
             Set --access-token (or BATON_MCP_TOKEN), or listen on loopback (--http 127.0.0.1:8090)"
        );
    }
    let ct = tokio_util::sync::CancellationToken::new();
    let mut config = StreamableHttpServerConfig::default();
    config.cancellation_token = ct.clone();
    if !listen.ip().is_loopback() {
        // Behind a token, any host name may reach it; on loopback the SDK's
        // default (loopback names only) guards against DNS rebinding.
        config = config.disable_allowed_hosts();
    }
    let service = StreamableHttpService::new(
        move || Ok(gateway.clone()),
        LocalSessionManager::default().into(),
        config,
    );
    let app = axum::Router::new().nest_service("/mcp", service).layer(
        axum::middleware::from_fn_with_state(token.map(std::sync::Arc::new), bearer),
    );
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|err| anyhow::anyhow!("cannot listen on {listen}: {err}"))?;
    let local = listener.local_addr()?;
    tracing::info!(url = %format!("http://{local}/mcp"), "MCP server listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            ct.cancel();
        })
        .await?;
    Ok(())
}

/// Refuses a request without `Authorization: Bearer <token>` when a token is set.
pub async fn bearer(
    State(token): State<Option<std::sync::Arc<String>>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(token) = token {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        // Digests compared, so the time taken says nothing about the token.
        let digest = |text: &str| <sha2::Sha256 as sha2::Digest>::digest(text.as_bytes());
        let same = given.is_some_and(|given| digest(given) == digest(token.as_str()));
        if !same {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "this server needs its token: Authorization: Bearer <token>\n",
            )
                .into_response();
        }
    }
    next.run(request).await
}
