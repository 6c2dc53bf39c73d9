//! `baton doctor`'s options.

use clap::Args;

/// What `baton doctor` checks, and how it reports.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print the findings as JSON (one object with a `findings` array) for scripts.
    #[arg(long)]
    pub json: bool,

    /// Report the consumer of an agent type that has had no live worker for this long, in
    /// seconds.
    #[arg(long, default_value_t = 3600, value_name = "SECS")]
    pub stale_after_secs: u64,

    /// The claim-check threshold the workers are given (their --claim-threshold), to check
    /// against the servers' max_payload [default: half the smallest max_payload, as workers
    /// use].
    #[arg(long, env = "BATON_CLAIM_THRESHOLD", value_name = "BYTES")]
    pub claim_threshold: Option<usize>,

    /// A user of the system account, to read each server's fsync setting
    /// (`$SYS.REQ.SERVER.PING.VARZ`): a server URL with its credentials, such as
    /// nats://sys:PASSWORD@host:4222 [default: the main connection, if its user may ask].
    #[arg(
        long,
        env = "BATON_SYSTEM_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub system_url: Option<String>,

    /// How long each server, and the registry, may take to answer, in ms.
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    pub timeout_ms: u64,
}
