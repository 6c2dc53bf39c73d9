//! A worker's heartbeats to the registry, and what it uses of the
//! registry (heartbeats and lookups).

use std::sync::Arc;
use std::time::Duration;

use baton_proto::{AgentName, Footprint, Heartbeat, Subjects, Wire, now_ms};

use crate::config::{WorkerConfig, WorkerStats};

/// Publishes the worker's heartbeat every interval until aborted.
pub(crate) fn spawn_heartbeats(
    client: async_nats::Client,
    config: &WorkerConfig,
    max_concurrency: usize,
    stats: Arc<WorkerStats>,
) -> tokio::task::JoinHandle<()> {
    let interval = config.heartbeat_interval.max(Duration::from_millis(10));
    let subject = config.subjects.heartbeat(&config.agent, &config.instance);
    let profile = &config.profile;
    let mut beat = Heartbeat {
        agent: config.agent.clone(),
        instance: config.instance.clone(),
        capabilities: profile.capabilities.clone(),
        domains: profile.domains.clone(),
        tier: profile.tier,
        in_flight: 0,
        max_concurrency: u32::try_from(max_concurrency).unwrap_or(u32::MAX),
        processed: 0,
        failed: 0,
        at: 0,
        interval_ms: Some(u64::try_from(interval.as_millis()).unwrap_or(u64::MAX)),
        description: profile.description.clone(),
        tool_schema: profile.tool_schema.clone(),
        version: config.version.clone(),
        extra: baton_proto::Map::new(),
    };
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            beat.in_flight = u32::try_from(stats.in_flight()).unwrap_or(u32::MAX);
            beat.processed = stats.processed();
            beat.failed = stats.failed();
            beat.at = now_ms();
            match beat.to_msgpack() {
                Ok(payload) => {
                    if let Err(err) = client.publish(subject.clone(), payload.into()).await {
                        tracing::debug!(error = %err, "could not send a heartbeat");
                    }
                }
                Err(err) => tracing::warn!(error = %err, "cannot encode a heartbeat"),
            }
        }
    })
}

/// What a worker of `agent` uses of the registry: its heartbeats and lookups.
#[must_use]
pub(crate) fn footprint(subjects: &Subjects, agent: &AgentName) -> Footprint {
    Footprint::new().publishes([subjects.heartbeat(agent, "*"), subjects.lookup()])
}
