//! MCP over streamable HTTP, on `/mcp`: loopback by default, a bearer token
//! required beyond it (a tool call starts sessions).

use std::net::SocketAddr;

use baton_gateway::listen::{self, Exposure};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::{Error, Gateway};

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
) -> Result<(), Error> {
    let exposure = Exposure {
        what: "MCP",
        risk: "a tool call starts sessions",
        token_flag: "--access-token (or BATON_MCP_TOKEN)",
        loopback: "--http 127.0.0.1:8090",
    };
    let token = listen::token(listen, token.as_deref(), &exposure)?;
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
        axum::middleware::from_fn_with_state(token.map(std::sync::Arc::new), listen::bearer),
    );
    let listener = listen::bind(listen).await?;
    let local = listener.local_addr().map_err(Error::Serve)?;
    tracing::info!(url = %format!("http://{local}/mcp"), "MCP server listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            ct.cancel();
        })
        .await
        .map_err(Error::Serve)
}
