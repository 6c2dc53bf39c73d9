//! Baton's runtime: agent worker pools on NATS JetStream.
//!
//! Each agent type is a pool of [`Worker`]s pulling from the shared durable
//! consumer `agent-<A>`. A worker runs the [`Agent`] on each envelope and
//! routes its [`Outcome`]: complete the session, hand off to another agent
//! with the full context, or escalate to the fallback. Every successor and
//! event is published with a deterministic id and acknowledged by JetStream
//! before the incoming message is acked, so a crash anywhere means redelivery
//! and never a lost or doubled handoff.
//!
//! The parts:
//!
//! - [`Agent`], [`Task`], [`Outcome`], [`AgentError`], [`RetryPolicy`]: what users implement and return;
//! - [`Worker`] and [`WorkerConfig`]: the consume / run / publish / ack loop, with
//!   retries, dead letters, loop detection, progress and graceful shutdown;
//! - [`Router`]: moves tasks from `baton.ingress` to their first agent;
//! - [`Client`]: submits tasks and follows session events;
//! - [`RegistryClient`] and [`Profile`]: best-agent lookups, and what a worker
//!   advertises in its heartbeats;
//! - [`provision`]: creates the streams of the protocol, idempotently.
#![warn(missing_docs)]

mod agent;
mod client;
mod config;
mod deadletters;
mod delegate;
mod error;
mod intake;
mod join;
mod outputs;
mod plan;
mod provision;
mod publish;
mod registry;
mod router;
mod trace;
mod worker;

pub use agent::{
    Agent, AgentError, ContextPolicy, ContextUpdate, Need, Outcome, RetryPolicy, RouteOptions,
    Target, Task,
};
pub use client::{Client, EventStream};
pub use config::{WorkerConfig, WorkerStats, new_instance_id};
pub use deadletters::DeadLetterEntry;
pub use delegate::{ChildResult, ChildTask, DelegateMode, Recover, Results};
pub use error::{Error, ErrorKind};
pub use provision::{StreamSettings, provision};
pub use registry::{Profile, RegistryClient};
pub use router::{Router, RouterConfig};
pub use worker::Worker;
