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

/// What stopped a benchmark or the demo, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// It stopped before its report: the message is the whole report, each
    /// cause after a colon.
    Stopped,
}

baton_proto::error_type! {
    /// Why a benchmark or the demo stopped: the whole report, each cause
    /// after a colon.
    pub struct Error(ErrorKind);
}

impl From<anyhow::Error> for Error {
    fn from(err: anyhow::Error) -> Self {
        Self::new(ErrorKind::Stopped, baton_proto::error_chain(err.as_ref()))
    }
}
