//! Where every instrument of Baton comes from, and the buckets its
//! duration histograms share.

use opentelemetry::metrics::Meter;

/// The meter every Baton instrument comes from.
#[must_use]
pub fn meter() -> Meter {
    opentelemetry::global::meter("baton")
}

/// Buckets for durations in seconds: 1 ms to 5 min.
pub const SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];
