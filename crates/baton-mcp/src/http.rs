//! MCP over streamable HTTP, on `/mcp`: loopback by default, a bearer token
//! required beyond it (a tool call starts sessions), or named callers'
//! tokens, each caller's conversations its own.

use std::net::SocketAddr;

use baton_gateway::callers::{Callers, identify};
use baton_gateway::listen::{self, Exposure};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::{Error, Gateway};

/// Serves MCP over streamable HTTP on `listen` at `/mcp` until `shutdown`:
/// behind `token`, or behind the named callers of the file `callers` (one
/// `NAME TOKEN` per line), each of whom continues only the conversations
/// it started.
///
/// # Errors
///
/// When `listen` is beyond loopback without a token, cannot be bound, or
/// the callers file is unreadable or malformed.
pub async fn serve_http(
    gateway: Gateway,
    listen: SocketAddr,
    token: Option<String>,
    callers: Option<&std::path::Path>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let exposure = Exposure {
        what: "MCP",
        risk: "a tool call starts sessions",
        token_flag: "--access-token (or BATON_MCP_TOKEN)",
        loopback: "--http 127.0.0.1:8090",
    };
    let callers = match callers {
        Some(path) => Some(Callers::load(path)?),
        None => listen::token(listen, token.as_deref(), &exposure)?.map(Callers::one),
    };
    let ct = tokio_util::sync::CancellationToken::new();
    let mut config = StreamableHttpServerConfig::default();
    config.cancellation_token = ct.clone();
    if !listen.ip().is_loopback() {
        // Behind a token, any host name may reach it; on loopback the SDK's
        // default (loopback names only) guards against DNS rebinding.
        config = config.disable_allowed_hosts();
    }
    let service = StreamableHttpService::new(
        move || Ok(gateway.for_session()),
        LocalSessionManager::default().into(),
        config,
    );
    let app = axum::Router::new().nest_service("/mcp", service).layer(
        axum::middleware::from_fn_with_state(callers.map(std::sync::Arc::new), identify),
    );
    let listener = listen::bind(listen).await?;
    let local = listener
        .local_addr()
        .map_err(|err| Error::serve("MCP server", err))?;
    tracing::info!(url = %format!("http://{local}/mcp"), "MCP server listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            ct.cancel();
        })
        .await
        .map_err(|err| Error::serve("MCP server", err))
}
