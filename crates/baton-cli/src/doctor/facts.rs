//! What `baton doctor` reads from a deployment, before any check runs.

use std::collections::BTreeMap;
use std::time::Duration;

/// What `baton doctor` found out about a deployment.
#[derive(Debug, Default)]
pub(crate) struct Facts {
    /// The servers that answered.
    pub servers: Vec<ServerFacts>,
    /// Servers of the list (or that the cluster announced) that did not answer.
    pub unreachable: Vec<String>,
    /// Baton's streams that exist.
    pub streams: Vec<StreamFacts>,
    /// Baton's streams that do not exist (yet).
    pub missing: Vec<String>,
    /// Why the streams and consumers could not be read, if they could not.
    pub unreadable: Option<String>,
    /// The tasks stream's name.
    pub tasks_stream: String,
    /// Consumers of the tasks stream.
    pub consumers: Vec<ConsumerFacts>,
    /// Live instances per agent type, from the registry; `None` when no
    /// registry answered.
    pub live: Option<BTreeMap<String, u32>>,
    /// The workers' claim-check threshold, when the user gave it.
    pub claim_threshold: Option<usize>,
    /// How long without a live worker makes a consumer stale.
    pub stale_after: Duration,
    /// Now, in unix seconds.
    pub now: i64,
}

/// One server.
#[derive(Debug, Clone)]
pub(crate) struct ServerFacts {
    pub name: String,
    pub version: String,
    pub jetstream: bool,
    pub max_payload: usize,
    pub sync: Sync,
}

/// How often a server writes JetStream data to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sync {
    /// Before acknowledging each write (`sync_interval: always`).
    Always,
    /// In the background, this often.
    Every(Duration),
    /// The server did not say (only a system-account user can ask).
    Unknown,
}

/// One of Baton's streams.
#[derive(Debug, Clone)]
pub(crate) struct StreamFacts {
    pub name: String,
    pub replicas: usize,
    pub duplicate_window: Duration,
    /// Whether redelivered workers publish to it under the same message ids.
    pub deduplicated: bool,
    /// Replicas that are offline or behind, by server name.
    pub lagging: Vec<String>,
}

/// One consumer of the tasks stream.
#[derive(Debug, Clone)]
pub(crate) struct ConsumerFacts {
    pub name: String,
    /// The agent type it serves (`agent_<type>` consumers).
    pub agent: Option<String>,
    pub ack_wait: Duration,
    pub max_deliver: i64,
    /// Pull requests waiting: a worker is connected and idle.
    pub waiting: usize,
    /// Messages not yet delivered.
    pub pending: u64,
    /// When it last delivered or was acknowledged (or was created), unix seconds.
    pub last_active: i64,
}
