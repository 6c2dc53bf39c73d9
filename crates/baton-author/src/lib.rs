//! Baton's agent authors' API: what an agent is given and what it may
//! decide. Nothing here touches NATS: these are the types an agent is
//! written against, so an author who implements [`Agent`] compiles this
//! crate and the wire types, not the JetStream runtime. `baton-worker` runs
//! agents, and re-exports everything here, so code written against
//! `baton_worker::Agent` compiles as it did.
//!
//! - [`agent`]: the [`Agent`] trait, the [`Task`] it runs, its
//!   [`RetryPolicy`];
//! - [`shared`]: the task's envelope, shared with the worker, copied only
//!   when the agent changes it ([`Shared`]);
//! - [`outcome`]: what a run returns ([`Outcome`] and its builders
//!   [`Complete`], [`Answer`], [`Handoff`], [`Delegation`], [`Chain`],
//!   [`Wait`]) and its errors ([`AgentError`], [`ResultExt`]);
//! - [`update`]: what a run did to the context ([`ContextUpdate`]), a
//!   compaction ([`Compacted`]) included;
//! - [`target`]: where a handoff goes: an agent type or a capability
//!   [`Need`];
//! - [`policy`]: what a route carries besides its target ([`RouteOptions`],
//!   [`ContextPolicy`]);
//! - [`routing`]: the rules every outcome goes through, in their fixed
//!   order ([`Routing`], [`Condition`], [`LlmCondition`], [`Route`]);
//! - [`delegate`]: child tasks, their modes and the joined results;
//! - [`progress`]: what a running hop reports (tool calls, spending);
//! - [`team`]: a coordinator that forms a team and coordinates it.
//!
//! The items marked hidden are the worker's side of these types (how an
//! update is applied, how rules decide); authors do not need them.

pub mod agent;
pub mod delegate;
mod error;
pub mod outcome;
pub mod policy;
pub mod progress;
pub mod routing;
pub mod shared;
pub mod target;
pub mod team;
pub mod update;

pub use agent::{Agent, Lookups, RetryPolicy, Task};
pub use baton_proto::{AgentName, Reason, Usage, Value};
pub use delegate::{ChildResult, ChildTask, DelegateMode, Recover, Results};
pub use error::{Error, ErrorKind};
pub use outcome::{
    AgentError, Answer, Chain, Complete, Delegation, Handoff, Outcome, ResultExt, Wait,
};
pub use policy::{ContextPolicy, RouteOptions};
pub use progress::{Progress, ToolCall};
pub use routing::{Condition, LlmCondition, Route, Routing};
pub use shared::Shared;
pub use target::{Need, Target};
pub use team::{Team, TeamSpec};
pub use update::{Compacted, ContextUpdate};

#[doc(hidden)]
pub use delegate::{slot_index, text_of};
#[doc(hidden)]
pub use progress::Report;
#[doc(hidden)]
pub use routing::{Decided, Step};
