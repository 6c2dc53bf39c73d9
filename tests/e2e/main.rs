//! End-to-end scenarios: real `baton` processes against a real nats-server
//! that each test starts on a random port and kills afterwards.
#![allow(unreachable_pub)] // a test binary: nothing is exported

mod a2a;
mod a2a_remote;
mod budgets;
mod cancel;
mod chaos;
mod chat;
mod claims;
mod cli;
mod cluster;
mod console;
mod conversations;
mod deadlines;
mod delegation;
mod deploy;
mod docs;
mod doctor;
mod failures;
mod fuzz;
mod gates;
mod handoff;
mod holders;
mod isolation;
mod learning;
mod lifecycle;
mod limits;
mod mcp;
mod metrics;
mod permissions;
mod persistent;
mod python;
mod registry;
mod reopen;
mod replay;
mod routing;
mod setup;
mod specs;
mod streaming;
mod targets;
mod teams;
mod tls;
mod tools;
mod traces;
mod turn_crashes;
mod util;
