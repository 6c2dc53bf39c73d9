//! One endpoint and model's schedule, as stored, and how it learns: the
//! pure part of the shared limit, with no I/O, so every rule is tested on
//! its own.
//!
//! With a rate known, the schedule paces requests at `rate` a second, one
//! slot per interval, never in bursts. Where the rate comes from:
//!
//! - **configured** (`[llm.limits]`): a ceiling, paced a little under,
//!   and reached by a slow start of the rate (from 5 a second, doubling each
//!   second while callers wait), so a ceiling set too high costs a few
//!   `429`s, not a storm;
//! - **headers**: what the provider's rate-limit headers say ([`super::heard`]
//!   weighs them); also a ceiling, and it wins when lower;
//! - **adaptive**: with nothing known, calls are not paced at all: a
//!   window of calls may be in flight at once ([`START_WINDOW`]), and it
//!   widens by one for each answer while callers wait for it, at most
//!   doubling a second (the slow start of TCP). A lone caller, one call at a
//!   time, is never held back, and a burst starts small. The first `429`
//!   ends this: the calls sent in the second before the refused one were
//!   let through, so that is the rate the `429` showed, and the schedule
//!   paces a little under it from then on.
//!   Later `429`s cut the rate (×0.85, once per burst) and it climbs back
//!   additively, 2.5 % of the rate before the cut a second.
//!
//! A configured or heard ceiling is not a promise: a `429` below it cuts the
//! rate below it too, and for a minute after a `429` neither the headers
//! nor the climb go above the rate the `429` showed.
//!
//! A rate, and a window, only grow while callers are held back by them, so a
//! quiet agent never drifts up to what it has not tried. The window bounds
//! the calls in flight whether or not the rate is known; each process says
//! how many it has in flight, and what a process has not said for
//! [`FLIGHT_LEASE_US`] (it stopped) no longer counts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub(crate) use window::{Flight, Sliding};

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
/// The calls that may be in flight at once with nothing known.
pub(crate) const START_WINDOW: f64 = 4.0;
/// The most a window lets be in flight.
pub(crate) const MAX_WINDOW: f64 = 4096.0;
/// How long a process's calls in flight count without it saying again, µs.
pub(crate) const FLIGHT_LEASE_US: u64 = 30_000_000;
/// How long the rate a `429` showed caps the headers and the climb, µs.
const SHOWN_FOR_US: u64 = 60_000_000;
/// The lowest rate a `429` is taken to show, requests a second.
const MIN_SHOWN: f64 = 2.0;
/// The headers a schedule may have heard, by bit of [`Schedule::headers`].
pub(crate) const HEADER_NAMES: [&str; 4] = [
    "x-ratelimit",
    "x-ratelimit-day",
    "anthropic-ratelimit",
    "retry-after",
];

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
    /// In slow start by the window: nothing is known and no `429` came, so
    /// calls are not paced (`rate` is 0).
    #[serde(default)]
    pub unpaced: bool,
    /// How many calls may be in flight at once.
    #[serde(default)]
    pub window: f64,
    /// The window when the current second of its growth began.
    #[serde(default)]
    pub(crate) window_base: f64,
    /// When the current second of the window's growth began, unix µs.
    #[serde(default)]
    pub(crate) window_at: u64,
    /// When a call last found the window full, unix µs.
    #[serde(default)]
    pub(crate) held_at: u64,
    /// Per process: its calls in flight, and when it said so.
    #[serde(default)]
    pub(crate) flights: BTreeMap<String, Flight>,
    /// Calls sent, by second.
    #[serde(default)]
    pub(crate) sent: Sliding,
    /// The rate the last `429` showed, requests a second, before the
    /// margin: in the window's slow start, the calls sent in the second
    /// before the refused one (they were let through), else the rate that
    /// drew it; 0 before any.
    #[serde(default)]
    pub shown: f64,
    /// When it was shown, unix µs.
    #[serde(default)]
    pub(crate) shown_at: u64,
    /// Which headers the provider sent (bits of [`HEADER_NAMES`]).
    #[serde(default)]
    pub(crate) headers: u8,
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
    /// Which headers were there (bits of [`HEADER_NAMES`]).
    pub(crate) from: u8,
}

impl Schedule {
    /// Brings the schedule in line with `configured` before it is used: a
    /// fresh schedule starts slowly (its rate, under a ceiling; its window,
    /// without one), and never above its ceiling.
    pub(crate) fn align(&mut self, configured: Configured, now: u64) {
        let heard = positive(self.heard);
        let ceiling = lowest(configured.rps, heard);
        let source = match (configured.rps, heard) {
            (_, Some(heard)) if ceiling == Some(heard) => Source::Headers,
            (Some(_), _) => Source::Configured,
            _ => Source::Adaptive,
        };
        if self.window <= 0.0 {
            self.window = START_WINDOW;
            self.window_base = START_WINDOW;
        }
        if self.rate <= 0.0 && !self.unpaced {
            match ceiling {
                Some(ceiling) => {
                    self.rate = (ceiling * MARGIN).min(START_RPS);
                    self.starting = true;
                    self.grew_at = now;
                }
                None => self.unpaced = true,
            }
        }
        if let (true, Some(ceiling)) = (self.unpaced, ceiling) {
            self.pace(ceiling * MARGIN, self.sent.last_second(now), now);
        }
        self.ceiling = ceiling.unwrap_or(0.0);
        if let Some(top) = self.top(now) {
            self.cap(top);
        }
        self.source = source;
        self.token_rate = lowest(configured.tps, positive(self.heard_tokens)).unwrap_or(0.0);
    }

    /// The most the rate may be (before the margin): the ceiling, and for
    /// a while after a `429` the rate it showed.
    fn top(&self, now: u64) -> Option<f64> {
        lowest(positive(self.ceiling), self.shown_lately(now))
    }

    /// The rate the last `429` showed, while it caps the rate.
    fn shown_lately(&self, now: u64) -> Option<f64> {
        (self.shown_at != 0 && now.saturating_sub(self.shown_at) < SHOWN_FOR_US)
            .then_some(self.shown)
            .and_then(positive)
    }

    /// Ends the window's slow start: paced at `rate` from now, the `burst`
    /// of calls sent in the last second counted as if they had been paced.
    fn pace(&mut self, rate: f64, burst: f64, now: u64) {
        self.unpaced = false;
        self.starting = false;
        self.rate = rate.max(MIN_RPS);
        self.grew_at = now;
        let behind = (burst * self.interval() as f64) as u64;
        self.next = self.next.max(now.saturating_add(behind));
    }

    /// Grows the rate for a reservation at `now` that found callers held
    /// back by it (`waiting`): doubling a second in slow start, else
    /// climbing additively, up to the ceiling, for the time since the last
    /// reservation that waited (at most a second). Time without waiting
    /// callers does not count.
    pub(crate) fn grow(&mut self, now: u64, waiting: bool) {
        if !waiting || self.unpaced {
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
        if let Some(top) = self.top(now) {
            self.cap(top);
        }
    }

    /// Keeps the rate to `ceiling` (times the margin); slow start ends there.
    fn cap(&mut self, ceiling: f64) {
        let most = ceiling * MARGIN;
        if self.rate >= most && !self.unpaced {
            self.rate = most;
            self.starting = false;
        }
    }

    /// The provider refused a call that went out at `slot` (unix µs), after
    /// `sent` calls in the second before it, with `429`. Unless the rate
    /// was cut after that call went out (it is one of the same burst), the
    /// window halves, and: in the window's slow start, the schedule paces
    /// from now on a little under the calls sent in the second before the
    /// refused one (the rate the `429` showed: they were let through), that
    /// second's calls counted as paced; else the rate is cut, and the next
    /// slot moves one new interval on: the callers that would have met the
    /// same full window wait, the others do not.
    pub(crate) fn refuse(&mut self, (slot, sent): (u64, f64), now: u64) {
        self.refused += 1;
        if self.cut_at != 0 && slot <= self.cut_at {
            // Of the same burst: one sent earlier shows the rate better.
            if self.shown_at == self.cut_at && self.cut_from == self.shown && sent > 0.0 {
                let shown = sent.max(MIN_SHOWN);
                if shown < self.shown {
                    self.shown = shown;
                    self.cut_from = shown;
                    self.rate = self.rate.min(shown * MARGIN);
                }
            }
            return;
        }
        self.window = (self.window / 2.0).max(2.0);
        self.window_base = self.window;
        self.cut_at = now;
        self.shown_at = now;
        if self.unpaced {
            self.shown = sent.max(MIN_SHOWN);
            self.cut_from = self.shown;
            self.pace(self.shown * MARGIN, sent, now);
            return;
        }
        // Paced: the rate that drew it is as high as it may climb back
        // (the shown rate is before the margin).
        self.shown = self.rate / MARGIN;
        let share = if self.starting { START_CUT } else { CUT };
        self.cut_from = self.rate;
        self.rate = (self.rate * share).max(MIN_RPS);
        self.starting = false;
        self.grew_at = now;
        self.next = self.next.max(now.saturating_add(self.interval()));
    }

    /// What the provider's headers said at `now`.
    pub(crate) fn hear(&mut self, heard: Heard, now: u64) {
        self.headers |= heard.from;
        if let Some(rps) = heard.rps {
            self.heard = rps;
            self.ceiling = lowest(positive(self.ceiling), Some(rps)).unwrap_or(rps);
            self.source = Source::Headers;
            let paced = self.shown_lately(now).unwrap_or(rps).min(rps) * MARGIN;
            if self.unpaced {
                self.pace(paced, self.sent.last_second(now), now);
            }
            self.starting = false;
            let cut_lately = self.cut_at != 0 && now.saturating_sub(self.cut_at) < CUT_MEMORY_US;
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

mod window;

#[cfg(test)]
mod tests;
