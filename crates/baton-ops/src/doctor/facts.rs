//! What `baton doctor` reads from a deployment, before any check runs.

use std::collections::BTreeMap;
use std::time::Duration;

/// What `baton doctor` found out about a deployment.
#[derive(Debug, Default)]
pub struct Facts {
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
    /// Live instances per agent type, and per version as `<type>@<version>`,
    /// from the registry; `None` when no registry answered.
    pub live: Option<BTreeMap<String, u32>>,
    /// The workers' claim-check threshold, when the user gave it.
    pub claim_threshold: Option<usize>,
    /// How long without a live worker makes a consumer stale.
    pub stale_after: Duration,
    /// Subjects of the operator role's footprint the server says this
    /// user may not publish to.
    pub refused: Vec<String>,
    /// The shared model rate limits, one per endpoint and model.
    pub limits: Vec<LimitFacts>,
    /// The versioned agent types' rollouts.
    pub rollouts: Vec<baton_proto::Rollout>,
    /// Each gated rollout under way, by agent type: the step's sessions on
    /// the current version and on the new one.
    pub gated: BTreeMap<String, (baton_proto::Side, baton_proto::Side)>,
    /// The streams that hold text and exist, and whether each is
    /// compressed (S2).
    pub compression: Vec<(String, bool)>,
    /// The OAuth sign-ins to MCP servers (`baton mcp login`).
    pub sign_ins: Vec<SignInFacts>,
    /// Now, in unix seconds.
    pub now: i64,
}

/// One endpoint and model's shared rate limit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LimitFacts {
    /// The endpoint, without credentials.
    pub endpoint: String,
    /// The model.
    pub model: String,
    /// Requests a second the workers pace it at now.
    pub rate: f64,
    /// The configured or heard ceiling, requests a second; 0 when none.
    pub ceiling: f64,
    /// Where it comes from: `configured`, `headers` or `adaptive`.
    pub source: String,
    /// Calls it refused with 429.
    pub refused: u64,
    /// When the rate was last cut for a 429, unix seconds; 0 never.
    pub cut_at: i64,
    /// Not paced yet: nothing is known and no 429 came.
    pub unpaced: bool,
    /// How many calls may be in flight at once.
    pub window: f64,
    /// How many are in flight now, all workers together.
    pub in_flight: u32,
    /// The families of rate-limit headers the provider sent.
    pub headers: Vec<String>,
}

/// One server.
#[derive(Debug, Clone)]
pub struct ServerFacts {
    /// Its `server_name`.
    pub name: String,
    /// Its nats-server version.
    pub version: String,
    /// Whether JetStream is on.
    pub jetstream: bool,
    /// The largest message it takes.
    pub max_payload: usize,
    /// How often it writes to disk.
    pub sync: Sync,
}

/// How often a server writes JetStream data to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sync {
    /// Before acknowledging each write (`sync_interval: always`).
    Always,
    /// In the background, this often.
    Every(Duration),
    /// The server did not say (only a system-account user can ask).
    Unknown,
}

/// One of Baton's streams.
#[derive(Debug, Clone)]
pub struct StreamFacts {
    /// The stream's name.
    pub name: String,
    /// Its replicas.
    pub replicas: usize,
    /// How long it remembers message ids.
    pub duplicate_window: Duration,
    /// Whether redelivered workers publish to it under the same message ids.
    pub deduplicated: bool,
    /// Replicas that are offline or behind, by server name.
    pub lagging: Vec<String>,
}

/// One consumer of the tasks stream.
#[derive(Debug, Clone)]
pub struct ConsumerFacts {
    /// The consumer's name.
    pub name: String,
    /// The agent type it serves (`agent-<type>` consumers), with the
    /// version for a version's consumer (`agent-<type>@<version>` serves
    /// `<type>@<version>`).
    pub agent: Option<String>,
    /// How long a delivery may stay unacknowledged.
    pub ack_wait: Duration,
    /// How often a message is delivered at most.
    pub max_deliver: i64,
    /// Pull requests waiting: a worker is connected and idle.
    pub waiting: usize,
    /// Messages not yet delivered.
    pub pending: u64,
    /// When it last delivered or was acknowledged (or was created), unix seconds.
    pub last_active: i64,
}

/// One MCP server's sign-in, without its tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SignInFacts {
    /// The server's URL.
    pub server: String,
    /// The OAuth client it signed in as.
    pub client_id: String,
    /// The scopes granted.
    pub scopes: Vec<String>,
    /// Whether the workers can refresh it.
    pub refreshable: bool,
    /// When its token was received, unix seconds.
    pub at: Option<i64>,
    /// How long its token lasts from then, in seconds.
    pub lasts: Option<i64>,
}
