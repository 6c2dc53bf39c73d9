//! `baton registry`: a registry replica.

use std::process::ExitCode;
use std::time::Duration;

use baton_proto::Subjects;
use clap::Args;

use super::metrics::MetricsArgs;
use super::stop::Stop;
use crate::nats::NatsArgs;

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

    /// How long the replica may take to stop on SIGTERM or Ctrl-C, in seconds; it then
    /// exits regardless. It holds no messages (the other replicas answer lookups), so it
    /// normally stops at once. A second SIGTERM or Ctrl-C exits at once.
    #[arg(long, default_value_t = 5, value_name = "SECS")]
    pub shutdown_grace_secs: u64,
}

pub async fn run(
    nats: &NatsArgs,
    subjects: Subjects,
    args: RegistryArgs,
) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.heartbeat_ms >= 10,
        "--heartbeat-ms {} is too short: use at least 10 (the default is 2000)",
        args.heartbeat_ms
    );
    let learning = baton_registry::LearningConfig {
        enabled: !args.no_learning,
        window: args.learning_window as usize,
        ..baton_registry::LearningConfig::default()
    };
    let config = baton_registry::RegistryConfig::default()
        .with_subjects(subjects)
        .with_heartbeat_interval(Duration::from_millis(args.heartbeat_ms))
        .with_learning(learning);
    let client = crate::nats::connect(
        nats,
        None,
        &baton_ops::Role::of(baton_ops::RoleKind::Registry),
    )
    .await?;
    baton_telemetry::serve::watch(client.client(), false);
    let stop = Stop::listen(
        Duration::from_secs(args.shutdown_grace_secs),
        Some(client.client().clone()),
        super::stop::nothing("nothing: a registry replica holds no messages"),
    );
    baton_registry::Registry::new(client.client().clone(), config)
        .run(stop.signal())
        .await?;
    Ok(ExitCode::SUCCESS)
}
