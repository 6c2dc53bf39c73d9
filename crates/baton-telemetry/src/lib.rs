//! Logs, traces and metrics.
//!
//! - Logs: `tracing` to stderr, filtered by `RUST_LOG`, with the plain
//!   fields of spans and events (the dotted ones are OpenTelemetry's).
//! - Traces: OpenTelemetry spans, exported over OTLP/HTTP when the standard
//!   `OTEL_*` variables ask for it (an endpoint, or `OTEL_TRACES_EXPORTER=otlp`),
//!   and only then built. `traceparent` is carried across hops either way: a
//!   process that does not export passes the incoming one on.
//!   The sampler, service name, resource attributes, headers and timeout
//!   come from the same variables, read by the OpenTelemetry SDK.
//! - Metrics: the OpenTelemetry metrics of `baton_nats::meter`, kept for
//!   a Prometheus scrape when `--metrics-addr` is given, and pushed over
//!   OTLP/HTTP when the `OTEL_*` variables ask for it.

mod fields;
mod http;
pub mod serve;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, fmt};

/// Keeps the providers alive for the process, and flushes them at the end.
pub struct Telemetry {
    tracer: SdkTracerProvider,
    meter: Option<SdkMeterProvider>,
    /// Where a Prometheus scrape reads the metrics, when they are served.
    pub prometheus: Option<prometheus::Registry>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        let _ = self.tracer.shutdown();
        if let Some(meter) = &self.meter {
            let _ = meter.shutdown();
        }
    }
}

/// What a process wants of telemetry.
pub struct Wanted<'a> {
    /// The log level when `RUST_LOG` is unset.
    pub level: &'a str,
    /// `service.name` when neither `OTEL_SERVICE_NAME` nor
    /// `OTEL_RESOURCE_ATTRIBUTES` names one.
    pub service: &'a str,
    /// Whether the metrics are served to Prometheus (`--metrics-addr`).
    pub prometheus: bool,
}

/// Installs logging, tracing and metrics. Call it outside any async
/// runtime: the OTLP exporters send from threads of their own.
pub fn init(wanted: &Wanted<'_>) -> Telemetry {
    let mut problems = Vec::new();
    let resource = resource(wanted.service);
    let mut tracer = SdkTracerProvider::builder().with_resource(resource.clone());
    let mut exporting = false;
    if let Some(protocol) = otlp_wanted("TRACES", &mut problems) {
        let built = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(protocol)
            .with_http_client(http::BlockingHttp::new())
            .build();
        match built {
            Ok(exporter) => {
                tracer = tracer.with_batch_exporter(exporter);
                exporting = true;
            }
            Err(err) => problems.push(format!("cannot export traces over OTLP: {err}")),
        }
    }
    let tracer = tracer.build();
    // Spans are built for OpenTelemetry only when they are exported: building
    // them for nobody cost a hop about a quarter of its CPU. Without the layer,
    // a worker passes the incoming `traceparent` on unchanged.
    let spans =
        exporting.then(|| tracing_opentelemetry::layer().with_tracer(tracer.tracer("baton")));
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let (meter, prometheus) = meters(wanted, resource, &mut problems);
    if let Some(meter) = &meter {
        opentelemetry::global::set_meter_provider(meter.clone());
    }
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(wanted.level));
    let _ = tracing_subscriber::registry()
        .with(
            fmt::layer()
                .fmt_fields(fields::LogFields)
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_target(false),
        )
        .with(spans)
        .with(filter)
        .try_init();
    for problem in problems {
        tracing::warn!("{problem}");
    }
    Telemetry {
        tracer,
        meter,
        prometheus,
    }
}

/// The meter provider: a Prometheus registry when metrics are served, an
/// OTLP push when the environment asks for one; none when neither.
fn meters(
    wanted: &Wanted<'_>,
    resource: Resource,
    problems: &mut Vec<String>,
) -> (Option<SdkMeterProvider>, Option<prometheus::Registry>) {
    let mut builder = SdkMeterProvider::builder().with_resource(resource);
    let mut any = false;
    let mut registry = None;
    if wanted.prometheus {
        let kept = prometheus::Registry::new();
        match opentelemetry_prometheus::exporter()
            .with_registry(kept.clone())
            .scope_info_enabled(false)
            .build()
        {
            Ok(exporter) => {
                builder = builder.with_reader(exporter);
                registry = Some(kept);
                any = true;
            }
            Err(err) => problems.push(format!("cannot keep metrics for Prometheus: {err}")),
        }
    }
    if let Some(protocol) = otlp_wanted("METRICS", problems) {
        match opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(protocol)
            .with_http_client(http::BlockingHttp::new())
            .build()
        {
            Ok(exporter) => {
                builder = builder.with_periodic_exporter(exporter);
                any = true;
            }
            Err(err) => problems.push(format!("cannot export metrics over OTLP: {err}")),
        }
    }
    (any.then(|| builder.build()), registry)
}

/// The protocol of the OTLP exporter of `signal` (`TRACES` or `METRICS`)
/// when the `OTEL_*` variables ask for one: an endpoint is set, or
/// `OTEL_<signal>_EXPORTER` is `otlp`. `OTEL_SDK_DISABLED=true` or an
/// exporter of `none` turns it off. The protocol is `http/protobuf` unless
/// `http/json` is asked for; one this build cannot speak is a problem, and
/// no exporter.
fn otlp_wanted(signal: &str, problems: &mut Vec<String>) -> Option<Protocol> {
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .filter(|value| !value.trim().is_empty())
    };
    if var("OTEL_SDK_DISABLED").is_some_and(|value| value.eq_ignore_ascii_case("true")) {
        return None;
    }
    let exporter = var(&format!("OTEL_{signal}_EXPORTER"));
    if exporter.as_deref().is_some_and(|value| value != "otlp") {
        return None;
    }
    let endpoint = var("OTEL_EXPORTER_OTLP_ENDPOINT")
        .or_else(|| var(&format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")));
    if exporter.is_none() && endpoint.is_none() {
        return None;
    }
    let protocol = var(&format!("OTEL_EXPORTER_OTLP_{signal}_PROTOCOL"))
        .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"));
    match protocol.as_deref() {
        None | Some("http/protobuf") => Some(Protocol::HttpBinary),
        Some("http/json") => Some(Protocol::HttpJson),
        Some(protocol) => {
            problems.push(format!(
            "OTLP protocol {protocol:?} is not supported: Baton exports over HTTP; set \
             OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf (or http/json) and point the endpoint at the \
             collector's HTTP port (4318). No {} are exported.",
            signal.to_lowercase()
            ));
            None
        }
    }
}

/// The process's resource: what the SDK reads from `OTEL_SERVICE_NAME` and
/// `OTEL_RESOURCE_ATTRIBUTES`, with `service` as the default name.
fn resource(service: &str) -> Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|name| !name.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES")
            .is_ok_and(|attributes| attributes.contains("service.name="));
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name(service.to_owned()).build()
    }
}

/// What went wrong in setting telemetry up, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The metrics endpoint cannot listen where it was told.
    Listen,
}

baton_proto::error_type! {
    /// What can go wrong in setting telemetry up: a kind, a message that
    /// names the fix, and the cause.
    pub struct Error(ErrorKind);
}
