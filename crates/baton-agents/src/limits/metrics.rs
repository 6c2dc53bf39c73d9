//! What the shared limit shows on the metrics endpoint, by endpoint and
//! model: the rate it paces at, the window of calls in flight, which
//! rate-limit headers the provider sends, how long calls waited for their
//! turn, and the calls the provider refused with `429`.

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram};

/// The limit's instruments and their labels, built once per runner.
#[derive(Debug, Clone)]
pub(crate) struct Metrics {
    /// How long calls waited for their turn (`baton.llm.limit.wait`).
    wait: Histogram<f64>,
    /// The shared rate at the last turn (`baton.llm.limit.rate`).
    rate: Gauge<f64>,
    /// The window of calls in flight at the last turn (`baton.llm.limit.window`).
    window: Gauge<f64>,
    /// 1 for each family of rate-limit headers heard (`baton.llm.limit.headers`).
    headers: Gauge<u64>,
    /// The families recorded already, by bit.
    heard: std::sync::Arc<std::sync::atomic::AtomicU8>,
    /// Calls the endpoint refused with 429 (`baton.llm.refusals`).
    refusals: Counter<u64>,
    /// The endpoint (as it may be shown) and the model.
    labels: [KeyValue; 2],
}

impl Metrics {
    /// The instruments of `base_url`'s `model`.
    pub(crate) fn new(base_url: &str, model: &str) -> Self {
        let meter = baton_nats::meter::meter();
        Self {
            wait: meter
                .f64_histogram("baton.llm.limit.wait")
                .with_unit("s")
                .with_description("How long model calls waited for their turn under the shared rate limit, by endpoint and model")
                .build(),
            rate: meter
                .f64_gauge("baton.llm.limit.rate")
                .with_description("Requests a second the shared rate limit paces the model at, by endpoint and model: configured, heard from the provider's headers, or learned from 429s (baton doctor says which)")
                .build(),
            window: meter
                .f64_gauge("baton.llm.limit.window")
                .with_description("Model calls the shared rate limit lets be in flight at once, by endpoint and model: small at first with nothing known, widened while no 429 comes back")
                .build(),
            headers: meter
                .u64_gauge("baton.llm.limit.headers")
                .with_description("1 for each family of rate-limit headers the endpoint sends (label headers: x-ratelimit, x-ratelimit-day, anthropic-ratelimit, retry-after), by endpoint and model")
                .build(),
            heard: std::sync::Arc::default(),
            refusals: meter
                .u64_counter("baton.llm.refusals")
                .with_description("Model calls the endpoint refused with 429, by endpoint and model")
                .build(),
            labels: [
                KeyValue::new("endpoint", super::shown(base_url)),
                KeyValue::new("model", model.to_owned()),
            ],
        }
    }

    /// A turn taken after `waited`, at `rate` requests a second (0: not
    /// paced yet) with `window` calls allowed in flight.
    pub(crate) fn turn(&self, waited: Duration, rate: f64, window: f64) {
        self.wait.record(waited.as_secs_f64(), &self.labels);
        self.rate.record(rate, &self.labels);
        self.window.record(window, &self.labels);
    }

    /// The provider sent the rate-limit headers `names` (as
    /// `super::schedule::HEADER_NAMES` names them); each is recorded once.
    pub(crate) fn heard(&self, names: &[&'static str]) {
        use std::sync::atomic::Ordering;
        for (bit, name) in super::schedule::HEADER_NAMES.iter().enumerate() {
            let bit = 1u8 << bit;
            if names.contains(name) && self.heard.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
                let mut labels = self.labels.to_vec();
                labels.push(KeyValue::new("headers", *name));
                self.headers.record(1, &labels);
            }
        }
    }

    /// A call the provider refused with `429`.
    pub(crate) fn refused(&self) {
        self.refusals.add(1, &self.labels);
    }
}
