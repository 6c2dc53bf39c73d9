//! `--metrics-addr`: an HTTP endpoint with the process's metrics in the
//! Prometheus text format (`/metrics`) and a liveness probe (`/healthz`).
//! Read-only, so it needs no credentials; it listens only where told.

use std::net::SocketAddr;

use anyhow::Context as _;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus::Encoder as _;

/// Serves `registry` on `addr` until the process ends; returns once the
/// address is bound.
pub async fn metrics(addr: SocketAddr, registry: prometheus::Registry) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("cannot listen on --metrics-addr {addr} (BATON_METRICS_ADDR): is it in use?")
    })?;
    let bound = listener.local_addr().unwrap_or(addr);
    let app = axum::Router::new()
        .route("/metrics", get(move || scrape(registry.clone())))
        .route("/healthz", get(|| async { "ok\n" }));
    tracing::info!(addr = %bound, "serving metrics on /metrics");
    tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app).await {
            tracing::error!(error = %err, "the metrics endpoint stopped");
        }
    });
    Ok(())
}

async fn scrape(registry: prometheus::Registry) -> impl IntoResponse {
    let encoder = prometheus::TextEncoder::new();
    let mut text = Vec::new();
    match encoder.encode(&registry.gather(), &mut text) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, encoder.format_type().to_owned())],
            text,
        ),
        Err(err) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain".to_owned())],
            format!("cannot encode the metrics: {err}\n").into_bytes(),
        ),
    }
}
