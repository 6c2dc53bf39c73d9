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
//! The crate has six rooms, by who reads them, and each names only the
//! rooms below it (a house test checks it); each `mod.rs` is its table of
//! contents. From the bottom: `nats` (plumbing), `state` (what is
//! remembered between messages), `pipeline` (what every process does with
//! a message: intake, delivery, a plan's outputs, settling, cancels),
//! `clients` (the session client, the inbox, registry lookups, dead
//! letters, and the conversations' one entry point), and on top `worker`
//! (the worker loop) and `services` (the router and what runs in it),
//! which never name each other. All of them use the agent authors' API,
//! which is its own crate, `baton-author`, free of NATS, and re-exported
//! here whole:
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
//! # `worker`: the worker loop
//!
//! [`Worker`], [`WorkerConfig`], [`Profile`], [`WorkerStats`]. Its `handle`
//! reads top-down as the loop: intake → plan → run → the outbox, the one
//! place a hop's outputs are published and its message settled.
//!
//! # `services`: the other processes
//!
//! [`Router`]: moves tasks from `baton.ingress` to their first agent,
//! watches deadlines, serves sessions to clients that may not read them,
//! and keeps the conversations.
//!
//! # `clients`: talking to a deployment
//!
//! - [`Client`]: submits tasks, follows and cancels sessions; dead letters;
//! - [`Inbox`]: tasks that wait for a person;
//! - [`RegistryClient`]: best-agent lookups;
//! - the conversations' one entry point,
//!   [`conversation::Conversations::say`], and the router's keeper.
//!
//! # `pipeline`: the message pipeline
//!
//! What the worker loop and the services both do with a message: pulling
//! with bounded concurrency, a delivery's attempt and encoding, a plan's
//! outputs, publishing them and then settling, cancelled sessions.
//!
//! # `state`: what is remembered between messages
//!
//! Every key-value bucket of a deployment, configured and opened in one
//! place ([`state::Bucket`]); the conversations' records and their
//! transcripts ([`transcript`]); who follows live events. It names nothing
//! above it: saying a message to a conversation is the clients' room's.
//!
//! # `nats`: plumbing
//!
//! [`Connection`] (a NATS client that learns its publish rights), stream
//! provisioning, durable publishing, the claim-check ([`ClaimCheck`]).
//!
//! [`footprints`] says what each process does on NATS, declared beside the
//! code that does it.

mod clients;
mod error;
pub mod health;
pub(crate) mod meter;
mod nats;
mod pipeline;
mod services;
pub mod state;
mod worker;

pub use baton_author::Agent;
pub use baton_author::{
    AgentError, Answer, Chain, ChildResult, ChildTask, Compacted, Complete, Condition,
    ConditionError, ContextPolicy, ContextUpdate, DelegateMode, Delegation, Handoff, LlmCondition,
    Lookups, Need, Outcome, Progress, Recover, ResultExt, Results, RetryPolicy, Route,
    RouteOptions, Routing, Shared, Target, Task, Team, TeamSpec, ToolCall, Wait,
};
pub use baton_proto::{AgentName, Reason, Usage, Value};
pub use clients::client::replay::{SessionReplay, ending};
pub use clients::client::{Cancel, Client, EventStream};
pub use clients::deadletters::{DeadLetterEntry, ReplayOptions};
pub use clients::inbox::{Decision, Inbox, InboxEntry, InboxError, Reply};
pub use clients::registry::RegistryClient;
pub use error::{Error, ErrorKind, error_chain};
pub use meter::meter;
pub use nats::claimcheck::{ClaimCheck, ClaimSettings};
pub use nats::connection::Connection;
pub use nats::provision::{StreamSettings, key_value, redelivery_span};
pub use nats::served::{is_served, is_version_served};
pub use pipeline::cancel::{cancel_event_id, cancelled_event};
pub use services::router::{Router, RouterConfig};
pub use state::transcript;

/// The versions of agent types as operators see and change them: each
/// version's state, live workers and what holds it, and the rollout's
/// changes by compare-and-swap. The CLI's deploy commands and the console
/// read through here.
pub mod versions {
    pub use crate::clients::versions::{Gathered, Holding, Queue, Standing, VersionRow, Versions};
}

/// Conversations: many turns, one memory, one turn at a time. The one entry
/// point ([`conversation::Conversations::say`]) and the keeper live in the
/// clients' room; the records, their errors and what deleting uses in the
/// state room.
pub mod conversation {
    pub use crate::clients::conversations::{Conversations, Said, UserMessage, keep};
    pub use crate::state::conversation::{
        ConversationError, ConversationErrorKind, DEFAULT_TTL, INTERRUPTED, deleting_footprint,
        footprint,
    };
}
pub use worker::config::{
    EventLevel, LiveEvents, Profile, SettleMode, WorkerConfig, WorkerStats, new_instance_id,
};
pub use worker::handle::conversation_id;
pub use worker::start::Worker;

/// Following live events: a follower says it listens, so that workers at
/// the `lean` event level publish the events they do not store.
pub mod live {
    pub use crate::state::followers::{Following, Scope, follow};
}

/// A key-value bucket followed into memory, reopened whenever its watch
/// ends: for state every process reads on its hot path.
pub mod watched {
    pub use crate::nats::watched::{Seen, watch};
}

/// What each process of this crate does on NATS, declared next to the code
/// that does it; `baton permissions` and `baton doctor` derive from these.
pub mod footprints {
    pub use crate::clients::client::follow::footprint as session_reader;
    pub use crate::clients::client::footprint as client;
    pub use crate::clients::deadletters::footprint as dead_letters;
    pub use crate::clients::inbox::footprint as inbox;
    pub use crate::nats::claimcheck::footprint as claims;
    pub use crate::nats::provision::footprint as streams;
    pub use crate::nats::served::footprint as served;
    pub use crate::pipeline::cancel::footprint as cancels;
    pub use crate::services::router::footprint as router;
    pub use crate::state::followers::follower_footprint as live_follower;
    pub use crate::state::rollouts::footprint as rollouts;
    pub use crate::worker::start::footprint as worker;
    pub use crate::worker::start::version_footprint as version_worker;
}
