//! End-to-end scenarios: real `baton` processes against a real nats-server
//! that each test starts on a random port and kills afterwards. One folder
//! per area, each `mod.rs` saying what its area holds:
//!
//! - `code`: agents written in Python with the `baton` package;
//! - `conversation`: turns, holders, transcripts, compaction, `baton chat`;
//! - `gateways`: A2A, MCP and the console, with the protocols' own clients;
//! - `routing`: handoffs, rules, targets, the registry, delegation, teams;
//! - `reliability`: failures, retries, deadlines, cancels, budgets, limits,
//!   claim-checks, streaming, replay, tool calls;
//! - `operations`: the CLI, clusters, TLS, permissions, metrics, traces.
//!
//! `util` starts servers and processes for all of them.
#![allow(unreachable_pub)] // a test binary: nothing is exported

mod code;
mod conversation;
mod gateways;
mod operations;
mod reliability;
mod routing;
mod util;
