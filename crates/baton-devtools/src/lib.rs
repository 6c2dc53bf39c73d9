//! The code behind `baton dev`, `baton bench`, `baton bench-registry` and
//! `baton worker --relay`, kept out of the CLI's glue.
//!
//! - [`demo`]: the customer-service demo, five rule-based agent types;
//! - [`relay`]: a configurable agent for tests, benchmarks and experiments;
//! - [`bench`](mod@bench): Baton against a raw JetStream relay, in the same run;
//! - [`bench_registry`]: registry lookups per second and their latency;
//! - [`RateWindow`]: a provider's rate limit, for the benchmarks' stand-in
//!   models and the end-to-end tests' ([`Headers`], [`Verdict`]).
//!
//! The benchmarks report; they assert nothing. Inside, errors are reports
//! for a person at a terminal, built with `anyhow`'s context; what a
//! benchmark returns is an [`Error`] with that whole report.

pub mod bench;
pub mod bench_registry;
pub mod demo;
pub mod relay;
mod window;

pub use window::{Headers, RateWindow, Verdict};

/// Why a benchmark stopped: the whole report, each cause after a colon.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Error(String);

impl From<anyhow::Error> for Error {
    fn from(err: anyhow::Error) -> Self {
        Self(format!("{err:#}"))
    }
}
