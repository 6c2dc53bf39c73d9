//! Baton's runtime: agent worker pools on NATS JetStream.
//!
//! Each agent type is a pool of [`Worker`]s pulling from the shared durable
//! consumer `agent-<A>`. A worker runs the [`Agent`] on each envelope and
//! routes its [`Outcome`]: complete the session, hand off to another agent
//! with the full context, delegate child tasks, or escalate to the fallback.
//! Every successor and event is published with a deterministic id and
//! acknowledged by JetStream before the incoming message is acked, so a
//! crash anywhere means redelivery and never a lost or doubled handoff.
//!
//! # What an agent author uses
//!
//! - `agent`: the [`Agent`] trait, [`Task`], [`RetryPolicy`];
//! - `outcome`: [`Outcome`] and its builders ([`Complete`], [`Answer`],
//!   [`Handoff`], [`Delegation`], [`Chain`], [`Wait`]), [`ContextUpdate`],
//!   [`AgentError`] and [`ResultExt`];
//! - `target`: [`Target`] and [`Need`];
//! - `routing`: the rules every agent's outcome goes through ([`Routing`],
//!   [`Condition`], [`LlmCondition`], [`Route`], [`RouteOptions`], [`ContextPolicy`]);
//! - `delegate`: [`ChildTask`], [`DelegateMode`], [`Recover`], [`Results`];
//! - [`AgentName`], [`Reason`] and [`Value`] from the wire crate.
//!
//! # What a deployment uses
//!
//! - [`Connection`]: a NATS client that notices refused publishes;
//! - [`Worker`], [`WorkerConfig`], [`Profile`], [`WorkerStats`];
//! - [`Router`]: moves tasks from `baton.ingress` to their first agent;
//! - [`Client`]: submits tasks and follows session events; dead letters;
//! - [`RegistryClient`]: best-agent lookups;
//! - `provision` (internal): creates the streams of the protocol, idempotently.
//!
//! # The worker loop, one file per step
//!
//! `worker` reads top-down as the loop. `delivery` decodes a message and
//! settles it (steps 1 and 6); `plan` refuses what must not run and turns
//! outcomes into messages (2, 4, 7); `run` runs the agent with progress (3);
//! `guard` refuses loops (5); `runtime` carries plans out and `publish` makes
//! them durable (6); `join` and its pure `join::state` handle delegations;
//! `intake` pulls; `registry` sends heartbeats and asks for the best agent.

mod accept;
mod advisory;
mod agent;
mod cancel;
mod claimcheck;
mod client;
mod config;
mod connection;
mod deadletters;
mod deadlines;
mod delegate;
mod delivery;
mod ending;
mod error;
mod guard;
pub mod health;
mod intake;
mod join;
mod metrics;
mod outcome;
mod plan;
mod progress;
mod provision;
mod publish;
mod reading;
mod registry;
mod router;
mod routing;
mod run;
mod runtime;
mod served;
mod sessions;
mod target;
mod trace;
mod worker;

pub use agent::{Agent, RetryPolicy, Task};
pub use baton_proto::{AgentName, Reason, Value};
pub use cancel::{cancel_event_id, cancelled_event};
pub use claimcheck::{ClaimCheck, ClaimSettings};
pub use client::{Cancel, Client, EventStream};
pub use config::{EventLevel, Profile, SettleMode, WorkerConfig, WorkerStats, new_instance_id};
pub use connection::Connection;
pub use deadletters::{DeadLetterEntry, ReplayOptions};
pub use delegate::{ChildResult, ChildTask, DelegateMode, Recover, Results};
pub use error::{Error, ErrorKind};
pub use metrics::meter;
pub use outcome::{
    AgentError, Answer, Chain, Complete, ContextUpdate, Delegation, Handoff, Outcome, ResultExt,
    Wait,
};
pub use progress::{Progress, ToolCall};
pub use provision::{StreamSettings, key_value, redelivery_span};
pub use registry::RegistryClient;
pub use router::{Router, RouterConfig};
pub use routing::{
    Condition, ConditionError, ContextPolicy, LlmCondition, Route, RouteOptions, Routing,
};
pub use served::is_served;
pub use target::{Need, Target};
pub use worker::Worker;
