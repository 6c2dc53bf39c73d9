//! The agent author's API: what an agent is given and what it may decide.
//!
//! - [`agent`]: the [`Agent`](crate::Agent) trait, the [`Task`](crate::Task)
//!   it runs, its [`RetryPolicy`](crate::RetryPolicy);
//! - [`outcome`]: what a run returns ([`Outcome`](crate::Outcome) and its
//!   builders) and errors;
//! - [`update`]: what a run did to the context
//!   ([`ContextUpdate`](crate::ContextUpdate)), a compaction included;
//! - [`target`]: where a handoff goes: an agent type or a capability need;
//! - [`policy`]: what a route carries besides its target (visits, context);
//! - [`routing`]: the rules every outcome goes through, in their fixed order;
//! - [`shared`]: the task's envelope, shared with the worker, copied only
//!   when the agent changes it;
//! - [`delegate`]: child tasks, their modes and the joined results;
//! - [`progress`]: what a running hop reports (tool calls);
//! - [`team`]: a coordinator that forms a team and coordinates it.
//!
//! Nothing here touches NATS: these are the types an agent is written
//! against, and the rest of the crate depends on them, never the reverse.

pub(crate) mod agent;
pub(crate) mod delegate;
pub(crate) mod outcome;
pub(crate) mod policy;
pub(crate) mod progress;
pub(crate) mod routing;
pub(crate) mod shared;
pub(crate) mod target;
pub(crate) mod team;
pub(crate) mod update;
