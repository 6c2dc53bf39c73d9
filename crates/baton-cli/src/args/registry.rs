//! The registry and what it learned: `baton registry`, `agents`, `feedback`, `notebook`.

use clap::Args;

use super::MetricsArgs;

#[derive(Debug, Args)]
pub struct RegistryArgs {
    #[command(flatten)]
    pub metrics: MetricsArgs,

    /// The workers' heartbeat interval, in ms: instances silent for three intervals are dropped,
    /// backlogs are read this often, and a starting replica listens this long before it answers.
    #[arg(long, default_value_t = 2000)]
    pub heartbeat_ms: u64,

    /// Rank by today's fixed weights only: what outcomes taught is not used (outcomes, feedback
    /// and notebooks are still kept).
    #[arg(long, env = "BATON_REGISTRY_NO_LEARNING")]
    pub no_learning: bool,

    /// How many of an agent type's most recent sessions of a kind of work its learned estimate
    /// is made of: smaller notices sooner that an agent got worse, larger is steadier.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub learning_window: u32,
}

#[derive(Debug, Args)]
pub struct FeedbackArgs {
    /// The session, as `baton send` printed it.
    pub session: String,

    /// How well it went: 0 (not resolved) to 1 (fully resolved).
    #[arg(long, allow_negative_numbers = true)]
    pub score: f64,

    /// What to say about it (kept with the score; at most 2000 characters).
    #[arg(long)]
    pub note: Option<String>,

    /// How long to keep asking when no registry answers, in ms.
    #[arg(long, default_value_t = 3000)]
    pub timeout_ms: u64,
}

#[derive(Debug, Args)]
pub struct NotebookArgs {
    /// The agent type.
    pub agent: String,

    /// Print the notebook as JSON.
    #[arg(long)]
    pub json: bool,

    /// How long to keep asking when no registry answers, in ms.
    #[arg(long, default_value_t = 3000)]
    pub timeout_ms: u64,
}

#[derive(Debug, Args)]
pub struct AgentsArgs {
    /// Print the registry's answer as JSON.
    #[arg(long)]
    pub json: bool,

    /// Rank the agent types that fit --requires (and --domains, --query, --prefer), best
    /// first, and explain each score.
    #[arg(long)]
    pub why: bool,

    /// With --why: the capabilities the work needs.
    #[arg(long, value_delimiter = ',', value_name = "CAP,...", requires = "why")]
    pub requires: Vec<String>,

    /// With --why: knowledge domains, of which an agent needs one.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "DOMAIN,...",
        requires = "why"
    )]
    pub domains: Vec<String>,

    /// With --why: the task's text, so that similar past sessions vote.
    #[arg(long, requires = "why")]
    pub query: Option<String>,

    /// With --why: an agent type whose notebook counts (its good collaborators rank higher).
    #[arg(long, requires = "why")]
    pub prefer: Option<String>,

    /// How long to keep asking when no registry answers, in ms.
    #[arg(long, default_value_t = 3000)]
    pub timeout_ms: u64,
}
