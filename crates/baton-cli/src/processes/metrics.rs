//! Where a long-running process serves its metrics.

use std::net::SocketAddr;

use clap::Args;

/// Metrics for Prometheus. Traces and an OTLP push of the metrics are set
/// with the standard `OTEL_*` variables (see docs/operators/observability.md).
#[derive(Debug, Args)]
#[command(next_help_heading = "Observability")]
pub struct MetricsArgs {
    /// Serve Prometheus metrics on http://ADDR/metrics (and a liveness probe on /healthz),
    /// e.g. 127.0.0.1:9464; 0.0.0.0:9464 to be scraped from other hosts [default: not served]
    #[arg(long, env = "BATON_METRICS_ADDR", value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
}
