//! What a worker tells the registry and how it uses it; how it settles a
//! handled message, and which events it stores and sends live.

use clap::Args;

/// What a worker tells the registry, and how it uses it.
#[derive(Debug, Args)]
#[command(next_help_heading = "Registry options")]
pub struct WorkerRegistryArgs {
    /// Capabilities to advertise, comma-separated (demo types have their own by default).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "CAP,...",
        conflicts_with = "spec"
    )]
    pub capabilities: Option<Vec<String>>,

    /// Knowledge domains to advertise, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "DOMAIN,...",
        conflicts_with = "spec"
    )]
    pub domains: Option<Vec<String>>,

    /// Tier to advertise: 1 is the first line (demo types have their own by default).
    #[arg(long, conflicts_with = "spec")]
    pub tier: Option<u32>,

    /// Heartbeat interval, in ms.
    #[arg(long, default_value_t = 2000)]
    pub heartbeat_ms: u64,

    /// Do not ask the registry: escalations and rejections go straight to the
    /// fallback, and capability handoffs fail with `no_route`.
    #[arg(long)]
    pub no_registry: bool,

    /// How long a lookup may be retried when no registry answers before the
    /// fallback path is taken, in ms.
    #[arg(long, default_value_t = 3000)]
    pub lookup_budget_ms: u64,

    /// While no registry answers, route from the registry's last answer to the same
    /// request if it is at most this old, in seconds (0: never; then the fallback path).
    /// After one unanswered lookup the registry counts as down for 5 s, and lookups do not
    /// wait for it meanwhile.
    #[arg(long, env = "BATON_REGISTRY_MEMORY_SECS", default_value_t = 30)]
    pub registry_memory_secs: u64,
}

/// `--settle`: how a worker acknowledges a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Settle {
    /// Wait for the server's confirmation.
    Confirmed,
    /// Send the acknowledgement and go on.
    Plain,
}

impl From<Settle> for baton_worker::SettleMode {
    fn from(settle: Settle) -> Self {
        match settle {
            Settle::Confirmed => Self::Confirmed,
            Settle::Plain => Self::Plain,
        }
    }
}

/// `--events`: which session events a worker stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Events {
    /// Every event.
    Full,
    /// Only what replay needs.
    Lean,
}

/// `--live`: to whom unstored events go live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Live {
    /// Only to sessions someone follows.
    Followed,
    /// Always.
    Always,
}

impl From<Live> for baton_worker::LiveEvents {
    fn from(live: Live) -> Self {
        match live {
            Live::Followed => Self::Followed,
            Live::Always => Self::Always,
        }
    }
}

impl From<Events> for baton_worker::EventLevel {
    fn from(events: Events) -> Self {
        match events {
            Events::Full => Self::Full,
            Events::Lean => Self::Lean,
        }
    }
}
