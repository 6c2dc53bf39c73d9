//! Baton's registry: "who is the best agent for this?"
//!
//! Every worker sends a heartbeat every few seconds. Each registry replica
//! subscribes to all of them and keeps the whole table in memory ([`Table`]),
//! plus the backlog of each agent type's consumer, read from JetStream. Lookups
//! are a NATS micro service (`baton-registry`) in a queue group, so any
//! replica answers, `$SRV.PING`, `$SRV.INFO` and `$SRV.STATS` work, and a
//! restarted replica is whole again after one heartbeat interval.
//!
//! The parts:
//!
//! - [`Registry`] and [`RegistryConfig`]: the service;
//! - [`Table`] and [`AgentSummary`]: live instances, grouped by agent type;
//! - [`rank`](mod@rank): the deterministic filter and score (see its docs for the formula);
//! - [`Learner`] and [`rank_learned`]: what outcomes taught (see the
//!   `outcomes` module docs for how they are recorded), and the ranking
//!   that uses it.
#![warn(missing_docs)]

mod choose;
mod endpoints;
mod learn;
mod outcomes;
mod rank;
mod service;
mod table;
mod tally;

pub use choose::{MIN_EVIDENCE, rank_learned};
pub use learn::{Learner, LearningConfig, key};
pub use outcomes::{CONSUMER as OUTCOMES_CONSUMER, OUTCOMES_MAX_AGE};
pub use rank::{AgentSummary, rank};
pub use service::{Error, ErrorKind, Registry, RegistryConfig, SERVICE_NAME, footprint};
pub use table::{Backlog, Table};
