//! The settings and counters of a worker.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use baton_proto::{AgentName, DEFAULT_MAX_PAYLOAD, Subjects, Version};

use baton_nats::ClaimSettings;
use baton_nats::{SettleMode, StreamSettings};

/// Deployment settings of one worker process.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WorkerConfig {
    /// The agent type served.
    pub agent: AgentName,
    /// This process's instance id (a subject token).
    pub instance: String,
    /// The version of the agent type this process runs, when it has one:
    /// shown in its heartbeats and written in its events.
    pub version: Option<Version>,
    /// Whether the version was named (a spec's `version`, `--version`,
    /// [`WorkerConfig::with_version`]): the worker then takes only its
    /// version's work, from its own consumer. A version that is only a
    /// label (a spec file's hash) is shown, and the worker takes the agent
    /// type's unversioned work as ever.
    pub versioned: bool,
    /// Whether the conversations pinned to this version move to the
    /// current version at their next turn once another version is current
    /// (a spec's `upgrade = "next_turn"`).
    pub upgrade_next_turn: bool,
    /// The gated rollout its version starts when its first worker starts
    /// and the version waits for one (a spec's `[rollout]`).
    pub rollout: Option<baton_proto::Gated>,
    /// Subject and stream names.
    pub subjects: Subjects,
    /// Where escalations, loops and exhausted tasks go; `None` fails them instead.
    pub fallback: Option<AgentName>,
    /// Redelivery timeout of the shared consumer, used when it is created.
    pub ack_wait: Duration,
    /// Largest envelope accepted; bigger ones are dead-lettered as `too_large`.
    pub max_payload: usize,
    /// How long in-flight work may take to finish on shutdown.
    pub shutdown_grace: Duration,
    /// How long one pull request waits on the server.
    pub pull_expires: Duration,
    /// Stream settings, used when the streams are created.
    pub streams: StreamSettings,
    /// What the worker advertises in its heartbeats.
    pub profile: Profile,
    /// How often the worker sends a heartbeat to the registry.
    pub heartbeat_interval: Duration,
    /// Whether capability targets, escalations and rejections are resolved
    /// through the registry; without it they go to the fallback.
    pub use_registry: bool,
    /// How long registry lookups may be retried before the fallback path is taken.
    pub lookup_budget: Duration,
    /// How old a remembered registry answer may be and still route a task
    /// while the registry is unreachable; zero remembers none.
    pub registry_memory: Duration,
    /// How deep delegations may nest: a child of the root is at depth 1.
    pub max_delegation_depth: u32,
    /// How long a delegation waits for its children before the missing ones
    /// count as failed; `None` waits until the session's deadline, if any.
    pub join_timeout: Option<Duration>,
    /// The claim-check: when envelopes keep their large parts in the
    /// object store.
    pub claims: ClaimSettings,
    /// A message delivered this many times without being settled (its
    /// worker crashed on it each time, or its outputs never became durable)
    /// is dead-lettered with `max_deliveries` on its next delivery, before it
    /// is even decoded. Must be above the agent's `max_attempts`.
    pub max_deliveries: u32,
    /// How a handled message is acknowledged.
    pub settle: SettleMode,
    /// Which events are stored.
    pub events: EventLevel,
    /// To whom the events the level does not store go live.
    pub live: LiveEvents,
    /// How long an agent runs before its hop's `accepted` event is sent on
    /// its own (stored at the `full` level, live at `lean`). A hop that ends
    /// sooner folds it into its next event (one message instead of two;
    /// readers restore it). Zero sends every `accepted` event at once.
    pub accepted_after: Duration,
    /// In a conversation, every turn this agent takes part in hands the
    /// conversation back to its entry when it ends (a spec's
    /// `next_turn = "entry"`): the next turn starts at the entry.
    pub hand_back: bool,
    /// Events keep once what they hold twice ([`baton_proto::Event::refer`],
    /// [`baton_proto::Event::keep_new_hops`]) and are then version 2
    /// ([`baton_proto::EVENT_VERSION_REFERRING`]): readers of this version
    /// put the parts back, older ones refuse them. On by default; off, every
    /// event is written whole, as version 1.
    pub compact_events: bool,
}

/// Which session events a worker stores in the events stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EventLevel {
    /// Every event.
    #[default]
    Full,
    /// Only what replay needs: terminal events, failures, retries, loop
    /// detections, escalations, dead letters, delegation and waiting.
    /// `accepted` and `handoff` go to `<prefix>.live.<session>` on core
    /// NATS, unstored; each hop's `accepted_at` and `at` in the path keep
    /// its timing.
    Lean,
}

impl EventLevel {
    /// Whether an event of `kind` is stored. Everything is at `full`; at
    /// `lean`, `accepted`, `handoff` and `tool_called` go live, unstored.
    /// The only place the level decides anything.
    #[must_use]
    pub(crate) fn stores(self, kind: &baton_proto::EventType) -> bool {
        use baton_proto::EventType::{Accepted, Handoff, ToolCalled};
        self == Self::Full || !matches!(kind, Accepted | Handoff | ToolCalled)
    }
}

/// To whom a worker sends the events its [`EventLevel`] does not store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LiveEvents {
    /// Only while someone follows the session or every session (a key in
    /// the `BATON_FOLLOWERS` bucket: the console, `baton live`, a client
    /// following a session, the router's relay). A session nobody follows
    /// costs no live publish.
    #[default]
    Followed,
    /// Always, followed or not: for subscribers of `<prefix>.live.*` that
    /// do not write a follower key.
    Always,
}

impl WorkerConfig {
    /// Defaults for agent type `agent`, with a fresh instance id.
    #[must_use]
    pub fn new(agent: AgentName) -> Self {
        Self {
            agent,
            instance: new_instance_id(),
            version: None,
            versioned: false,
            upgrade_next_turn: false,
            rollout: None,
            subjects: Subjects::default(),
            fallback: None,
            ack_wait: Duration::from_secs(30),
            max_payload: DEFAULT_MAX_PAYLOAD,
            shutdown_grace: Duration::from_secs(20),
            pull_expires: Duration::from_secs(5),
            streams: StreamSettings::default(),
            profile: Profile::default(),
            heartbeat_interval: Duration::from_secs(2),
            use_registry: true,
            lookup_budget: Duration::from_secs(3),
            registry_memory: Duration::from_secs(30),
            max_delegation_depth: 4,
            join_timeout: None,
            claims: ClaimSettings::default(),
            max_deliveries: 20,
            settle: SettleMode::default(),
            events: EventLevel::default(),
            live: LiveEvents::default(),
            accepted_after: Duration::from_millis(100),
            hand_back: false,
            compact_events: true,
        }
    }

    /// Sets whether events keep once what they hold twice (the default;
    /// off writes every event whole, as version 1, for older readers).
    #[must_use]
    pub fn with_compact_events(mut self, compact: bool) -> Self {
        self.compact_events = compact;
        self
    }

    /// Sets how long an agent runs before its `accepted` event is stored
    /// on its own (zero: at once, never folded).
    #[must_use]
    pub fn with_accepted_after(mut self, after: Duration) -> Self {
        self.accepted_after = after;
        self
    }

    /// Sets which events are stored.
    #[must_use]
    pub fn with_events(mut self, events: EventLevel) -> Self {
        self.events = events;
        self
    }

    /// Sets to whom unstored events go live.
    #[must_use]
    pub fn with_live(mut self, live: LiveEvents) -> Self {
        self.live = live;
        self
    }

    /// Sets how handled messages are acknowledged.
    #[must_use]
    pub fn with_settle(mut self, settle: SettleMode) -> Self {
        self.settle = settle;
        self
    }

    /// Sets how many unsettled deliveries a message may have.
    #[must_use]
    pub fn with_max_deliveries(mut self, deliveries: u32) -> Self {
        self.max_deliveries = deliveries;
        self
    }

    /// Sets how deep delegations may nest.
    #[must_use]
    pub fn with_max_delegation_depth(mut self, depth: u32) -> Self {
        self.max_delegation_depth = depth;
        self
    }

    /// Sets how long a delegation waits for its children.
    #[must_use]
    pub fn with_join_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.join_timeout = timeout;
        self
    }

    /// Sets what the worker advertises to the registry.
    #[must_use]
    pub fn with_profile(mut self, profile: Profile) -> Self {
        self.profile = profile;
        self
    }

    /// Sets the heartbeat interval.
    #[must_use]
    pub fn with_heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = interval;
        self
    }

    /// Turns registry lookups on or off.
    #[must_use]
    pub fn with_registry(mut self, use_registry: bool) -> Self {
        self.use_registry = use_registry;
        self
    }

    /// Sets how long lookups may be retried before the fallback path is taken.
    #[must_use]
    pub fn with_lookup_budget(mut self, budget: Duration) -> Self {
        self.lookup_budget = budget;
        self
    }

    /// Sets how old a remembered registry answer may be during an outage.
    #[must_use]
    pub fn with_registry_memory(mut self, max_age: Duration) -> Self {
        self.registry_memory = max_age;
        self
    }

    /// Sets the claim-check settings.
    #[must_use]
    pub fn with_claims(mut self, claims: ClaimSettings) -> Self {
        self.claims = claims;
        self
    }

    /// Sets whether conversation turns this agent takes part in hand the
    /// conversation back to its entry ([`WorkerConfig::hand_back`]).
    #[must_use]
    pub fn with_hand_back(mut self, hand_back: bool) -> Self {
        self.hand_back = hand_back;
        self
    }

    /// Sets the fallback agent.
    #[must_use]
    pub fn with_fallback(mut self, fallback: Option<AgentName>) -> Self {
        self.fallback = fallback;
        self
    }

    /// Sets the subject prefix.
    #[must_use]
    pub fn with_subjects(mut self, subjects: Subjects) -> Self {
        self.subjects = subjects;
        self
    }

    /// Sets the consumer's `ack_wait` (used when the consumer is created).
    #[must_use]
    pub fn with_ack_wait(mut self, ack_wait: Duration) -> Self {
        self.ack_wait = ack_wait;
        self
    }

    /// Sets the payload size limit.
    #[must_use]
    pub fn with_max_payload(mut self, max_payload: usize) -> Self {
        self.max_payload = max_payload;
        self
    }

    /// Sets the shutdown grace period.
    #[must_use]
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Sets the instance id.
    #[must_use]
    pub fn with_instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = instance.into();
        self
    }

    /// Sets the version of the agent type this process runs (an
    /// operator's label: `"2"`, a git sha, a date). The worker takes only
    /// that version's work (see "Deploying a new version" in the docs); the
    /// first version of an agent type to run is its current one.
    #[must_use]
    pub fn with_version(mut self, version: Version) -> Self {
        self.version = Some(version);
        self.versioned = true;
        self
    }

    /// Moves the conversations pinned to this version to the current
    /// version at their next turn, once another version is current.
    #[must_use]
    pub fn with_upgrade_next_turn(mut self, upgrade: bool) -> Self {
        self.upgrade_next_turn = upgrade;
        self
    }

    /// Starts `rollout` (a gated rollout of this worker's version) when the
    /// version waits for one as the worker starts.
    #[must_use]
    pub fn with_rollout(mut self, rollout: Option<baton_proto::Gated>) -> Self {
        self.rollout = rollout;
        self
    }

    /// Labels the process with `version` (a spec file's hash) without
    /// versioning its work: shown in heartbeats and events only.
    #[must_use]
    pub fn with_version_label(mut self, version: Version) -> Self {
        self.version = Some(version);
        self.versioned = false;
        self
    }

    /// The version this worker takes work for, when it was named.
    #[must_use]
    pub fn serves_version(&self) -> Option<&Version> {
        self.version.as_ref().filter(|_| self.versioned)
    }

    /// The subject of this worker's work: its version's, or its agent
    /// type's.
    #[must_use]
    pub fn work_subject(&self) -> String {
        match self.serves_version() {
            Some(version) => self.subjects.agent_version(&self.agent, version),
            None => self.subjects.agent(&self.agent),
        }
    }

    /// The durable consumer this worker pulls from.
    #[must_use]
    pub fn work_consumer(&self) -> String {
        match self.serves_version() {
            Some(version) => Subjects::version_consumer(&self.agent, version),
            None => Subjects::agent_consumer(&self.agent),
        }
    }

    /// Sets the stream settings.
    #[must_use]
    pub fn with_streams(mut self, streams: StreamSettings) -> Self {
        self.streams = streams;
        self
    }
}

/// What a worker advertises to the registry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Profile {
    /// What the agent can do.
    pub capabilities: Vec<String>,
    /// Knowledge domains.
    pub domains: Vec<String>,
    /// Tier: 1 is the first line; higher tiers take harder work.
    pub tier: u32,
    /// What the agent type does, in a sentence.
    pub description: Option<String>,
    /// The JSON Schema (as JSON text) of the arguments it takes as an MCP
    /// tool; `None` for the gateway's own.
    pub tool_schema: Option<String>,
}

/// A fresh instance id: 12 hex digits, a valid subject token.
#[must_use]
pub fn new_instance_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

/// Live counters of a worker, for heartbeats and tests.
#[derive(Debug, Default)]
pub struct WorkerStats {
    pub(crate) in_flight: AtomicU64,
    pub(crate) processed: AtomicU64,
    pub(crate) failed: AtomicU64,
}

impl WorkerStats {
    /// Deliveries being handled now.
    #[must_use]
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Deliveries settled since start.
    #[must_use]
    pub fn processed(&self) -> u64 {
        self.processed.load(Ordering::Relaxed)
    }

    /// Deliveries that ended in failure (dead letter) since start.
    #[must_use]
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
}
