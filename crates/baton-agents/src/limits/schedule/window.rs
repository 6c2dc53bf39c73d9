//! The window of calls in flight, and the counts by second, of a
//! schedule: which process has how many calls in flight, whether the window
//! lets one more go, and how it widens.

use serde::{Deserialize, Serialize};

use super::{FLIGHT_LEASE_US, HEADER_NAMES, MAX_WINDOW, START_WINDOW, Schedule};

/// One process's calls in flight.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct Flight {
    /// How many.
    pub(crate) count: u32,
    /// When the process said so, unix µs.
    pub(crate) at: u64,
}

/// A count by second: this one's, the one before's, and when this one
/// began (unix µs). Over the last second it is about the one before's share
/// still in it plus this one's.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct Sliding {
    now: u32,
    before: u32,
    at: u64,
}

impl Sliding {
    fn roll(&mut self, now: u64) {
        let seconds = now.saturating_sub(self.at) / 1_000_000;
        if seconds >= 1 {
            self.before = if seconds == 1 { self.now } else { 0 };
            self.now = 0;
            self.at = now;
        }
    }

    /// Counts `n` at `now`.
    pub(crate) fn add(&mut self, n: u32, now: u64) {
        self.roll(now);
        self.now = self.now.saturating_add(n);
    }

    /// About how many were counted in the second before `now`.
    pub(crate) fn last_second(&self, now: u64) -> f64 {
        let mut this = *self;
        this.roll(now);
        let into = now.saturating_sub(this.at) as f64 / 1e6;
        f64::from(this.before) * (1.0 - into).max(0.0) + f64::from(this.now)
    }
}

impl Schedule {
    /// The calls in flight at `now`: `mine` of process `me`, and what the
    /// others said within their lease.
    pub(crate) fn in_flight(&self, now: u64, me: &str, mine: u32) -> u32 {
        self.flights
            .iter()
            .filter(|(process, flight)| {
                process.as_str() != me && flight.at.saturating_add(FLIGHT_LEASE_US) > now
            })
            .fold(mine, |sum, (_, flight)| sum.saturating_add(flight.count))
    }

    /// Whether the window lets one more call go with `in_flight` in flight;
    /// when it does not, the call is held back (noted, so the window grows).
    pub(crate) fn admits(&mut self, in_flight: u32, now: u64) -> bool {
        let admits = f64::from(in_flight) < self.window.max(1.0);
        if !admits && now.saturating_sub(self.held_at) > 100_000 {
            self.held_at = now;
        }
        admits
    }

    /// Process `me` has `count` calls in flight at `now`, and `answered`
    /// more were answered: the window widens by one an answer while callers
    /// were held back by it in the last second, at most doubling a second.
    pub(crate) fn flew(&mut self, me: &str, count: u32, answered: u32, now: u64) {
        self.flights
            .retain(|_, f| f.at.saturating_add(FLIGHT_LEASE_US) > now);
        if count == 0 {
            self.flights.remove(me);
        } else {
            self.flights
                .insert(me.to_owned(), Flight { count, at: now });
        }
        if answered == 0 {
            return;
        }
        if now.saturating_sub(self.window_at) >= 1_000_000 {
            self.window_base = self.window;
            self.window_at = now;
        }
        if now.saturating_sub(self.held_at) < 1_000_000 {
            let most = (2.0 * self.window_base.max(START_WINDOW)).min(MAX_WINDOW);
            self.window = (self.window + f64::from(answered))
                .min(most)
                .max(self.window);
        }
    }

    /// The headers the provider sent, as [`HEADER_NAMES`] names them.
    #[must_use]
    pub fn headers(&self) -> Vec<&'static str> {
        HEADER_NAMES
            .iter()
            .enumerate()
            .filter(|(bit, _)| self.headers & (1 << bit) != 0)
            .map(|(_, name)| *name)
            .collect()
    }

    /// The calls in flight at `now`, all processes together.
    #[must_use]
    pub fn flying(&self, now: u64) -> u32 {
        self.in_flight(now, "", 0)
    }
}
