//! W3C trace context in NATS headers, so one session is one distributed trace.

use async_nats::HeaderMap;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        // An empty `tracestate` says nothing; W3C Trace Context lets it be
        // left out, which saves every message its bytes.
        if !value.is_empty() {
            self.0.insert(key, value.as_str());
        }
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
pub fn root() -> opentelemetry::Context {
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
pub fn inject(span: &tracing::Span, parent: &opentelemetry::Context, headers: &mut HeaderMap) {
    let own = span.context();
    let context = if own.span().span_context().is_valid() {
        &own
    } else {
        parent
    };
    TraceContextPropagator::new().inject_context(context, &mut HeaderInjector(headers));
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
    };

    use super::*;

    fn headers_of(state: TraceState) -> HeaderMap {
        let span = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").expect("hex"),
            SpanId::from_hex("00f067aa0ba902b7").expect("hex"),
            TraceFlags::SAMPLED,
            true,
            state,
        );
        let parent = opentelemetry::Context::new().with_remote_span_context(span);
        let mut headers = HeaderMap::new();
        inject(&tracing::Span::none(), &parent, &mut headers);
        headers
    }

    #[test]
    fn an_empty_tracestate_is_left_out_and_a_full_one_is_sent() {
        let plain = headers_of(TraceState::default());
        assert_eq!(
            plain
                .get("traceparent")
                .map(async_nats::HeaderValue::as_str),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
        assert!(plain.get("tracestate").is_none());
        let vendor = TraceState::from_key_value([("vendor", "opaque")]).expect("a valid state");
        let full = headers_of(vendor);
        assert_eq!(
            full.get("tracestate").map(async_nats::HeaderValue::as_str),
            Some("vendor=opaque")
        );
    }
}
