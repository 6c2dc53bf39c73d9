//! Logging and trace context: `tracing` to stderr (filtered by `RUST_LOG`),
//! with OpenTelemetry span contexts so `traceparent` is created and propagated.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, fmt};

/// Keeps the tracer provider alive for the process.
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}

/// Installs the subscriber; `default_level` applies when `RUST_LOG` is unset.
pub fn init(default_level: &str) -> Telemetry {
    let provider = SdkTracerProvider::builder().build();
    let tracer = provider.tracer("baton");
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let _ = tracing_subscriber::registry()
        .with(
            fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_target(false),
        )
        .with(tracing_opentelemetry::layer().with_tracer(tracer))
        .with(filter)
        .try_init();
    Telemetry { provider }
}
