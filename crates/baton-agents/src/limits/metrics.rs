//! What the shared limit shows on the metrics endpoint, by endpoint and
//! model: the rate it paces at, how long calls waited for their turn, and
//! the calls the provider refused with `429`.

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
    /// Calls the endpoint refused with 429 (`baton.llm.refusals`).
    refusals: Counter<u64>,
    /// The endpoint (as it may be shown) and the model.
    labels: [KeyValue; 2],
}

impl Metrics {
    /// The instruments of `base_url`'s `model`.
    pub(crate) fn new(base_url: &str, model: &str) -> Self {
        let meter = baton_worker::meter();
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

    /// A turn taken after `waited`, at `rate` requests a second.
    pub(crate) fn turn(&self, waited: Duration, rate: f64) {
        self.wait.record(waited.as_secs_f64(), &self.labels);
        self.rate.record(rate, &self.labels);
    }

    /// A call the provider refused with `429`.
    pub(crate) fn refused(&self) {
        self.refusals.add(1, &self.labels);
    }
}
