//! What `baton eval` measures of a session and sums up of its trials: the
//! outcome ([`baton_proto::succeeded`], an escalation counting as a
//! failure, feedback included), the answer, the tokens, cost and time
//! spent from the agent type's first hop on; the success share of each
//! side with a 95 % Wilson interval, and the ratios of cost, tokens and
//! latency over the sessions that completed on both sides.

use baton_proto::{AgentName, Event, EventType, Reason, Version};
use serde::Serialize;

use super::Trial;

/// One side of a trial: a session from the agent type's first hop on.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    /// The version the agent type ran on, when the session says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<Version>,
    /// How the session ended: `completed`, `failed`, or `unfinished` (an
    /// evaluation that did not end in time, and was cancelled).
    pub outcome: String,
    /// Why, when it did not complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// What its end said, when it did not complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Whether it succeeded ([`baton_proto::succeeded`]): completed,
    /// without going to a person, and not marked wrong.
    pub succeeded: bool,
    /// Whether it reached the agent type; when not, it is measured whole.
    pub reached: bool,
    /// Its answer, when it completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// Model tokens spent from the agent type's first hop on.
    pub tokens: u64,
    /// What they cost, in millionths of the price's currency.
    pub cost_micros: u64,
    /// From the agent type's first hop to the session's end, ms.
    pub latency_ms: u64,
}

impl Measured {
    /// Session `end` (whose events are `history`) from `agent`'s first hop
    /// (from its start when it never reached it), with the latest
    /// `feedback` score it was given.
    #[must_use]
    pub fn of(
        history: &[Event],
        end: &Event,
        (agent, feedback): (&AgentName, Option<f64>),
    ) -> Self {
        let hop = end.path.iter().position(|hop| hop.agent == *agent);
        let first = (history.iter()).find(|event| event.session == end.session);
        let began = match hop {
            Some(index) => {
                let this = &end.path[index];
                this.accepted_at
                    .unwrap_or_else(|| match index.checked_sub(1) {
                        Some(before) => end.path[before].at.saturating_add(1),
                        None => first.map_or(this.at, |event| event.at),
                    })
            }
            None => first.map_or(end.at, |event| event.at),
        };
        // What the session had spent when the agent type's hop began.
        let before = (history.iter())
            .filter(|event| event.at < began && event.session == end.session)
            .filter_map(|event| event.usage)
            .next_back()
            .unwrap_or_default();
        let spent = end.usage.unwrap_or_default();
        let escalated = (history.iter()).any(|event| event.kind == EventType::Escalated);
        let completed = end.kind == EventType::Completed;
        Self {
            version: (end.versions.get(agent).cloned()).or_else(|| {
                (history.iter())
                    .filter(|event| event.agent.as_ref() == Some(agent))
                    .find_map(|event| event.version.clone())
            }),
            outcome: end.kind.as_str().to_owned(),
            reason: end.reason.clone().filter(|_| !completed),
            detail: end.detail.clone().filter(|_| !completed),
            succeeded: baton_proto::succeeded(completed, (escalated, true), feedback),
            reached: hop.is_some(),
            answer: (end.output.as_ref())
                .filter(|_| completed)
                .map(baton_author::text_of),
            tokens: spent.total().saturating_sub(before.total()),
            cost_micros: spent.cost_micros.saturating_sub(before.cost_micros),
            latency_ms: end.at.saturating_sub(began),
        }
    }

    /// An evaluation that did not end in time.
    #[must_use]
    pub fn unfinished() -> Self {
        Self {
            version: None,
            outcome: "unfinished".to_owned(),
            reason: None,
            detail: Some("the evaluation did not end in time".to_owned()),
            succeeded: false,
            reached: false,
            answer: None,
            tokens: 0,
            cost_micros: 0,
            latency_ms: 0,
        }
    }

    /// Whether `self` and `other` ended alike: equal answers when both
    /// completed, else the same end for the same reason.
    #[must_use]
    pub fn alike(&self, other: &Self) -> bool {
        self.outcome == other.outcome && self.answer == other.answer && self.reason == other.reason
    }
}

/// What a judge said of the new answer against the recorded one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The new answer is better.
    Better,
    /// As good.
    Same,
    /// Worse.
    Worse,
    /// The judge said none of these.
    Unclear,
}

impl Verdict {
    /// The first of `better`, `same` or `worse` in what a judge said.
    #[must_use]
    pub fn read(said: &str) -> Self {
        let said = said.to_lowercase();
        let words = said.split(|c: char| !c.is_alphanumeric());
        for word in words {
            match word {
                "better" => return Self::Better,
                "same" => return Self::Same,
                "worse" => return Self::Worse,
                _ => {}
            }
        }
        Self::Unclear
    }
}

/// A success share with its 95 % Wilson score interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Share {
    /// Sessions that succeeded.
    pub succeeded: u32,
    /// Sessions measured.
    pub sessions: u32,
    /// `succeeded / sessions`.
    pub share: f64,
    /// The interval's lower end.
    pub low: f64,
    /// Its upper end.
    pub high: f64,
}

impl Share {
    /// `succeeded` of `sessions`, with its interval (z = 1.96).
    #[must_use]
    pub fn of(succeeded: u32, sessions: u32) -> Self {
        if sessions == 0 {
            return Self {
                succeeded,
                sessions,
                share: 0.0,
                low: 0.0,
                high: 1.0,
            };
        }
        let (k, n, z) = (f64::from(succeeded), f64::from(sessions), 1.96_f64);
        let p = k / n;
        let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
        let half = z / (1.0 + z * z / n) * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
        Self {
            succeeded,
            sessions,
            share: p,
            low: (centre - half).max(0.0),
            high: (centre + half).min(1.0),
        }
    }
}

/// The trials summed up: how many ended alike, each side's success share,
/// and the new version's cost, tokens and median latency against the
/// recorded ones (`None` when the recorded side spent nothing).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Sessions tried.
    pub sessions: u32,
    /// Those whose evaluation ended alike.
    pub same: u32,
    /// Those whose evaluation did not.
    pub different: u32,
    /// Those whose evaluation stopped before a write (`would_write`).
    pub would_write: u32,
    /// Those whose evaluation did not end in time.
    pub unfinished: u32,
    /// The recorded sessions' success.
    pub base: Share,
    /// The evaluations' success.
    pub trial: Share,
    /// Total cost, new over recorded, of the sessions that completed on
    /// both sides (`None` when the recorded ones spent nothing).
    pub cost_ratio: Option<f64>,
    /// Total tokens, new over recorded, likewise.
    pub tokens_ratio: Option<f64>,
    /// Median latency, new over recorded, likewise.
    pub latency_ratio: Option<f64>,
    /// The judge's verdicts: better, same, worse, unclear.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdicts: Option<[u32; 4]>,
}

impl Summary {
    /// The summary of `trials`.
    #[must_use]
    pub fn of(trials: &[Trial]) -> Self {
        let count = |keep: &dyn Fn(&Trial) -> bool| {
            u32::try_from(trials.iter().filter(|trial| keep(trial)).count()).unwrap_or(u32::MAX)
        };
        let sessions = count(&|_| true);
        let ratio = |new: u64, old: u64| (old > 0).then(|| new as f64 / old as f64);
        // Spending is compared where both sides did the whole work.
        let both: Vec<&Trial> = (trials.iter())
            .filter(|trial| trial.base.outcome == "completed" && trial.trial.outcome == "completed")
            .collect();
        let sum = |pick: &dyn Fn(&Trial) -> u64| both.iter().map(|trial| pick(trial)).sum::<u64>();
        let latencies = |pick: &dyn Fn(&Trial) -> u64| {
            let mut all: Vec<u64> = both.iter().map(|trial| pick(trial)).collect();
            all.sort_unstable();
            all.get(all.len() / 2).copied().unwrap_or(0)
        };
        let judged = trials.iter().any(|trial| trial.verdict.is_some());
        let verdict = |of: super::Verdict| count(&|trial| trial.verdict == Some(of));
        Self {
            sessions,
            same: count(&|trial| trial.same_answer),
            different: count(&|trial| !trial.same_answer),
            would_write: count(&|trial| trial.would_write.is_some()),
            unfinished: count(&|trial| trial.trial.outcome == "unfinished"),
            base: Share::of(count(&|trial| trial.base.succeeded), sessions),
            trial: Share::of(count(&|trial| trial.trial.succeeded), sessions),
            cost_ratio: ratio(
                sum(&|trial| trial.trial.cost_micros),
                sum(&|trial| trial.base.cost_micros),
            ),
            tokens_ratio: ratio(
                sum(&|trial| trial.trial.tokens),
                sum(&|trial| trial.base.tokens),
            ),
            latency_ratio: ratio(
                latencies(&|trial| trial.trial.latency_ms),
                latencies(&|trial| trial.base.latency_ms),
            ),
            verdicts: judged.then(|| {
                [
                    verdict(Verdict::Better),
                    verdict(Verdict::Same),
                    verdict(Verdict::Worse),
                    verdict(Verdict::Unclear),
                ]
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wilson_interval_holds_the_share_and_narrows_with_more_sessions() {
        let few = Share::of(7, 10);
        let many = Share::of(70, 100);
        assert!((few.share - 0.7).abs() < 1e-9);
        assert!(few.low < 0.7 && 0.7 < few.high);
        assert!(many.high - many.low < few.high - few.low);
        // Known values: 7 of 10 gives about [0.397, 0.892].
        assert!((few.low - 0.3968).abs() < 1e-3, "{few:?}");
        assert!((few.high - 0.8922).abs() < 1e-3, "{few:?}");
        let none = Share::of(0, 0);
        assert!(none.low.abs() < f64::EPSILON && (none.high - 1.0).abs() < f64::EPSILON);
    }

    fn ended(agent: &str, at: (u64, u64), spent: (u64, u64)) -> (Vec<Event>, Event) {
        let session = uuid::Uuid::new_v4();
        let mut handed = Event::new(uuid::Uuid::new_v4(), session, EventType::Handoff);
        handed.at = at.0 - 1;
        handed.usage = Some(baton_proto::Usage {
            input_tokens: spent.0,
            ..Default::default()
        });
        let mut end = Event::new(uuid::Uuid::new_v4(), session, EventType::Completed);
        end.at = at.1;
        end.usage = Some(baton_proto::Usage {
            input_tokens: spent.1,
            ..Default::default()
        });
        let mut hop = baton_proto::Hop::new(AgentName::new(agent).unwrap(), "w", None);
        hop.accepted_at = Some(at.0);
        end.path = vec![hop];
        (vec![handed, end.clone()], end)
    }

    #[test]
    fn a_session_is_measured_from_the_types_hop_and_feedback_below_a_half_fails_it() {
        let support = AgentName::new("support").unwrap();
        let (history, end) = ended("support", (1_000, 1_500), (40, 100));
        let measured = Measured::of(&history, &end, (&support, None));
        assert_eq!((measured.latency_ms, measured.tokens), (500, 60));
        assert!(measured.succeeded && measured.reached);
        let wrong = Measured::of(&history, &end, (&support, Some(0.2)));
        assert!(!wrong.succeeded);
        // A session that never reached the type is measured whole.
        let other = AgentName::new("other").unwrap();
        let whole = Measured::of(&history, &end, (&other, None));
        assert!(!whole.reached);
        assert_eq!((whole.latency_ms, whole.tokens), (501, 100));
    }

    #[test]
    fn a_verdict_is_the_first_word_of_three_a_judge_says() {
        assert_eq!(
            Verdict::read("Better. B answers the question."),
            Verdict::Better
        );
        assert_eq!(
            Verdict::read("B is worse than A, not better"),
            Verdict::Worse
        );
        assert_eq!(Verdict::read("the SAME"), Verdict::Same);
        assert_eq!(Verdict::read("samey"), Verdict::Unclear);
    }
}
