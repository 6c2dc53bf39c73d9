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

mod author;
mod error;
pub mod health;
mod nats;
mod services;
mod worker;

pub use author::agent::{Agent, RetryPolicy, Task};
pub use author::delegate::{ChildResult, ChildTask, DelegateMode, Recover, Results};
pub use author::outcome::{
    AgentError, Answer, Chain, Complete, ContextUpdate, Delegation, Handoff, Outcome, ResultExt,
    Wait,
};
pub use author::policy::{ContextPolicy, RouteOptions};
pub use author::progress::{Progress, ToolCall};
pub use author::routing::{Condition, ConditionError, LlmCondition, Route, Routing};
pub use author::target::{Need, Target};
pub use baton_proto::{AgentName, Reason, Value};
pub use error::{Error, ErrorKind};
pub use nats::claimcheck::{ClaimCheck, ClaimSettings};
pub use nats::connection::Connection;
pub use nats::provision::{StreamSettings, key_value, redelivery_span};
pub use nats::served::is_served;
pub use services::client::{Cancel, Client, EventStream};
pub use services::deadletters::{DeadLetterEntry, ReplayOptions};
pub use services::inbox::{Inbox, InboxEntry, InboxError, Reply};
pub use services::router::{Router, RouterConfig};
pub use worker::cancel::{cancel_event_id, cancelled_event};
pub use worker::config::{
    EventLevel, Profile, SettleMode, WorkerConfig, WorkerStats, new_instance_id,
};
pub use worker::metrics::meter;
pub use worker::registry::RegistryClient;
pub use worker::start::Worker;

/// What each process of this crate does on NATS, declared next to the code
/// that does it; `baton permissions` and `baton doctor` derive from these.
pub mod footprints {
    pub use crate::nats::claimcheck::footprint as claims;
    pub use crate::nats::provision::footprint as streams;
    pub use crate::nats::served::footprint as served;
    pub use crate::services::client::follow::footprint as session_reader;
    pub use crate::services::client::footprint as client;
    pub use crate::services::deadletters::footprint as dead_letters;
    pub use crate::services::inbox::footprint as inbox;
    pub use crate::services::router::footprint as router;
    pub use crate::worker::cancel::footprint as cancels;
    pub use crate::worker::start::footprint as worker;
}
