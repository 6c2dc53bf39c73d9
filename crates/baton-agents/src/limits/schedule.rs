//! One endpoint and model's schedule, as stored, and how it learns: the
//! pure part of the shared limit, with no I/O, so every rule is tested on
//! its own.
//!
//! The schedule paces requests at `rate` a second, one slot per interval,
//! never in bursts (in slow start, one call may go an interval early, so
//! two back to back are not held apart while nothing is known). Where the
//! rate comes from:
//!
//! - **configured** (`[llm.limits]`): a ceiling, paced a little under,
//!   and reached by the same slow start as below (a ceiling set too high
//!   then costs a few `429`s, not a storm);
//! - **headers**: the provider's `x-ratelimit-*` answer, which gives its
//!   steady rate as what is used over the time to refill it (`limit -
//!   remaining` over `reset`); also a ceiling, and it wins when lower;
//! - **adaptive**: with nothing known, the rate starts low and doubles each
//!   second while callers wait for it (slow start); a `429` cuts it
//!   (×0.7 out of slow start, ×0.85 after) and it then climbs back
//!   additively, 2.5 % of the rate before the cut per second, so it stays
//!   near the highest rate that draws no `429`s. A configured or heard
//!   ceiling is not a promise: a `429` below it cuts the rate below it too.
//!
//! A rate only grows while callers are held back by it, so a quiet agent
//! never drifts up to a rate it has not tried.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How much of a known ceiling the schedule paces at: calls leave with
/// some jitter, and a provider's window counts their arrival.
pub(crate) const MARGIN: f64 = 0.97;
/// The rate a schedule with nothing known starts at, requests a second.
pub(crate) const START_RPS: f64 = 5.0;
/// The lowest rate a cut leaves, requests a second.
const MIN_RPS: f64 = 0.05;
/// A `429` in slow start cuts the rate to this share of it.
const START_CUT: f64 = 0.7;
/// A later `429` cuts the rate to this share of it.
const CUT: f64 = 0.85;
/// After a cut, the rate climbs by this share of the rate before it, a second.
const CLIMB: f64 = 0.025;
/// How long after a `429` the headers do not lift the rate back to their
/// ceiling at once (it climbs there instead).
const CUT_MEMORY_US: u64 = 10_000_000;
/// How much a heard rate must differ from the stored one to be written.
pub(crate) const HEARD_CHANGE: f64 = 0.05;

/// Where a schedule's rate comes from.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Learned from `429`s: nothing is configured or heard.
    #[default]
    Adaptive,
    /// `[llm.limits]` in the spec.
    Configured,
    /// The provider's `x-ratelimit-*` headers.
    Headers,
}

impl Source {
    /// As `baton doctor` and the metrics name it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Adaptive => "adaptive",
            Self::Configured => "configured",
            Self::Headers => "headers",
        }
    }
}

/// One endpoint and model's schedule, as stored (MessagePack, named
/// fields; an entry written by an older version reads with defaults).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// When the next request may go out, unix µs.
    #[serde(default)]
    pub(crate) next: u64,
    /// When the next token may be spent, unix µs (with a token rate).
    #[serde(default)]
    pub(crate) tokens: u64,
    /// Per agent type: when its next request may go out, unix µs.
    #[serde(default)]
    pub(crate) agents: BTreeMap<String, u64>,
    /// The endpoint, for people reading the schedule.
    #[serde(default)]
    pub endpoint: String,
    /// The model, for people reading the schedule.
    #[serde(default)]
    pub model: String,
    /// Requests a second the schedule paces at now; 0 before its first use.
    #[serde(default)]
    pub rate: f64,
    /// The most it paces at (before the margin): what is configured or
    /// heard, the lower; 0 when neither is known.
    #[serde(default)]
    pub ceiling: f64,
    /// Where the ceiling (or, without one, the rate) comes from.
    #[serde(default)]
    pub source: Source,
    /// Still doubling: nothing known and no `429` yet.
    #[serde(default)]
    pub(crate) starting: bool,
    /// The requests rate the provider's headers last gave, a second.
    #[serde(default)]
    pub(crate) heard: f64,
    /// The tokens rate the provider's headers last gave, a second.
    #[serde(default)]
    pub(crate) heard_tokens: f64,
    /// Tokens a second: the configured or heard token rate, the lower; 0
    /// when neither is known.
    #[serde(default)]
    pub token_rate: f64,
    /// When the rate was last cut for a `429`, unix µs.
    #[serde(default)]
    pub cut_at: u64,
    /// The rate before the last cut.
    #[serde(default)]
    pub(crate) cut_from: f64,
    /// When the rate last grew, unix µs.
    #[serde(default)]
    pub(crate) grew_at: u64,
    /// How many calls the provider refused with `429`.
    #[serde(default)]
    pub refused: u64,
}

/// What one agent type's spec says of the limit.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct Configured {
    /// Requests a second, from `requests_per_minute`.
    pub(crate) rps: Option<f64>,
    /// Tokens a second, from `tokens_per_minute`.
    pub(crate) tps: Option<f64>,
}

/// What the provider's headers gave.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct Heard {
    /// Requests a second.
    pub(crate) rps: Option<f64>,
    /// Tokens a second.
    pub(crate) tps: Option<f64>,
    /// How long until a request may go again, when none is left.
    pub(crate) empty_for_us: Option<u64>,
}

impl Schedule {
    /// Brings the schedule in line with `configured` before it is used: a
    /// fresh schedule starts slowly, and never above its ceiling.
    pub(crate) fn settle(&mut self, configured: Configured, now: u64) {
        let ceiling = lowest(configured.rps, positive(self.heard));
        let source = match (configured.rps, positive(self.heard)) {
            (_, Some(heard)) if ceiling == Some(heard) => Source::Headers,
            (Some(_), _) => Source::Configured,
            _ => Source::Adaptive,
        };
        if self.rate <= 0.0 {
            self.rate = ceiling.map_or(START_RPS, |c| (c * MARGIN).min(START_RPS));
            self.starting = true;
            self.grew_at = now;
        }
        if let Some(ceiling) = ceiling {
            self.cap(ceiling);
        }
        self.ceiling = ceiling.unwrap_or(0.0);
        self.source = source;
        self.token_rate = lowest(configured.tps, positive(self.heard_tokens)).unwrap_or(0.0);
    }

    /// Grows the rate for a reservation at `now` that found callers held
    /// back by it (`waiting`): doubling a second in slow start, else
    /// climbing additively, up to the ceiling, for the time since the last
    /// reservation that waited (at most a second). Time without waiting
    /// callers does not count.
    pub(crate) fn grow(&mut self, now: u64, waiting: bool) {
        if !waiting {
            return;
        }
        let seconds = (now.saturating_sub(self.grew_at) as f64 / 1e6).min(1.0);
        self.grew_at = now;
        if seconds <= 0.0 {
            return;
        }
        self.rate = if self.starting {
            self.rate * seconds.exp2()
        } else {
            let step = (self.cut_from.max(self.rate) * CLIMB).max(MIN_RPS);
            self.rate + step * seconds
        };
        if self.ceiling > 0.0 {
            self.cap(self.ceiling);
        }
    }

    /// Keeps the rate to `ceiling` (times the margin); slow start ends there.
    fn cap(&mut self, ceiling: f64) {
        let most = ceiling * MARGIN;
        if self.rate >= most {
            self.rate = most;
            self.starting = false;
        }
    }

    /// The provider refused a call that went out at `slot` (unix µs) with
    /// `429`. Unless the rate was cut after that call went out (it is one
    /// of the same burst), the rate is cut, and the next slot moves one new
    /// interval on: the callers that would have met the same full window
    /// wait, the others do not.
    pub(crate) fn refuse(&mut self, slot: u64, now: u64) {
        self.refused += 1;
        if self.cut_at != 0 && slot <= self.cut_at {
            return;
        }
        let share = if self.starting { START_CUT } else { CUT };
        self.cut_from = self.rate;
        self.rate = (self.rate * share).max(MIN_RPS);
        self.starting = false;
        self.cut_at = now;
        self.grew_at = now;
        self.next = self.next.max(now.saturating_add(self.interval()));
    }

    /// What the provider's headers said at `now`.
    pub(crate) fn hear(&mut self, heard: Heard, now: u64) {
        if let Some(rps) = heard.rps {
            self.heard = rps;
            self.ceiling = lowest(positive(self.ceiling), Some(rps)).unwrap_or(rps);
            self.source = Source::Headers;
            self.starting = false;
            let cut_lately = self.cut_at != 0 && now.saturating_sub(self.cut_at) < CUT_MEMORY_US;
            let paced = rps * MARGIN;
            self.rate = if cut_lately {
                self.rate.min(paced).max(MIN_RPS)
            } else {
                paced
            };
        }
        if let Some(tps) = heard.tps {
            self.heard_tokens = tps;
            self.token_rate = lowest(positive(self.token_rate), Some(tps)).unwrap_or(tps);
        }
        if let Some(empty) = heard.empty_for_us {
            self.next = self.next.max(now.saturating_add(empty));
        }
    }

    /// How far ahead of `next` a request may go: one interval in slow start
    /// (two calls back to back, as one conversation's turn makes, are not
    /// held apart while nothing is known), none once the rate is near a
    /// limit.
    pub(crate) fn tolerance(&self) -> u64 {
        if self.starting { self.interval() } else { 0 }
    }

    /// Microseconds between two requests at the current rate.
    pub(crate) fn interval(&self) -> u64 {
        (1e6 / self.rate.max(MIN_RPS)) as u64
    }

    /// Microseconds a token takes at the token rate, when there is one.
    pub(crate) fn per_token(&self) -> Option<f64> {
        positive(self.token_rate).map(|tps| 1e6 / tps)
    }
}

fn positive(value: f64) -> Option<f64> {
    (value > 0.0 && value.is_finite()).then_some(value)
}

fn lowest(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests;
