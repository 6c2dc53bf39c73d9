//! The code behind `baton dev`, `baton bench`, `baton bench-registry` and
//! `baton worker --relay`, kept out of the CLI's glue.
//!
//! - [`demo`]: the customer-service demo, five rule-based agent types;
//! - [`relay`]: a configurable agent for tests, benchmarks and experiments;
//! - [`bench`]: Baton against a raw JetStream relay, in the same run;
//! - [`bench_registry`]: registry lookups per second and their latency.
//!
//! The benchmarks report; they assert nothing. Errors here are reports for
//! a person at a terminal, so they use `anyhow`.

pub mod bench;
pub mod bench_registry;
pub mod demo;
pub mod relay;
