//! A gated rollout's analysis: how the sessions started on each version
//! within the step ended ([`Tally`], read from the events stream), and
//! what the gates say of them ([`judge`]). Reading the streams is
//! `steps`' ([`StepReader`](super::StepReader), [`StepWatch`](super::StepWatch)).
//!
//! A session counts for the version its end event says the agent type
//! ran on (`versions`), when it started at or after the step began; its
//! outcome is [`baton_proto::session_succeeded`]. The share of sessions
//! that succeeded is compared with an interval valid however often it is
//! looked at (a confidence sequence: Robbins' normal mixture for each
//! version's share, at half the rollout's 5 % error each), so a gate is
//! broken with enough evidence as soon as the whole interval breaks it.
//! Cost and durations are compared on their estimates at the step's end.

use std::collections::HashSet;

use baton_proto::{AgentName, Event, EventType, GateRule, Gated, Metric, Reading, Side, Version};
use uuid::Uuid;

/// The error a gated rollout accepts: 5 %, shared by the two versions.
const ALPHA: f64 = 0.05;

/// A step whose gates stay unsure this many intervals is rolled back.
const INTERVALS_UNSURE: u64 = 3;

/// How one session of the step ended.
#[derive(Debug, Clone)]
struct Ended {
    version: Version,
    succeeded: bool,
    cost: Option<u64>,
    duration: Option<u64>,
}

/// The step's sessions by version, as they ended.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    ended: std::collections::HashMap<Uuid, Ended>,
    escalated: HashSet<Uuid>,
    /// Sessions someone marked wrong (feedback below one half).
    marked_wrong: HashSet<Uuid>,
    /// Each session's first event seen, unix ms, and the version of the
    /// agent type its events named: an end that names neither (a deadline,
    /// a cancel, a dead letter, written by the router or the pipeline) is
    /// counted by them.
    seen: std::collections::HashMap<Uuid, (u64, Option<Version>)>,
}

impl Tally {
    /// Counts `event` for `agent`'s step that began at `since`: a session's
    /// end, once, or its escalation to a person (a failure, when
    /// `escalated_fails`).
    pub fn add(&mut self, event: &Event, agent: &AgentName, since: u64, escalated_fails: bool) {
        let seen = self.seen.entry(event.session).or_insert((event.at, None));
        seen.0 = seen.0.min(event.at);
        if event.agent.as_ref() == Some(agent) && event.version.is_some() {
            seen.1.clone_from(&event.version);
        }
        if event.kind == EventType::Escalated {
            self.escalated.insert(event.session);
            return;
        }
        let ends = event.kind.is_terminal() || event.kind == EventType::DeadLettered;
        // A replay (`baton replay`) is no live session.
        if !ends || event.replay_of.is_some() || self.ended.contains_key(&event.session) {
            return;
        }
        let (first_seen, named) = self.seen.get(&event.session).cloned().unwrap_or_default();
        let Some(version) = event.versions.get(agent).cloned().or(named) else {
            return;
        };
        let started = (event.path.first())
            .map(|hop| hop.accepted_at.unwrap_or(hop.at))
            .or(Some(first_seen));
        if started.is_none_or(|started| started < since) {
            return;
        }
        let escalated = self.escalated.contains(&event.session);
        let Some(succeeded) = baton_proto::session_succeeded(event, escalated, escalated_fails)
        else {
            return;
        };
        let ended = Ended {
            version,
            succeeded,
            cost: event.usage.as_ref().map(|usage| usage.cost_micros),
            duration: started.map(|started| event.at.saturating_sub(started)),
        };
        self.ended.insert(event.session, ended);
    }

    /// Counts feedback `record` (`baton feedback`): a session scored below
    /// one half was marked wrong, and fails though it completed; a later
    /// score of one half or more takes that back.
    pub fn feedback(&mut self, record: &baton_proto::Outcome) {
        if record.kind != baton_proto::OutcomeKind::Feedback {
            return;
        }
        match record.score {
            Some(score) if score < 0.5 => self.marked_wrong.insert(record.session),
            Some(_) => self.marked_wrong.remove(&record.session),
            None => false,
        };
    }

    /// How `version`'s sessions ended.
    #[must_use]
    pub fn side(&self, version: &Version) -> Side {
        let ended = self.ended.iter().filter(|(_, e)| e.version == *version);
        let (mut sessions, mut succeeded) = (0u32, 0u32);
        let (mut costs, mut durations) = (Vec::new(), Vec::new());
        for (session, end) in ended {
            sessions += 1;
            if end.succeeded && !self.marked_wrong.contains(session) {
                succeeded += 1;
            }
            costs.extend(end.cost);
            durations.extend(end.duration);
        }
        durations.sort_unstable();
        Side {
            version: version.clone(),
            sessions,
            succeeded,
            cost_micros: (!costs.is_empty())
                .then(|| costs.iter().map(|c| *c as f64).sum::<f64>() / costs.len() as f64),
            p50_ms: percentile(&durations, 0.50),
            p95_ms: percentile(&durations, 0.95),
        }
    }
}

fn percentile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let at = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[at - 1])
}

/// The interval a share of `n` sessions is within, whatever `n` it is
/// read at: Robbins' normal mixture for a bounded mean (variance at most
/// 1/4), at error `alpha`, tuned to be tightest near `tuned` sessions.
fn share_within(succeeded: u32, n: u32, alpha: f64, tuned: u32) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (n, tuned) = (f64::from(n), f64::from(tuned.max(1)));
    let rho = tuned / 4.0;
    let v = n / 4.0 + rho;
    let radius = (v * (v / (rho * alpha * alpha)).ln()).sqrt() / n;
    let share = f64::from(succeeded) / n;
    ((share - radius).max(0.0), (share + radius).min(1.0))
}

/// What the gates say now.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// No decision yet, and why.
    Wait(String),
    /// Every gate holds: on to the next step.
    Promote(Vec<Reading>),
    /// A gate broke: new work goes back to the current version.
    Rollback(String, Vec<Reading>),
}

/// Reads `gate` on the two sides.
fn read(gate: GateRule, (base, new): (&Side, &Side), tuned: u32) -> Reading {
    let reading = |estimate: Option<f64>, within: Option<(f64, f64)>| {
        let verdict = match (estimate, within) {
            (None, _) => "unmeasured",
            (Some(_), Some((low, high))) if !gate.keeps(low) && !gate.keeps(high) => "broken",
            (Some(estimate), _) if gate.keeps(estimate) => "holds",
            (Some(_), _) => "unsure",
        };
        Reading {
            gate,
            estimate,
            within,
            verdict: verdict.to_owned(),
        }
    };
    let ratio = |new: Option<f64>, base: Option<f64>| match (new, base) {
        (Some(new), Some(base)) if base > 0.0 => Some(new / base),
        _ => None,
    };
    match gate.metric {
        Metric::Success => {
            if base.sessions == 0 || new.sessions == 0 {
                return reading(None, None);
            }
            let share = |side: &Side| f64::from(side.succeeded) / f64::from(side.sessions);
            let (new_low, new_high) = share_within(new.succeeded, new.sessions, ALPHA / 2.0, tuned);
            let (base_low, base_high) =
                share_within(base.succeeded, base.sessions, ALPHA / 2.0, tuned);
            let points = |x: f64| (x * 1000.0).round() / 10.0;
            reading(
                Some(points(share(new) - share(base))),
                Some((points(new_low - base_high), points(new_high - base_low))),
            )
        }
        Metric::Cost => reading(ratio(new.cost_micros, base.cost_micros), None),
        Metric::P50 => reading(
            ratio(new.p50_ms.map(|v| v as f64), base.p50_ms.map(|v| v as f64)),
            None,
        ),
        Metric::P95 => reading(
            ratio(new.p95_ms.map(|v| v as f64), base.p95_ms.map(|v| v as f64)),
            None,
        ),
    }
}

/// Each of `gated`'s gates as read on the two sides now.
#[must_use]
pub fn readings(gated: &Gated, (base, new): (&Side, &Side)) -> Vec<Reading> {
    (gated.gates.iter())
        .map(|gate| read(*gate, (base, new), gated.min_sessions))
        .collect()
}

/// What `gated`'s gates say of the step, comparing `new` with `base` (the
/// current version) at `now`.
#[must_use]
pub fn judge(gated: &Gated, (base, new): (&Side, &Side), now: u64) -> Verdict {
    if new.sessions < gated.min_sessions {
        return Verdict::Wait(format!(
            "{} of the {} sessions of version {} a decision needs",
            new.sessions, gated.min_sessions, gated.version
        ));
    }
    let readings = readings(gated, (base, new));
    let named = |verdict: &str| {
        (readings.iter())
            .filter(|r| r.verdict == verdict)
            .map(|r| r.gate.to_string())
            .collect::<Vec<_>>()
    };
    let broken = named("broken");
    if !broken.is_empty() {
        return Verdict::Rollback(
            format!("broken with enough evidence: {}", broken.join(", ")),
            readings,
        );
    }
    // A resumed step is timed from its resumption.
    let elapsed = now.saturating_sub(gated.resumed.unwrap_or(gated.since));
    if elapsed < gated.interval_ms {
        return Verdict::Wait(format!(
            "the step lasts {}s more",
            (gated.interval_ms - elapsed).div_ceil(1000)
        ));
    }
    let open: Vec<String> = [named("unsure"), named("unmeasured")].concat();
    if open.is_empty() {
        return Verdict::Promote(readings);
    }
    if elapsed >= gated.interval_ms.saturating_mul(INTERVALS_UNSURE) {
        return Verdict::Rollback(
            format!(
                "still not holding after {INTERVALS_UNSURE} intervals: {}",
                open.join(", ")
            ),
            readings,
        );
    }
    Verdict::Wait(format!("not holding yet: {}", open.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(version: &str, n: u32, succeeded: u32) -> Side {
        Side {
            version: Version::new(version).unwrap(),
            sessions: n,
            succeeded,
            cost_micros: None,
            p50_ms: None,
            p95_ms: None,
        }
    }

    fn gated(gates: &[&str]) -> Gated {
        Gated {
            id: Uuid::nil(),
            version: Version::new("2").unwrap(),
            steps: vec![5, 25, 50, 100],
            step: 0,
            since: 0,
            interval_ms: 10_000,
            min_sessions: 20,
            gates: gates.iter().map(|g| g.parse().unwrap()).collect(),
            escalated_fails: true,
            paused: None,
            resumed: None,
            ended: None,
            last: None,
            extra: baton_proto::Map::new(),
        }
    }

    #[test]
    fn a_version_that_fails_often_is_rolled_back_once_the_evidence_is_in() {
        let gated = gated(&["success >= -2pt"]);
        let base = side("1", 400, 400);
        // Too few sessions: no decision, however bad.
        let few = judge(&gated, (&base, &side("2", 10, 4)), 1);
        assert!(matches!(few, Verdict::Wait(ref why) if why.contains("10 of the 20")));
        // 40 % failing over 60 sessions: broken before the step's end.
        let Verdict::Rollback(why, readings) = judge(&gated, (&base, &side("2", 60, 36)), 1) else {
            panic!("not rolled back")
        };
        assert!(why.contains("success >= -2pt"), "{why}");
        assert_eq!(readings[0].estimate, Some(-40.0));
        // As good: waits for the step's end, then promotes.
        let good = side("2", 60, 60);
        assert!(matches!(judge(&gated, (&base, &good), 1), Verdict::Wait(_)));
        assert!(matches!(
            judge(&gated, (&base, &good), 10_000),
            Verdict::Promote(_)
        ));
        // One failure in 20: unsure, not broken; rolled back only if it
        // still does not hold after three intervals.
        let one_off = side("2", 20, 19);
        assert!(
            matches!(judge(&gated, (&base, &one_off), 10_000), Verdict::Wait(ref w) if w.contains("not holding yet"))
        );
        assert!(matches!(
            judge(&gated, (&base, &one_off), 30_000),
            Verdict::Rollback(..)
        ));
    }

    #[test]
    fn a_gate_on_a_metric_never_recorded_does_not_let_the_step_pass() {
        let gated = gated(&["success >= -2pt", "cost <= 1.2x"]);
        let verdict = judge(&gated, (&side("1", 50, 50), &side("2", 50, 50)), 10_000);
        assert!(
            matches!(verdict, Verdict::Wait(ref why) if why.contains("cost <= 1.2x")),
            "{verdict:?}"
        );
    }

    #[test]
    fn a_session_marked_wrong_fails_though_it_completed_until_scored_again() {
        let agent = AgentName::new("helper").unwrap();
        let mut tally = Tally::default();
        let mut end = Event::new(Uuid::new_v4(), Uuid::new_v4(), EventType::Completed);
        end.versions
            .insert(agent.clone(), Version::new("2").unwrap());
        end.path
            .push(baton_proto::Hop::new(agent.clone(), "w", None));
        tally.add(&end, &agent, 0, true);
        let two = Version::new("2").unwrap();
        assert_eq!(
            (tally.side(&two).sessions, tally.side(&two).succeeded),
            (1, 1)
        );
        let mut wrong = baton_proto::Outcome::new(
            Uuid::new_v4(),
            end.session,
            baton_proto::OutcomeKind::Feedback,
        );
        wrong.score = Some(0.2);
        tally.feedback(&wrong);
        assert_eq!(tally.side(&two).succeeded, 0);
        wrong.score = Some(0.9);
        tally.feedback(&wrong);
        assert_eq!(tally.side(&two).succeeded, 1);
        // Its end counted once, however often it is read.
        tally.add(&end, &agent, 0, true);
        assert_eq!(tally.side(&two).sessions, 1);
        // A replay of it is no live session.
        let mut replayed = end.clone();
        replayed.session = Uuid::new_v4();
        replayed.replay_of = Some(end.session);
        tally.add(&replayed, &agent, 0, true);
        assert_eq!(tally.side(&two).sessions, 1);
    }

    #[test]
    fn an_end_the_router_wrote_counts_for_the_version_the_sessions_events_named() {
        let agent = AgentName::new("helper").unwrap();
        let two = Version::new("2").unwrap();
        let mut tally = Tally::default();
        let session = Uuid::new_v4();
        let mut accepted = Event::new(Uuid::new_v4(), session, EventType::Accepted);
        accepted.agent = Some(agent.clone());
        accepted.version = Some(two.clone());
        accepted.at = 1_000;
        tally.add(&accepted, &agent, 500, true);
        // A deadline's end: no path, no versions.
        let mut ended = Event::new(Uuid::new_v4(), session, EventType::Failed);
        ended.at = 9_000;
        tally.add(&ended, &agent, 500, true);
        let side = tally.side(&two);
        assert_eq!(
            (side.sessions, side.succeeded, side.p50_ms),
            (1, 0, Some(8_000))
        );
    }

    #[test]
    fn the_interval_is_valid_however_often_it_is_read_and_narrows() {
        let (low10, high10) = share_within(10, 10, 0.025, 20);
        let (low200, high200) = share_within(200, 200, 0.025, 20);
        assert!(high10 - low10 > high200 - low200);
        assert!((0.0..1.0).contains(&low200) && high200 == 1.0);
    }
}
