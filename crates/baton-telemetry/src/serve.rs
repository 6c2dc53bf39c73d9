//! `--metrics-addr`: an HTTP endpoint with the process's metrics in the
//! Prometheus text format (`/metrics`), a liveness probe (`/healthz`: the
//! process answers) and a readiness probe (`/readyz`: connected to NATS,
//! and, for a worker or the router, pulling its messages and not
//! draining; a worker of a retired version is not ready, and says so). Read-only, so it needs no credentials; it listens only where
//! told.

use std::net::SocketAddr;
use std::sync::OnceLock;

use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus::Encoder as _;

/// Serves `registry` on `addr` until the process ends; returns once the
/// address is bound.
///
/// # Errors
///
/// When `addr` cannot be bound, saying so.
pub async fn metrics(addr: SocketAddr, registry: prometheus::Registry) -> Result<(), crate::Error> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|err| {
        crate::Error::with_source(
            crate::ErrorKind::Listen,
            format!("cannot listen on --metrics-addr {addr} (BATON_METRICS_ADDR): is it in use?"),
            err,
        )
    })?;
    let bound = listener.local_addr().unwrap_or(addr);
    let app = axum::Router::new()
        .route("/metrics", get(move || scrape(registry.clone())))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready));
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

/// What readiness watches: the connection, and whether the process must
/// also be serving (`baton_nats::health`).
struct Watched {
    client: async_nats::Client,
    serves: bool,
}

static WATCHED: OnceLock<Watched> = OnceLock::new();

/// Makes `/readyz` follow `client`'s connection and, when `serves`, the
/// worker's or router's `baton_nats::health::serving`.
pub fn watch(client: &async_nats::Client, serves: bool) {
    let _ = WATCHED.set(Watched {
        client: client.clone(),
        serves,
    });
}

async fn ready() -> (StatusCode, &'static str) {
    let Some(watched) = WATCHED.get() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "starting\n");
    };
    if watched.client.connection_state() != async_nats::connection::State::Connected {
        return (StatusCode::SERVICE_UNAVAILABLE, "not connected to NATS\n");
    }
    if let Some(why) = baton_nats::health::retired() {
        return (StatusCode::SERVICE_UNAVAILABLE, why);
    }
    if watched.serves && !baton_nats::health::serving() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not pulling messages (starting or draining)\n",
        );
    }
    (StatusCode::OK, "ready\n")
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn a_taken_address_is_named_and_a_free_one_serves_probes_and_metrics() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let registry = prometheus::Registry::new();
        let err = metrics(addr, registry.clone())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&addr.to_string()) && err.contains("BATON_METRICS_ADDR"),
            "{err}"
        );
        drop(taken);
        let counter = prometheus::IntCounter::new("baton_test_total", "a test counter").unwrap();
        registry.register(Box::new(counter.clone())).unwrap();
        counter.inc_by(3);
        metrics(addr, registry).await.unwrap();
        let health = get(addr, "/healthz").await;
        assert!(
            health.starts_with("HTTP/1.1 200") && health.ends_with("ok\n"),
            "{health}"
        );
        let scraped = get(addr, "/metrics").await;
        assert!(scraped.contains("baton_test_total 3"), "{scraped}");
    }
}
