//! A version whose spec says how it rolls out (`[rollout]`): its first
//! worker starts the gated rollout, when the version waits for one (it
//! has run, and has never taken new work) and no other rollout of the type
//! is under way. The routers judge it from then on.

use async_nats::jetstream::kv;
use baton_nats::Error;
use baton_nats::state::rollouts;
use baton_proto::{Gated, Version, VersionRole, now_ms};

use crate::config::WorkerConfig;

/// Starts `plan` for `version`, by compare-and-swap; nothing when the
/// version does not wait for a rollout, or another is under way.
pub(crate) async fn start(
    store: &kv::Store,
    config: &WorkerConfig,
    version: &Version,
    plan: &Gated,
) -> Result<(), Error> {
    let agent = config.agent.as_str();
    loop {
        let Some((mut rollout, revision)) = rollouts::read(store, agent).await? else {
            return Ok(());
        };
        let under_way =
            rollout.ramp.is_some() || rollout.gated.as_ref().is_some_and(|g| g.ended.is_none());
        if rollout.role(version.as_str()) != VersionRole::Waiting || under_way {
            return Ok(());
        }
        let mut fresh = plan.clone();
        fresh.id = uuid::Uuid::new_v4();
        fresh.since = now_ms();
        fresh.version = version.clone();
        rollout.start_gated(fresh, now_ms());
        if rollouts::write(store, &rollout, revision).await? {
            tracing::info!(agent, version = %version, steps = ?plan.steps, "this version rolls itself out, as its spec's [rollout] says: the routers promote it or roll it back by its sessions' outcomes");
            return Ok(());
        }
    }
}
