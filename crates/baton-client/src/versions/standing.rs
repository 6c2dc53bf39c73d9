//! One agent type's versions as they stand: each version's state and
//! weight in the rollout, its live workers, its queue, and what holds it.

use std::collections::BTreeMap;

use baton_proto::{Rollout, RolloutChange, VersionRole};
use serde::Serialize;

use super::holding::Holding;

/// What is read of an agent type's versions (see
/// [`Versions::gather`](super::Versions::gather)).
#[derive(Debug, Clone)]
pub struct Gathered {
    /// Each version's consumer, and the type's own (under "").
    pub(super) queues: BTreeMap<String, Queue>,
    /// Live workers by version, from the registry; `None` when none answered.
    pub(super) workers: Option<BTreeMap<String, u32>>,
    /// What holds each version.
    pub(super) held: BTreeMap<String, Holding>,
}

impl Gathered {
    /// Live workers of `version`; `None` when no registry answered.
    #[must_use]
    pub fn workers_of(&self, version: &str) -> Option<u32> {
        (self.workers.as_ref()).map(|w| w.get(version).copied().unwrap_or(0))
    }

    /// What holds `version`.
    #[must_use]
    pub fn holding(&self, version: &str) -> Holding {
        self.held.get(version).copied().unwrap_or_default()
    }
}

/// A version's consumer: what waits, what runs, and who pulls.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Queue {
    /// Messages waiting.
    pub pending: u64,
    /// Messages delivered and not yet acknowledged.
    pub unacked: u64,
    /// Pull requests waiting: workers that are idle now.
    pub pulling: u64,
}

/// One version of an agent type as it stands.
#[derive(Debug, Clone, Serialize)]
pub struct VersionRow {
    /// The version.
    pub version: String,
    /// `current`, `ramping`, `waiting` (never took new work), `draining`
    /// (took new work, takes none now) or `retired`.
    pub state: &'static str,
    /// Percent of new sessions it takes.
    pub weight: u8,
    /// Live workers, by the registry; `None` when no registry answered.
    pub workers: Option<u32>,
    /// Messages waiting on its consumer.
    pub pending: u64,
    /// Messages its workers have and have not acknowledged.
    pub unacked: u64,
    /// Tasks pinned to it anywhere on the tasks stream (at any agent type).
    pub tasks: u64,
    /// Tasks pinned to it in the inbox.
    pub inbox: u64,
    /// Conversations pinned to it.
    pub conversations: u64,
    /// Delegations pinned to it that wait for their children.
    pub delegations: u64,
}

/// An agent type's versions as they stand.
#[derive(Debug, Clone, Serialize)]
pub struct Standing {
    /// The agent type.
    pub agent: String,
    /// Its current version.
    pub current: String,
    /// The version that was current before, where `--back` goes.
    pub previous: Option<String>,
    /// Each version, in order of their labels.
    pub versions: Vec<VersionRow>,
    /// Messages on the agent type's own subject, which no versioned worker
    /// takes (sent by a sender of an earlier release, or before the type
    /// was versioned): its versioned workers move them to their versions.
    pub unversioned: Queue,
    /// Whether a registry answered (else no worker counts are known).
    pub registry: bool,
    /// The rollout's changes, oldest first.
    pub history: Vec<RolloutChange>,
}

impl Standing {
    /// `rollout`'s versions as `gathered` found them.
    #[must_use]
    pub fn of(rollout: &Rollout, gathered: &Gathered) -> Self {
        let weights = rollout.weights();
        let queued = gathered.queues.keys().map(String::as_str);
        let mut names: Vec<&str> = queued.filter(|v| !v.is_empty()).collect();
        names.extend(weights.keys().map(|v| v.as_str()));
        names.extend(rollout.retired.iter().map(|v| v.as_str()));
        names.extend(
            gathered
                .workers
                .iter()
                .flat_map(BTreeMap::keys)
                .map(String::as_str),
        );
        names.extend(gathered.held.keys().map(String::as_str));
        names.sort();
        names.dedup();
        let versions = names
            .into_iter()
            .map(|version| {
                let queue = gathered.queues.get(version).copied().unwrap_or_default();
                let held = gathered.holding(version);
                VersionRow {
                    state: state(rollout, version, &held),
                    weight: weights.get(version).copied().unwrap_or(0),
                    workers: gathered.workers_of(version),
                    pending: queue.pending,
                    unacked: queue.unacked,
                    tasks: held.messages,
                    inbox: held.inbox,
                    conversations: held.conversations,
                    delegations: held.delegations,
                    version: version.to_owned(),
                }
            })
            .collect();
        Self {
            agent: rollout.agent.to_string(),
            current: rollout.current.to_string(),
            previous: rollout.previous.as_ref().map(ToString::to_string),
            versions,
            unversioned: gathered.queues.get("").copied().unwrap_or_default(),
            registry: gathered.workers.is_some(),
            history: rollout.history.clone(),
        }
    }

    /// The version taking a share of new work, and its weight.
    #[must_use]
    pub fn ramping(&self) -> Option<&VersionRow> {
        self.versions.iter().find(|row| row.state == "ramping")
    }
}

/// `version`'s state. A version the rollout has never sent work to waits,
/// unless work is pinned to it all the same (by a rollout written before
/// the history was kept): that work drains.
fn state(rollout: &Rollout, version: &str, held: &Holding) -> &'static str {
    match rollout.role(version) {
        VersionRole::Waiting if !held.is_empty() => VersionRole::Draining.as_str(),
        role => role.as_str(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gathered(held: &[(&str, Holding)], workers: &[(&str, u32)]) -> Gathered {
        Gathered {
            queues: BTreeMap::new(),
            workers: Some(workers.iter().map(|(v, n)| ((*v).to_owned(), *n)).collect()),
            held: held.iter().map(|(v, h)| ((*v).to_owned(), *h)).collect(),
        }
    }

    #[test]
    fn each_version_says_what_is_true_of_it() {
        let mut rollout = Rollout::first(
            &baton_proto::AgentName::from_static("helper"),
            &baton_proto::Version::from_static("1"),
            0,
        );
        rollout.ramp_to(&baton_proto::Version::from_static("2"), 50, 1);
        let pinned = Holding {
            conversations: 2,
            ..Holding::default()
        };
        let found = gathered(&[("4", pinned)], &[("1", 1), ("2", 1), ("3", 1)]);
        let standing = Standing::of(&rollout, &found);
        let states: Vec<(&str, &str, u8)> = (standing.versions.iter())
            .map(|r| (r.version.as_str(), r.state, r.weight))
            .collect();
        assert_eq!(
            states,
            [
                ("1", "current", 50),
                ("2", "ramping", 50),
                ("3", "waiting", 0),
                ("4", "draining", 0)
            ]
        );
        assert_eq!(standing.ramping().map(|r| r.version.as_str()), Some("2"));
        assert_eq!(standing.history.len(), 2);
    }
}
