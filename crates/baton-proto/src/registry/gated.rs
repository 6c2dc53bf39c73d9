//! A gated rollout (an optional extension of [`Rollout`](crate::Rollout)):
//! a version takes a growing share of new sessions, step by step, and each
//! step is promoted or rolled back by how the sessions started on each
//! version ended, compared by the rollout's gates. Each decision is a
//! [`RolloutDecision`] on `baton.decisions.<agent>` (`BATON_DECISIONS`).

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{AgentName, Map, Version, uuid_text};

/// A rollout that moves by its sessions' outcomes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Gated {
    /// Tells this gated rollout from another; decisions' ids derive from it.
    #[serde(with = "uuid_text")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub id: Uuid,
    /// The version rolled out.
    pub version: Version,
    /// The share of new sessions (percent) at each step, ending at 100.
    pub steps: Vec<u8>,
    /// The step now (an index into `steps`).
    pub step: u32,
    /// When the step began, unix ms: its sessions are those started since.
    pub since: u64,
    /// How long a step lasts at least, ms.
    pub interval_ms: u64,
    /// The new version's sessions a step needs before any decision.
    pub min_sessions: u32,
    /// What must hold to go on, each as written (`success >= -2pt`).
    pub gates: Vec<GateRule>,
    /// Whether a session escalated to a person counts as a failure (the
    /// default) or is left out.
    #[serde(default = "yes")]
    pub escalated_fails: bool,
    /// Set while a person holds the rollout (`--pause`): unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<u64>,
    /// When a person let it go on again (`--resume`), unix ms: the step is
    /// timed from then (its sessions still count from `since`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed: Option<u64>,
    /// How it ended: `promoted` (at 100 %, now current), `rolled_back`,
    /// `back` (a person's `--back`) or `by_hand` (a person's `--weight`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    /// The last decision a judge applied, stored with the change it made,
    /// so that whichever router reads it records it, if the one that made
    /// it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<Box<RolloutDecision>>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

fn yes() -> bool {
    true
}

impl Gated {
    /// The share the step now takes.
    #[must_use]
    pub fn weight(&self) -> u8 {
        let at = usize::try_from(self.step).unwrap_or(usize::MAX);
        self.steps.get(at).copied().unwrap_or(100)
    }

    /// Whether it still moves: not ended, not paused.
    #[must_use]
    pub fn is_running(&self) -> bool {
        self.ended.is_none() && self.paused.is_none()
    }

    /// A gated rollout of `version` starting now at its first step, with a
    /// new id.
    #[must_use]
    pub fn plan(
        version: Version,
        steps: Vec<u8>,
        (interval_ms, min_sessions): (u64, u32),
        gates: Vec<GateRule>,
    ) -> Self {
        Self {
            id: Uuid::new_v4(),
            version,
            steps,
            step: 0,
            since: crate::now_ms(),
            interval_ms,
            min_sessions,
            gates,
            escalated_fails: true,
            paused: None,
            resumed: None,
            ended: None,
            last: None,
            extra: Map::new(),
        }
    }

    /// `text` as a step's length in ms: `15s`, `10m`, `1h`, `7d`, or seconds
    /// alone; `None` when it is none of these, or zero.
    #[must_use]
    pub fn interval_ms(text: &str) -> Option<u64> {
        let text = text.trim();
        let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
            Some(at) => text.split_at(at),
            None => (text, "s"),
        };
        let seconds = match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            _ => return None,
        };
        let n = number.parse::<u64>().ok().filter(|n| *n > 0)?;
        n.checked_mul(seconds)?.checked_mul(1000)
    }

    /// What is wrong with `steps`, if anything: each 1 to 100, rising,
    /// ending at 100.
    #[must_use]
    pub fn bad_steps(steps: &[u8]) -> Option<String> {
        if steps.len() < 2 {
            return Some(format!(
                "the steps {steps:?} need at least one share below 100 before it (e.g. --steps 5,25,50,100)"
            ));
        }
        if steps.last() != Some(&100) {
            return Some(format!(
                "the steps {steps:?} must end at 100, where the version becomes current (e.g. --steps 5,25,50,100)"
            ));
        }
        if steps.iter().any(|step| *step == 0 || *step > 100) {
            return Some(format!("each step is a share from 1 to 100: {steps:?}"));
        }
        if steps.windows(2).any(|pair| pair[0] >= pair[1]) {
            return Some(format!("the steps must rise: {steps:?}"));
        }
        None
    }
}

/// What a gate compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// The share of sessions that succeeded, in percentage points (`pt`),
    /// the new version's less the current one's.
    Success,
    /// The mean cost of a session, as a ratio (`x`) to the current version's.
    Cost,
    /// The median duration of a session, as a ratio (`x`).
    P50,
    /// The 95th percentile of a session's duration, as a ratio (`x`).
    P95,
}

impl Metric {
    /// Its name in a gate.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Cost => "cost",
            Self::P50 => "p50",
            Self::P95 => "p95",
        }
    }
}

/// One gate: `success >= -2pt`, `cost <= 1.2x`, `p95 <= 1.5x`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GateRule {
    /// What it compares.
    pub metric: Metric,
    /// The bound: percentage points for `success` (at least), a ratio for
    /// the others (at most).
    pub bound: f64,
}

impl GateRule {
    /// Whether `value` (points or a ratio, as the metric reads) keeps it.
    #[must_use]
    pub fn keeps(&self, value: f64) -> bool {
        match self.metric {
            Metric::Success => value >= self.bound,
            _ => value <= self.bound,
        }
    }
}

impl fmt::Display for GateRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.metric {
            Metric::Success => write!(f, "success >= {}pt", self.bound),
            metric => write!(f, "{} <= {}x", metric.as_str(), self.bound),
        }
    }
}

impl FromStr for GateRule {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let said = text.split_whitespace().collect::<Vec<_>>();
        let example = "e.g. \"success >= -2pt\", \"cost <= 1.2x\", \"p95 <= 1.5x\"";
        let [metric, op, bound] = said[..] else {
            return Err(format!(
                "the gate {text:?} is not METRIC OP BOUND ({example})"
            ));
        };
        let metric = match metric {
            "success" => Metric::Success,
            "cost" => Metric::Cost,
            "p50" => Metric::P50,
            "p95" => Metric::P95,
            other => {
                return Err(format!(
                    "the gate {text:?} names the metric {other:?}, which is not recorded: use success, cost, p50 or p95 ({example})"
                ));
            }
        };
        let (op_wanted, unit) = match metric {
            Metric::Success => (">=", "pt"),
            _ => ("<=", "x"),
        };
        if op != op_wanted {
            return Err(format!(
                "the gate {text:?}: {} takes {op_wanted} ({example})",
                metric.as_str()
            ));
        }
        let number = bound.strip_suffix(unit).and_then(|n| n.parse::<f64>().ok());
        let Some(bound) = number.filter(|n| n.is_finite()) else {
            return Err(format!(
                "the gate {text:?}: {} is bounded in {unit}, as in {example}",
                metric.as_str()
            ));
        };
        if metric != Metric::Success && bound <= 0.0 {
            return Err(format!("the gate {text:?}: a ratio is above 0"));
        }
        Ok(Self { metric, bound })
    }
}

impl Serialize for GateRule {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for GateRule {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for GateRule {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GateRule".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        String::json_schema(generator)
    }
}

/// How the sessions of one version ended within a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Side {
    /// The version.
    pub version: Version,
    /// Sessions that ended (and count).
    pub sessions: u32,
    /// Of them, those that succeeded.
    pub succeeded: u32,
    /// The mean cost of a session, in millionths of the price tables'
    /// unit, when any recorded one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_micros: Option<f64>,
    /// The median duration, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_ms: Option<u64>,
    /// The 95th percentile of the duration, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p95_ms: Option<u64>,
}

/// One gate as a decision read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Reading {
    /// The gate, as written.
    pub gate: GateRule,
    /// The estimate (points or a ratio); none when a side has no value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<f64>,
    /// The interval the estimate is known within, at the rollout's
    /// confidence, valid however often it is looked at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<(f64, f64)>,
    /// `holds` (the estimate keeps the gate), `unsure` (it does not, without
    /// enough evidence yet), `broken` (the whole interval breaks it) or
    /// `unmeasured` (no value on a side).
    pub verdict: String,
}

/// A decision of a gated rollout, on `baton.decisions.<agent>`: its
/// `Nats-Msg-Id` is its `id`, derived from the gated rollout's id, the
/// step and what was decided, so a decision is stored once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RolloutDecision {
    /// Protocol major version: `1`.
    pub v: u64,
    /// Unique id.
    #[serde(with = "uuid_text")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub id: Uuid,
    /// The gated rollout's id.
    #[serde(with = "uuid_text")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub rollout: Uuid,
    /// Agent type.
    pub agent: AgentName,
    /// The version rolled out.
    pub version: Version,
    /// When, unix ms.
    pub at: u64,
    /// `start`, `promote` (to the next step), `promoted` (made current at
    /// 100 %), `rollback`, `pause` or `resume`.
    pub what: String,
    /// The step decided on (an index into the steps).
    pub step: u32,
    /// Its share.
    pub weight: u8,
    /// The share after the decision.
    pub next_weight: u8,
    /// Why, in a sentence.
    pub why: String,
    /// The current version's sessions in the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<Side>,
    /// The new version's sessions in the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new: Option<Side>,
    /// Each gate, as read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readings: Vec<Reading>,
    /// Who decided: a router's id, or a person.
    pub by: String,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

impl RolloutDecision {
    /// A decision `what` on `gated` (of `agent`) at its step, by `by` at
    /// `at`, with `why`: the shares unchanged and no sessions read, as a
    /// person's start, pause or resume is recorded; its id is derived from
    /// the gated rollout with `label`.
    #[must_use]
    pub fn of(
        agent: &AgentName,
        gated: &Gated,
        (what, label): (&str, &str),
        (why, by, at): (&str, &str, u64),
    ) -> Self {
        Self {
            v: crate::PROTOCOL_VERSION,
            id: crate::derive_id_labelled(gated.id, label, 0),
            rollout: gated.id,
            agent: agent.clone(),
            version: gated.version.clone(),
            at,
            what: what.to_owned(),
            step: gated.step,
            weight: gated.weight(),
            next_weight: gated.weight(),
            why: why.to_owned(),
            base: None,
            new: None,
            readings: Vec::new(),
            by: by.to_owned(),
            extra: Map::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_read_as_written_and_say_what_is_wrong() {
        for text in [
            "success >= -2pt",
            "cost <= 1.2x",
            "p95 <= 1.5x",
            "p50 <= 2x",
        ] {
            let gate: GateRule = text.parse().unwrap();
            assert_eq!(gate.to_string(), text);
        }
        let wrong = |text: &str| text.parse::<GateRule>().unwrap_err();
        assert!(wrong("tokens <= 2x").contains("not recorded"));
        assert!(wrong("success >= 2x").contains("bounded in pt"));
        assert!(wrong("cost >= 1.2x").contains("takes <="));
        assert!(wrong("success>=-2pt").contains("METRIC OP BOUND"));
        assert!(wrong("p95 <= 0x").contains("above 0"));
        assert!("success >= -2pt".parse::<GateRule>().unwrap().keeps(-1.0));
        assert!(!"cost <= 1.2x".parse::<GateRule>().unwrap().keeps(1.3));
    }

    #[test]
    fn intervals_read_seconds_minutes_hours_and_days() {
        assert_eq!(Gated::interval_ms("15s"), Some(15_000));
        assert_eq!(Gated::interval_ms("10m"), Some(600_000));
        assert_eq!(Gated::interval_ms("2h"), Some(7_200_000));
        assert_eq!(Gated::interval_ms("30"), Some(30_000));
        assert_eq!(Gated::interval_ms("7d"), Some(604_800_000));
        for wrong in ["soon", "0s", "5w", ""] {
            assert_eq!(Gated::interval_ms(wrong), None, "{wrong}");
        }
    }

    #[test]
    fn steps_rise_to_100() {
        assert_eq!(Gated::bad_steps(&[5, 25, 50, 100]), None);
        assert!(
            Gated::bad_steps(&[5, 25, 50])
                .unwrap()
                .contains("end at 100")
        );
        assert!(Gated::bad_steps(&[25, 5, 100]).unwrap().contains("rise"));
        assert!(Gated::bad_steps(&[0, 100]).unwrap().contains("1 to 100"));
        assert!(Gated::bad_steps(&[100]).unwrap().contains("below 100"));
    }
}
