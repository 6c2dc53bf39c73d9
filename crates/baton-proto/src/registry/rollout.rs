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

use crate::Map;

/// Where an agent type's new work goes, and what became of its versions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Rollout {
    /// Agent type.
    pub agent: String,
    /// The version new sessions go to, but for the ramp's share.
    pub current: String,
    /// The version that was current before, where `--back` goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
    /// A version being rolled out, and the share of new sessions it takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp: Option<Ramp>,
    /// Versions retired: they take no work.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<String>,
    /// Conversations pinned to a version marked to move to the current
    /// version at their next turn (`baton retire --upgrade-conversations`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upgrading: Vec<String>,
    /// When it last changed, unix ms.
    #[serde(default)]
    pub at: u64,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// A version taking a share of new sessions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Ramp {
    /// The version.
    pub version: String,
    /// Percent of new sessions and conversations it takes, 1 to 99.
    pub weight: u8,
}

impl Rollout {
    /// The rollout of `agent` whose first version is `version`: current,
    /// and the only one.
    #[must_use]
    pub fn first(agent: &str, version: &str, at: u64) -> Self {
        Self {
            agent: agent.to_owned(),
            current: version.to_owned(),
            at,
            ..Self::default()
        }
    }

    /// The version a session or conversation with id `sticky` starts on:
    /// the ramp's version for its share of ids, else the current one. The
    /// same id always gets the same answer while the rollout stands, and a
    /// larger weight only moves ids from the current version to the ramp's.
    #[must_use]
    pub fn choose(&self, sticky: &str) -> &str {
        match &self.ramp {
            Some(ramp) if bucket_of(&self.agent, sticky) < u32::from(ramp.weight) * 100 => {
                &ramp.version
            }
            _ => &self.current,
        }
    }

    /// Sends `weight` percent of new sessions to `version`; 100 makes it
    /// current (the current one becomes the previous), 0 ends the ramp.
    pub fn ramp_to(&mut self, version: &str, weight: u8, at: u64) {
        self.at = at;
        self.retired.retain(|retired| retired != version);
        if weight >= 100 {
            if self.current != version {
                self.previous = Some(std::mem::replace(&mut self.current, version.to_owned()));
            }
            self.ramp = None;
        } else if weight == 0 || version == self.current {
            self.ramp = None;
        } else {
            self.ramp = Some(Ramp {
                version: version.to_owned(),
                weight,
            });
        }
    }

    /// New sessions go back to the previous version at once: a ramp ends,
    /// or, with none, the previous version is current again. `false` when
    /// there is nothing to go back to.
    pub fn back(&mut self, at: u64) -> bool {
        if self.ramp.take().is_some() {
            self.at = at;
            return true;
        }
        let Some(previous) = self.previous.take() else {
            return false;
        };
        let rolled_back = std::mem::replace(&mut self.current, previous);
        self.previous = Some(rolled_back);
        self.at = at;
        true
    }

    /// What `version` is now: current, ramping, retired, or only pinned to
    /// (draining, until nothing holds it).
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
        } else {
            Role::Draining
        }
    }

    /// The share of new sessions each version takes, in percent.
    #[must_use]
    pub fn weights(&self) -> BTreeMap<String, u8> {
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
        let mut rollout = Rollout::first("helper", "1", 0);
        assert!(ids(100).iter().all(|id| rollout.choose(id) == "1"));
        rollout.ramp_to("2", 50, 1);
        let ids = ids(4000);
        let chosen: Vec<String> = ids.iter().map(|id| rollout.choose(id).to_owned()).collect();
        let on_two = chosen.iter().filter(|v| **v == "2").count();
        // 50 % of 4,000 within 3 standard deviations (about 95).
        assert!((1905..=2095).contains(&on_two), "{on_two}");
        let again: Vec<String> = ids.iter().map(|id| rollout.choose(id).to_owned()).collect();
        assert_eq!(again, chosen);
        // Raising the weight only moves ids to the new version.
        rollout.ramp_to("2", 80, 2);
        for (id, before) in ids.iter().zip(&chosen) {
            if before == "2" {
                assert_eq!(rollout.choose(id), "2");
            }
        }
    }

    #[test]
    fn full_weight_makes_a_version_current_and_back_returns_at_once() {
        let mut rollout = Rollout::first("helper", "1", 0);
        assert!(!rollout.back(1), "nothing to go back to");
        rollout.ramp_to("2", 50, 1);
        assert_eq!(rollout.role("2"), Role::Ramping);
        assert!(rollout.back(2));
        assert_eq!(
            (rollout.current.as_str(), rollout.ramp.clone()),
            ("1", None)
        );
        rollout.ramp_to("2", 100, 3);
        assert_eq!(rollout.current, "2");
        assert_eq!(rollout.previous.as_deref(), Some("1"));
        assert_eq!(rollout.role("1"), Role::Draining);
        assert_eq!(rollout.weights(), BTreeMap::from([("2".to_owned(), 100)]));
        assert!(rollout.back(4));
        assert_eq!(rollout.current, "1");
        assert_eq!(rollout.previous.as_deref(), Some("2"));
    }
}
