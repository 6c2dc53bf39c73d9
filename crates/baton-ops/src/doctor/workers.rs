//! Whether each agent type's consumer has live workers: a consumer nobody
//! pulls from, with tasks waiting, is an outage.

use std::time::Duration;

use super::facts::Facts;
use super::finding::{Finding, Level};

pub(super) fn consumers(facts: &Facts) -> Vec<Finding> {
    let mut found = Vec::new();
    for consumer in &facts.consumers {
        let Some(agent) = &consumer.agent else {
            continue;
        };
        let registered = facts
            .live
            .as_ref()
            .and_then(|live| live.get(agent))
            .is_some_and(|n| *n > 0);
        if registered || consumer.waiting > 0 {
            continue;
        }
        let idle = facts.now.saturating_sub(consumer.last_active);
        let idle = Duration::from_secs(u64::try_from(idle).unwrap_or(0));
        if idle < facts.stale_after {
            continue;
        }
        let waiting = match consumer.pending {
            0 => String::new(),
            n => format!(", and {n} task(s) wait in it"),
        };
        let (level, fix) = match agent.split_once('@') {
            Some((agent, version)) if consumer.pending > 0 => (
                Level::Error,
                format!(
                    "work is pinned to version {version} of {agent}: start a worker of it (`version = \"{version}\"` in its spec, or `baton worker {agent} --version {version}`)"
                ),
            ),
            Some((agent, version)) => (
                Level::Warn,
                format!(
                    "if version {version} of {agent} is done (`baton versions {agent}` shows nothing pinned to it), remove its consumer: `nats consumer rm {} {}`",
                    facts.tasks_stream, consumer.name
                ),
            ),
            None => consumers_fix(facts, agent, consumer),
        };
        found.push(
            Finding::new(
                "consumers",
                level,
                &consumer.name,
                format!(
                    "no live worker of {agent} for {} (consumer {}){waiting}",
                    human(idle),
                    consumer.name
                ),
            )
            .fix(fix),
        );
    }
    if found.is_empty() && !facts.consumers.is_empty() {
        let how = if facts.live.is_some() {
            "as the registry and pull requests show"
        } else {
            "as pull requests show; no registry answered"
        };
        found.push(Finding::new(
            "consumers",
            Level::Ok,
            "",
            format!("every agent type's consumer has had a live worker lately, {how}"),
        ));
    }
    found
}

/// How long a rollout may stay part-way before the doctor says so.
const PART_WAY: Duration = Duration::from_secs(24 * 3600);

/// Each versioned agent type's rollout: one left part-way for a day (a
/// ramp nobody finished or ended).
pub(super) fn rollouts(facts: &Facts) -> Vec<Finding> {
    let mut found = Vec::new();
    for rollout in &facts.rollouts {
        let Some(ramp) = &rollout.ramp else {
            continue;
        };
        if rollout.gated.as_ref().is_some_and(|g| g.ended.is_none()) {
            // A gated rollout ramps on purpose: see `gated`.
            continue;
        }
        let part_way = since(facts, rollout.at);
        if part_way < PART_WAY {
            continue;
        }
        let agent = &rollout.agent;
        found.push(
            Finding::new(
                "versions",
                Level::Warn,
                agent.as_str(),
                format!(
                    "the rollout of {agent} to version {} has stayed at {}% for {} (the rest goes to {})",
                    ramp.version,
                    ramp.weight,
                    human(part_way),
                    rollout.current
                ),
            )
            .fix(format!(
                "finish it (`baton rollout {agent} --to {} --weight 100`) or end it (`baton rollout {agent} --back`)",
                ramp.version
            )),
        );
    }
    found
}

/// Each gated rollout under way: one whose step has waited a day for a
/// decision (too few sessions, or gates that do not hold), and a gate on a
/// metric neither version records.
pub(super) fn gated(facts: &Facts) -> Vec<Finding> {
    let mut found = Vec::new();
    for rollout in &facts.rollouts {
        let Some(gated) = rollout.gated.as_ref().filter(|g| g.is_running()) else {
            continue;
        };
        let agent = &rollout.agent;
        let waited = since(facts, gated.since);
        let sides = facts.gated.get(agent.as_str());
        if waited >= PART_WAY {
            let new = sides.map_or(0, |(_, new)| new.sessions);
            found.push(
                Finding::new(
                    "versions",
                    Level::Warn,
                    agent.as_str(),
                    format!(
                        "the gated rollout of {agent} to version {} has waited {} at {}% without a decision: {new} of the {} sessions of it a step needs",
                        gated.version,
                        human(waited),
                        gated.weight(),
                        gated.min_sessions
                    ),
                )
                .fix(format!(
                    "see `baton versions {agent}`; start it again with a lower --min-sessions, or decide by hand (`baton rollout {agent} --back`, or --to {} --weight 100)",
                    gated.version
                )),
            );
        }
        let Some((base, new)) = sides else { continue };
        for gate in &gated.gates {
            let unrecorded = match gate.metric {
                baton_proto::Metric::Success => false,
                baton_proto::Metric::Cost => {
                    // A ratio to nothing, or to a version without prices.
                    base.cost_micros.is_none_or(|cost| cost <= 0.0) || new.cost_micros.is_none()
                }
                baton_proto::Metric::P50 | baton_proto::Metric::P95 => {
                    base.p50_ms.is_none() || new.p50_ms.is_none()
                }
            };
            if unrecorded && base.sessions > 0 && new.sessions > 0 {
                found.push(
                    Finding::new(
                        "versions",
                        Level::Warn,
                        agent.as_str(),
                        format!(
                            "the gated rollout of {agent} has the gate `{gate}` on a metric its sessions do not record, so it never holds and the step will roll back"
                        ),
                    )
                    .fix(format!(
                        "give the agent type prices (`[llm.price]`) for a cost gate, or start the rollout again without `{gate}`"
                    )),
                );
            }
        }
    }
    found
}

/// How long ago `at` (unix ms) was, by the facts' clock.
fn since(facts: &Facts, at: u64) -> Duration {
    let at = i64::try_from(at / 1000).unwrap_or(i64::MAX);
    Duration::from_secs(u64::try_from(facts.now.saturating_sub(at)).unwrap_or(0))
}

/// The fix for unversioned `agent`'s consumer without a live worker.
fn consumers_fix(
    facts: &Facts,
    agent: &str,
    consumer: &super::facts::ConsumerFacts,
) -> (Level, String) {
    if consumer.pending > 0 {
        (
            Level::Error,
            format!("start a worker: `baton worker {agent} …` (or `baton worker --spec …`)"),
        )
    } else {
        (
            Level::Warn,
            format!(
                "start a worker of {agent}, or, if the agent type is retired, remove the consumer: \
                 `nats consumer rm {} {}`",
                facts.tasks_stream, consumer.name
            ),
        )
    }
}

/// A duration as people read it: `45s`, `10m30s`, `3h12m`.
pub(crate) fn human(duration: Duration) -> String {
    let secs = duration.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    match (h, m, s) {
        (0, 0, _) if duration.subsec_millis() > 0 && secs < 10 => {
            format!("{}ms", duration.as_millis())
        }
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, 0, _) => format!("{h}h"),
        (h, m, _) => format!("{h}h{m}m"),
    }
}
