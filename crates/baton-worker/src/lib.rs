//! Baton's worker loop: agent worker pools on NATS JetStream.
//!
//! Each agent type is a pool of [`Worker`]s pulling from the shared durable
//! consumer `agent-<A>`. A worker runs the [`Agent`] on each envelope and
//! routes its [`Outcome`]: complete the session, hand off to another agent
//! with the full context, delegate child tasks, or escalate to the fallback.
//! Every successor and event is published with a deterministic id and
//! acknowledged by JetStream before the incoming message is acked, so a
//! crash anywhere means redelivery and never a lost or doubled handoff.
//!
//! The loop stands on the plumbing (`baton-nats`: the connection, the
//! buckets, and the message pipeline it shares with the router) and on
//! the client (`baton-client`, for registry lookups). It uses the agent
//! authors' API, which is its own crate, `baton-author`, free of NATS, and
//! re-exported here whole:
//!
//! - the [`Agent`] trait, the [`Task`] it runs (its envelope [`Shared`]
//!   with the worker), its [`RetryPolicy`], and the [`Progress`] it reports
//!   through;
//! - [`Outcome`] and its builders ([`Complete`], [`Answer`], [`Handoff`],
//!   [`Delegation`], [`Chain`], [`Wait`]), [`ContextUpdate`], [`AgentError`]
//!   and [`ResultExt`];
//! - [`Target`] and [`Need`]; [`RouteOptions`] and [`ContextPolicy`];
//! - the rules every outcome goes through ([`Routing`], [`Condition`],
//!   [`LlmCondition`], [`Route`]);
//! - child tasks: [`ChildTask`], [`DelegateMode`], [`Recover`], [`Results`];
//! - [`AgentName`], [`Reason`] and [`Value`] from the wire crate.
//!
//! # The loop
//!
//! [`Worker`], [`WorkerConfig`], [`Profile`], [`WorkerStats`]. `start`
//! starts a worker and feeds its messages to `handle`, which reads
//! top-down as the loop, in the order of "How a worker handles a message"
//! (docs/internals/worker-loop.md). Its steps:
//!
//! - the message pipeline it shares with the router (intake, delivery, a
//!   plan's outputs, settling, lookups, cancels): `baton-nats`;
//! - `decide`: what to publish and how to settle, as pure functions
//!   (refusals, outcomes, failures, delegations); `guard` refuses loops;
//! - `run`: the agent under its timeout and the session's deadline, with
//!   progress acks;
//! - `join`: delegations, a pure state machine and its store;
//! - `outbox`: the one place a hop's outputs are published and its message
//!   settled, and where the event level is applied;
//! - `runtime`: what every message shares;
//! - `config`, `metrics`, `heartbeats` (to the registry), `reporter` (what
//!   a running hop reports);
//! - `moved`: a versioned worker moves tasks on its type's own subject to
//!   their versions.
//!
//! [`footprints`] says what a worker does on NATS, declared beside the
//! code that does it.

mod config;
mod decide;
mod gated;
mod guard;
mod handle;
mod heartbeats;
mod join;
mod metrics;
mod moved;
mod outbox;
mod reporter;
mod run;
mod runtime;
mod start;

pub use baton_author::Agent;
pub use baton_author::{
    AgentError, Answer, Chain, ChildResult, ChildTask, Compacted, Complete, Condition,
    ContextPolicy, ContextUpdate, DelegateMode, Delegation, Handoff, LlmCondition, Lookups, Need,
    Outcome, Progress, Recover, ResultExt, Results, RetryPolicy, Route, RouteOptions, Routing,
    Shared, Target, Task, Team, TeamSpec, ToolCall, Wait,
};
pub use baton_nats::SettleMode;
pub use baton_proto::{AgentName, Reason, Usage, Value};
pub use config::{EventLevel, LiveEvents, Profile, WorkerConfig, WorkerStats, new_instance_id};
pub use handle::conversation_id;
pub use start::Worker;

/// What a worker does on NATS, declared next to the code that does it;
/// `baton permissions` and `baton doctor` derive from these.
pub mod footprints {
    pub use crate::start::footprint as worker;
    pub use crate::start::version_footprint as version_worker;
}
