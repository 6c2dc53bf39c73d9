//! An agent type's versions and how new work is shared between them: the
//! value of its key in the rollouts bucket (`BATON_ROLLOUTS`, key = agent
//! type), read by every process that sends work to the type.
//!
//! A session (or a conversation) reaches a versioned agent type once
//! unpinned; it is then pinned to the version [`Rollout::choose`] picks for
//! its id, and keeps it for every later visit (the envelope's `versions`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{AgentName, Map, Version};

/// Where an agent type's new work goes, and what became of its versions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Rollout {
    /// Agent type.
    pub agent: AgentName,
    /// The version new sessions go to, but for the ramp's share.
    pub current: Version,
    /// The version that was current before, where `--back` goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<Version>,
    /// A version being rolled out, and the share of new sessions it takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp: Option<Ramp>,
    /// Versions retired: they take no work.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<Version>,
    /// Conversations pinned to a version marked to move to the current
    /// version at their next turn (`baton retire --upgrade-conversations`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upgrading: Vec<Version>,
    /// When it last changed, unix ms.
    #[serde(default)]
    pub at: u64,
    /// Extension: its changes, oldest first, each with where new work went
    /// after it (the last [`HISTORY_KEPT`]). A writer of an earlier release
    /// keeps it as it is, without adding its own change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Change>,
    /// Extension: the version being rolled out step by step, promoted or
    /// rolled back by its sessions' outcomes (`baton rollout --steps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gated: Option<crate::Gated>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// How many changes a rollout's history keeps (the oldest go first).
pub const HISTORY_KEPT: usize = 50;

/// One change of a rollout, as its history keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Change {
    /// When, unix ms.
    pub at: u64,
    /// What was done: `first` (the first version's worker started), `ramp`
    /// (a version takes a share), `promote` (a version made current),
    /// `stop` (a ramp ended at weight 0), `back` (new work sent back),
    /// `retire`, or `upgrade` (a version's idle conversations move on).
    pub what: String,
    /// The version it was done to.
    pub version: Version,
    /// The current version after it.
    pub current: Version,
    /// The ramp after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp: Option<Ramp>,
}

/// A version taking a share of new sessions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Ramp {
    /// The version.
    pub version: Version,
    /// Percent of new sessions and conversations it takes, 1 to 99.
    pub weight: u8,
}

impl Rollout {
    /// The rollout of `agent` whose first version is `version`: current,
    /// and the only one.
    #[must_use]
    pub fn first(agent: &AgentName, version: &Version, at: u64) -> Self {
        let mut first = Self {
            agent: agent.clone(),
            current: version.clone(),
            previous: None,
            ramp: None,
            retired: Vec::new(),
            upgrading: Vec::new(),
            at,
            history: Vec::new(),
            gated: None,
            extra: Map::new(),
        };
        first.noted("first", version, at);
        first
    }

    /// Keeps `what` was done to `version` at `at` in the history, with
    /// where new work goes now.
    fn noted(&mut self, what: &str, version: &Version, at: u64) {
        self.at = at;
        self.history.push(Change {
            at,
            what: what.to_owned(),
            version: version.clone(),
            current: self.current.clone(),
            ramp: self.ramp.clone(),
        });
        let over = self.history.len().saturating_sub(HISTORY_KEPT);
        self.history.drain(..over);
    }

    /// The version a session or conversation with id `sticky` starts on:
    /// the ramp's version for its share of ids, else the current one. The
    /// same id always gets the same answer while the rollout stands, and a
    /// larger weight only moves ids from the current version to the ramp's.
    #[must_use]
    pub fn choose(&self, sticky: &str) -> &Version {
        match &self.ramp {
            Some(ramp) if bucket_of(&self.agent, sticky) < u32::from(ramp.weight) * 100 => {
                &ramp.version
            }
            _ => &self.current,
        }
    }

    /// Sends `weight` percent of new sessions to `version`; 100 makes it
    /// current (the current one becomes the previous), 0 ends the ramp.
    pub fn ramp_to(&mut self, version: &Version, weight: u8, at: u64) {
        self.retired.retain(|retired| retired != version);
        let what = if weight >= 100 {
            if self.current != *version {
                self.previous = Some(std::mem::replace(&mut self.current, version.clone()));
            }
            self.ramp = None;
            "promote"
        } else if weight == 0 || *version == self.current {
            self.ramp = None;
            "stop"
        } else {
            self.ramp = Some(Ramp {
                version: version.clone(),
                weight,
            });
            "ramp"
        };
        self.noted(what, version, at);
    }

    /// Retires `version`: it takes nothing from now on. `false` when it
    /// was retired already.
    pub fn retire(&mut self, version: &Version, at: u64) -> bool {
        if self.retired.contains(version) {
            return false;
        }
        self.retired.push(version.clone());
        self.noted("retire", version, at);
        true
    }

    /// Marks `version`'s idle conversations to move to the current version
    /// at their next turn. `false` when they were marked already.
    pub fn upgrade(&mut self, version: &Version, at: u64) -> bool {
        if self.upgrading.contains(version) {
            return false;
        }
        self.upgrading.push(version.clone());
        self.noted("upgrade", version, at);
        true
    }

    /// New sessions go back to the previous version at once: a ramp ends,
    /// or, with none, the previous version is current again. `false` when
    /// there is nothing to go back to.
    pub fn back(&mut self, at: u64) -> bool {
        if let Some(ramp) = self.ramp.take() {
            self.noted("back", &ramp.version, at);
            return true;
        }
        let Some(previous) = self.previous.take() else {
            return false;
        };
        let rolled_back = std::mem::replace(&mut self.current, previous);
        self.previous = Some(rolled_back.clone());
        self.noted("back", &rolled_back, at);
        true
    }

    /// Whether `version` has ever taken new work: it is or was current, or
    /// takes or took a share. A rollout written before the history was
    /// kept knows only its current, previous and ramping versions.
    #[must_use]
    pub fn has_served(&self, version: &str) -> bool {
        self.current == version
            || self.previous.as_deref() == Some(version)
            || self
                .ramp
                .as_ref()
                .is_some_and(|ramp| ramp.version == version)
            || self.history.iter().any(|change| {
                change.current == version
                    || change
                        .ramp
                        .as_ref()
                        .is_some_and(|ramp| ramp.version == version)
            })
    }

    /// What `version` is now: current, ramping, retired, waiting (its
    /// workers run, but it has never taken new work), or draining (it took
    /// new work and takes none now: what is pinned to it finishes on it).
    #[must_use]
    pub fn role(&self, version: &str) -> Role {
        if self.current == version {
            Role::Current
        } else if self
            .ramp
            .as_ref()
            .is_some_and(|ramp| ramp.version == version)
        {
            Role::Ramping
        } else if self.retired.iter().any(|retired| retired == version) {
            Role::Retired
        } else if self.has_served(version) {
            Role::Draining
        } else {
            Role::Waiting
        }
    }

    /// The share of new sessions each version takes, in percent.
    #[must_use]
    pub fn weights(&self) -> BTreeMap<Version, u8> {
        let ramp = self.ramp.as_ref().map_or(0, |ramp| ramp.weight);
        let mut weights = BTreeMap::from([(self.current.clone(), 100 - ramp)]);
        if let Some(ramp) = &self.ramp {
            weights.insert(ramp.version.clone(), ramp.weight);
        }
        weights
    }
}

/// What a version of an agent type is in its rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// New sessions go to it (but for a ramp's share).
    Current,
    /// It takes a share of new sessions.
    Ramping,
    /// It has never taken new work: its workers wait for a rollout.
    Waiting,
    /// It takes no new sessions; what is pinned to it finishes on it.
    Draining,
    /// It takes nothing.
    Retired,
}

impl Role {
    /// Its name, as `baton versions` shows it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Current => "current",
            Self::Ramping => "ramping",
            Self::Waiting => "waiting",
            Self::Draining => "draining",
            Self::Retired => "retired",
        }
    }
}

/// Where id `sticky` falls for agent type `agent`, 0 to 9,999: the first
/// four bytes of the SHA-256 of both, so every process agrees and the
/// types of one session fall independently.
fn bucket_of(agent: &str, sticky: &str) -> u32 {
    use sha2::Digest as _;
    let mut hash = sha2::Sha256::new();
    hash.update(agent.as_bytes());
    hash.update([0]);
    hash.update(sticky.as_bytes());
    let digest = hash.finalize();
    let first = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    first % 10_000
}

impl Rollout {
    /// Starts `gated`: its version takes the first step's share.
    pub fn start_gated(&mut self, gated: crate::Gated, at: u64) {
        self.ramp_to(&gated.version, gated.weight(), at);
        self.gated = Some(gated);
    }

    /// The running gated rollout `id`, at `step`.
    fn gated_at(&mut self, id: uuid::Uuid, step: u32) -> Option<&mut crate::Gated> {
        (self.gated.as_mut()).filter(|g| g.id == id && g.step == step && g.is_running())
    }

    /// Moves gated rollout `id` on from `step`: its version takes the next
    /// step's share, or, past the last, becomes current. `false` when it
    /// is no longer at `step` (another router decided first), or stopped.
    pub fn gate_promote(&mut self, id: uuid::Uuid, step: u32, at: u64) -> bool {
        let Some(gated) = self.gated_at(id, step) else {
            return false;
        };
        let last = gated.steps.len().saturating_sub(1);
        let next = usize::try_from(step + 1).unwrap_or(usize::MAX);
        let version = gated.version.clone();
        let weight = if next > last {
            gated.ended = Some("promoted".to_owned());
            100
        } else {
            gated.step = step + 1;
            gated.since = at;
            gated.weight()
        };
        if weight >= 100 {
            gated.ended = Some("promoted".to_owned());
        }
        self.ramp_to(&version, weight, at);
        true
    }

    /// Rolls gated rollout `id` back at `step`: new sessions go to the
    /// current version only. `false` as for [`Rollout::gate_promote`].
    ///
    pub fn gate_roll_back(&mut self, id: uuid::Uuid, step: u32, at: u64) -> bool {
        let Some(gated) = self.gated_at(id, step) else {
            return false;
        };
        gated.ended = Some("rolled_back".to_owned());
        let version = gated.version.clone();
        self.ramp_to(&version, 0, at);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("00000000-0000-4000-8000-{i:012}"))
            .collect()
    }

    #[test]
    fn a_ramp_takes_its_share_and_each_id_keeps_its_choice() {
        let mut rollout = Rollout::first(
            &crate::AgentName::from_static("helper"),
            &crate::Version::from_static("1"),
            0,
        );
        assert!(ids(100).iter().all(|id| rollout.choose(id) == "1"));
        rollout.ramp_to(&crate::Version::from_static("2"), 50, 1);
        let ids = ids(4000);
        let chosen: Vec<String> = ids
            .iter()
            .map(|id| rollout.choose(id).to_string())
            .collect();
        let on_two = chosen.iter().filter(|v| **v == "2").count();
        // 50 % of 4,000 within 3 standard deviations (about 95).
        assert!((1905..=2095).contains(&on_two), "{on_two}");
        let again: Vec<String> = ids
            .iter()
            .map(|id| rollout.choose(id).to_string())
            .collect();
        assert_eq!(again, chosen);
        // Raising the weight only moves ids to the new version.
        rollout.ramp_to(&crate::Version::from_static("2"), 80, 2);
        for (id, before) in ids.iter().zip(&chosen) {
            if before == "2" {
                assert_eq!(rollout.choose(id), "2");
            }
        }
    }

    #[test]
    fn full_weight_makes_a_version_current_and_back_returns_at_once() {
        let mut rollout = Rollout::first(
            &crate::AgentName::from_static("helper"),
            &crate::Version::from_static("1"),
            0,
        );
        assert!(!rollout.back(1), "nothing to go back to");
        rollout.ramp_to(&crate::Version::from_static("2"), 50, 1);
        assert_eq!(rollout.role("2"), Role::Ramping);
        assert!(rollout.back(2));
        assert_eq!(
            (rollout.current.as_str(), rollout.ramp.clone()),
            ("1", None)
        );
        rollout.ramp_to(&crate::Version::from_static("2"), 100, 3);
        assert_eq!(rollout.current, "2");
        assert_eq!(rollout.previous.as_deref(), Some("1"));
        assert_eq!(rollout.role("1"), Role::Draining);
        assert_eq!(
            rollout.weights(),
            BTreeMap::from([(Version::from_static("2"), 100)])
        );
        assert!(rollout.back(4));
        assert_eq!(rollout.current, "1");
        assert_eq!(rollout.previous.as_deref(), Some("2"));
    }

    #[test]
    fn a_version_that_never_took_work_waits_and_the_history_says_what_happened() {
        let mut rollout = Rollout::first(
            &crate::AgentName::from_static("helper"),
            &crate::Version::from_static("1"),
            10,
        );
        assert_eq!(rollout.role("3"), Role::Waiting);
        rollout.ramp_to(&crate::Version::from_static("2"), 50, 20);
        assert!(rollout.back(30));
        // Ramped, then sent back: it took work, so what it holds drains.
        assert_eq!(rollout.role("2"), Role::Draining);
        assert_eq!(rollout.role("3"), Role::Waiting);
        assert!(rollout.retire(&crate::Version::from_static("3"), 40));
        assert!(
            !rollout.retire(&crate::Version::from_static("3"), 41),
            "retired already"
        );
        assert!(rollout.upgrade(&crate::Version::from_static("2"), 50));
        let said: Vec<(u64, &str, &str, &str, Option<u8>)> = (rollout.history.iter())
            .map(|c| {
                let weight = c.ramp.as_ref().map(|r| r.weight);
                (
                    c.at,
                    c.what.as_str(),
                    c.version.as_str(),
                    c.current.as_str(),
                    weight,
                )
            })
            .collect();
        assert_eq!(
            said,
            [
                (10, "first", "1", "1", None),
                (20, "ramp", "2", "1", Some(50)),
                (30, "back", "2", "1", None),
                (40, "retire", "3", "1", None),
                (50, "upgrade", "2", "1", None),
            ]
        );
        assert_eq!(rollout.at, 50);
    }

    #[test]
    fn the_history_keeps_the_latest_changes() {
        let mut rollout = Rollout::first(
            &crate::AgentName::from_static("helper"),
            &crate::Version::from_static("1"),
            0,
        );
        for at in 1..=(HISTORY_KEPT as u64 + 10) {
            rollout.ramp_to(&crate::Version::from_static("2"), 10, at);
        }
        assert_eq!(rollout.history.len(), HISTORY_KEPT);
        assert_eq!(
            rollout.history.last().map(|c| c.at),
            Some(HISTORY_KEPT as u64 + 10)
        );
        assert_eq!(rollout.history.first().map(|c| c.at), Some(11));
    }

    #[test]
    fn a_rollout_of_an_earlier_release_reads_and_keeps_what_it_had() {
        let old = serde_json::json!({"agent": "helper", "current": "2", "previous": "1", "at": 5});
        let rollout: Rollout = serde_json::from_value(old).expect("reads");
        assert!(rollout.history.is_empty());
        assert_eq!(rollout.role("1"), Role::Draining);
        assert_eq!(rollout.role("7"), Role::Waiting);
    }
}
