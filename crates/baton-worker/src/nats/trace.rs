//! W3C trace context in NATS headers, so one session is one distributed trace.

use async_nats::HeaderMap;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key, value.as_str());
    }
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(async_nats::HeaderValue::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(name, _)| name.as_ref()).collect()
    }
}

/// The remote trace context carried by `headers`, if any.
pub(crate) fn extract(headers: Option<&HeaderMap>) -> opentelemetry::Context {
    match headers {
        Some(headers) => TraceContextPropagator::new().extract(&HeaderExtractor(headers)),
        None => opentelemetry::Context::new(),
    }
}

/// Makes `span` a child of the remote context `parent`.
pub(crate) fn adopt(span: &tracing::Span, parent: &opentelemetry::Context) {
    if parent.span().span_context().is_valid() {
        // Fails only when the span is disabled; then there is nothing to link.
        let _ = span.set_parent(parent.clone());
    }
}

/// A new trace to start a session in, for a process that builds no spans of
/// its own (it exports none): its first hop then still has a trace to join.
pub(crate) fn root() -> opentelemetry::Context {
    use opentelemetry::trace::{SpanContext, TraceFlags, TraceState};
    use opentelemetry_sdk::trace::{IdGenerator as _, RandomIdGenerator};
    let ids = RandomIdGenerator::default();
    let root = SpanContext::new(
        ids.new_trace_id(),
        ids.new_span_id(),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    opentelemetry::Context::new().with_remote_span_context(root)
}

/// Writes `traceparent`/`tracestate` for work done under `span`.
///
/// Without an OpenTelemetry layer installed the span has no trace context of
/// its own; the incoming `parent` is passed on unchanged so the trace is not
/// broken by a process that does not export.
pub(crate) fn inject(
    span: &tracing::Span,
    parent: &opentelemetry::Context,
    headers: &mut HeaderMap,
) {
    let own = span.context();
    let context = if own.span().span_context().is_valid() {
        &own
    } else {
        parent
    };
    TraceContextPropagator::new().inject_context(context, &mut HeaderInjector(headers));
}
