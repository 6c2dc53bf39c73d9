//! What the provider's headers say of its steady rate, weighed over a
//! window of replies rather than taken from one.
//!
//! One reading of a window with a `limit` (`used = limit - remaining` of
//! it used, whole again in `reset`) bounds the rate the provider refills
//! at, whether it refills continuously (the reset is the time until the
//! bucket is full) or in whole requests (the reset is aligned to them):
//! `remaining` is a whole number, so what is really used lies between
//! `used - 1` and `used`, and the rate between `(used - 1) / reset` and
//! `used / reset` (widened by how precisely the reset is written: to the
//! millisecond for a duration, to the second for an RFC 3339 time without a
//! fraction). A reading where one request is used says little: `1` over a
//! few milliseconds may be a fraction of a request refilled over them.
//!
//! So the readings of the last minute are intersected: the rate is at least
//! the highest lower bound and at most the lowest upper bound. Nothing is
//! heard until some reading has two or more used (a lower bound above
//! zero). Then the rate is the documented one, `limit` a minute (OpenAI's
//! and Anthropic's limits are per minute), when the readings allow it;
//! else the lowest upper bound (the readings show another window, as
//! OpenAI-compatible servers with per-second or per-day limits in the same
//! headers do). A reading that contradicts the others (the limit changed)
//! starts the window again.
//!
//! A per-day window, and a window without a `limit`, say what is left until
//! the reset: they bound the rate to spreading `remaining` over `reset`, so
//! they bind only as the day's allowance runs low. The lowest of all these
//! is the rate heard, and a window with nothing left holds every call back
//! until it has some again.

use crate::llm::http::headers::{Advice, Family, Span, Window};

use super::schedule::Heard;

/// How long a window of readings lasts before it starts again, µs.
const READINGS_FOR_US: u64 = 60_000_000;

/// The bounds a window of readings put on one rate.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    /// At least this, a second.
    low: f64,
    /// At most this, a second (infinite: no upper bound yet).
    high: f64,
    /// Some reading had two or more used.
    informative: bool,
    /// When the window began, unix µs.
    since: u64,
}

impl Bounds {
    fn of(low: f64, high: f64, informative: bool, since: u64) -> Self {
        Self {
            low,
            high,
            informative,
            since,
        }
    }

    /// Adds the reading of `window` at `now`; the rate the window of
    /// readings gives, if it gives one.
    fn add(slot: &mut Option<Self>, window: &Window, now: u64) -> Option<f64> {
        let limit = window.limit?;
        let used = window.used()?;
        if used > 0 && window.reset.as_secs_f64() > 0.0 {
            let reset = window.reset.as_secs_f64();
            let precision = window.precision.as_secs_f64();
            let low = (used - 1) as f64 / (reset + precision);
            let high = if reset > precision {
                used as f64 / (reset - precision)
            } else {
                f64::INFINITY
            };
            let reading = Self::of(low, high, used >= 2, now);
            *slot = Some(match *slot {
                Some(kept)
                    if now.saturating_sub(kept.since) < READINGS_FOR_US
                        && low <= kept.high * 1.01
                        && high >= kept.low * 0.99 =>
                {
                    Self::of(
                        kept.low.max(low),
                        kept.high.min(high),
                        kept.informative || reading.informative,
                        kept.since,
                    )
                }
                _ => reading,
            });
        }
        slot.and_then(|bounds| bounds.rate(limit))
    }

    /// The rate these bounds give for a window of `limit` a minute.
    fn rate(self, limit: u64) -> Option<f64> {
        if !self.informative {
            return None;
        }
        let per_minute = limit as f64 / 60.0;
        if (self.low..=self.high).contains(&per_minute) {
            Some(per_minute)
        } else if self.high.is_finite() {
            Some(self.high)
        } else {
            Some(self.low)
        }
    }
}

/// One process's readings of the provider's headers.
#[derive(Debug, Default)]
pub(crate) struct Readings {
    /// Per minute, requests: OpenAI's, Anthropic's.
    requests: [Option<Bounds>; 2],
    /// Per minute, tokens.
    tokens: [Option<Bounds>; 2],
}

impl Readings {
    /// What `advice`, read at `now` (unix µs), adds to what was heard.
    pub(crate) fn hear(&mut self, advice: &Advice, now: u64) -> Heard {
        let empty_for_us = advice
            .requests
            .iter()
            .filter(|w| w.remaining == 0)
            .map(|w| match (w.span, w.limit) {
                // A minute's bucket: one request is back in its share of
                // the reset.
                (Span::Minute, Some(limit)) => w.reset / u32::try_from(limit).unwrap_or(u32::MAX),
                // A day's, or one whose size is unknown: at the reset.
                _ => w.reset,
            })
            .max()
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        Heard {
            rps: rates(&mut self.requests, &advice.requests, now),
            tps: rates(&mut self.tokens, &advice.tokens, now),
            empty_for_us,
            from: from(advice),
        }
    }
}

/// The lowest rate `windows` give, weighed with the readings kept in `kept`.
fn rates(kept: &mut [Option<Bounds>; 2], windows: &[Window], now: u64) -> Option<f64> {
    windows
        .iter()
        .filter_map(|window| match (window.span, window.limit) {
            (Span::Minute, Some(_)) => {
                let slot = &mut kept[usize::from(window.family == Family::Anthropic)];
                Bounds::add(slot, window, now)
            }
            // What is left, spread until the reset.
            _ => {
                let reset = window.reset.as_secs_f64();
                (reset >= 0.001 && window.remaining > 0).then(|| window.remaining as f64 / reset)
            }
        })
        .filter(|rate| rate.is_finite() && *rate > 0.0)
        .reduce(f64::min)
}

/// Which headers `advice` holds, as the bits of [`Heard::from`].
fn from(advice: &Advice) -> u8 {
    let names = advice.heard();
    super::schedule::HEADER_NAMES
        .iter()
        .enumerate()
        .filter(|(_, name)| names.contains(name))
        .fold(0, |bits, (bit, _)| bits | 1 << bit)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const S: u64 = 1_000_000;

    fn openai(limit: u64, remaining: u64, reset_ms: u64) -> Advice {
        Advice {
            requests: vec![Window {
                limit: Some(limit),
                remaining,
                reset: Duration::from_millis(reset_ms),
                precision: Duration::from_millis(1),
                span: Span::Minute,
                family: Family::OpenAi,
            }],
            ..Advice::default()
        }
    }

    #[test]
    fn one_used_over_a_few_milliseconds_is_not_heard_as_a_rate() {
        let mut readings = Readings::default();
        // A continuous bucket of 600 a minute, a fraction of a request used.
        assert_eq!(readings.hear(&openai(600, 599, 6), S).rps, None);
        assert_eq!(readings.hear(&openai(600, 599, 3), S + 1).rps, None);
        // Two used, refilling at 10 a second: the documented 600 a minute
        // fits the readings, and is the rate.
        let heard = readings.hear(&openai(600, 598, 150), S + 2).rps;
        assert_eq!(heard, Some(10.0));
        // Later readings of one used over a few milliseconds do not lift it.
        for at in 0..20 {
            let heard = readings.hear(&openai(600, 599, 2 + at % 5), S + 3 + at).rps;
            assert_eq!(heard, Some(10.0));
        }
    }

    #[test]
    fn readings_that_show_another_window_than_a_minute_win() {
        // 10 a second, aligned: 3 used are whole again in 300 ms.
        let mut readings = Readings::default();
        assert_eq!(readings.hear(&openai(10, 9, 100), S).rps, None);
        let heard = readings.hear(&openai(10, 7, 300), S + 1).rps.unwrap();
        assert!((9.9..10.2).contains(&heard), "{heard}");
        // 14 400 a day, refilled continuously, in the same headers: slower
        // than a minute's window.
        let mut readings = Readings::default();
        let heard = readings
            .hear(&openai(14_400, 14_390, 60_000), S)
            .rps
            .unwrap();
        assert!((0.15..0.17).contains(&heard), "{heard}");
    }

    #[test]
    fn a_reading_that_contradicts_the_window_starts_it_again() {
        let mut readings = Readings::default();
        assert_eq!(readings.hear(&openai(600, 590, 1_000), S).rps, Some(10.0));
        // The limit went up to 1200 a minute: 20 a second.
        assert_eq!(
            readings.hear(&openai(1200, 1190, 500), 2 * S).rps,
            Some(20.0)
        );
        // A minute on, the window starts again too.
        let later = readings.hear(&openai(600, 599, 6), 70 * S).rps;
        assert_eq!(later, None);
    }

    #[test]
    fn a_day_or_remaining_only_window_binds_as_it_runs_low_and_empty_waits() {
        let day = |remaining: u64, reset_s: u64| Window {
            limit: Some(14_400),
            remaining,
            reset: Duration::from_secs(reset_s),
            precision: Duration::from_millis(1),
            span: Span::Day,
            family: Family::OpenAi,
        };
        let mut advice = openai(600, 590, 1_000);
        advice.requests.push(day(14_000, 1_000));
        let mut readings = Readings::default();
        // Plenty left today: the minute's 10 a second binds.
        assert_eq!(readings.hear(&advice, S).rps, Some(10.0));
        // 36 left for the hour until the day resets: one a hundred seconds.
        advice.requests[1] = day(36, 3_600);
        assert_eq!(readings.hear(&advice, 2 * S).rps, Some(0.01));
        advice.requests[1] = day(0, 3_600);
        let heard = readings.hear(&advice, 3 * S);
        assert_eq!(heard.empty_for_us, Some(3_600 * S));
        assert_eq!(heard.from, 0b11);
        // Remaining and reset alone: the same.
        let mut only = openai(600, 4, 2_000);
        only.requests[0].limit = None;
        assert_eq!(Readings::default().hear(&only, S).rps, Some(2.0));
    }
}
