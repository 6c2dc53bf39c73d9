//! A provider's rate limit, for the model stand-in: at most `limit`
//! requests in any sliding window of `window`, the rest refused with `429`
//! and `Retry-After`. Every answer may say what is left, as providers write
//! it ([`Headers`]).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a [`RateWindow`] decided of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Whether it is answered (`false`: refused with 429).
    pub admitted: bool,
    /// The headers to answer with: `Retry-After` on a refusal, and the
    /// `x-ratelimit-*` ones when the window sends them.
    pub headers: Vec<(String, String)>,
}

/// The rate-limit headers a [`RateWindow`] answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Headers {
    /// None (a refusal still says `Retry-After`).
    None,
    /// OpenAI's `x-ratelimit-{limit,remaining,reset}-requests` for the
    /// window itself, the reset aligned to whole requests: the time until
    /// the limit is whole again at its steady rate, `limit` per `window`.
    Aligned,
    /// OpenAI's headers for a bucket of `per_minute` requests refilled
    /// continuously, as the request found it: `remaining` its whole
    /// requests, the reset the time until it is full (`1` used over a few
    /// milliseconds when a fraction is missing), with tokens likewise.
    Continuous {
        /// The bucket's size and refill, a minute.
        per_minute: u64,
    },
    /// Anthropic's `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`
    /// for the same continuous bucket, the reset an RFC 3339 time.
    Anthropic {
        /// The bucket's size and refill, a minute.
        per_minute: u64,
    },
    /// The continuous minute's OpenAI headers, and beside them a "day" of
    /// `day_ms` allowing `per_day` requests (`x-ratelimit-*-requests-day`,
    /// the reset in seconds), refused with `429` once spent.
    PerDay {
        /// The minute's bucket.
        per_minute: u64,
        /// Requests a day.
        per_day: u64,
        /// How long the day is, ms.
        day_ms: u64,
    },
    /// Only `x-ratelimit-remaining-requests` and `-reset-requests` of the
    /// window, aligned.
    RemainingOnly,
    /// Headers that cannot be read.
    Malformed,
}

/// A continuous bucket, a day's count, and when they were last seen.
#[derive(Debug)]
struct Buckets {
    tokens: f64,
    at: Instant,
    day_used: u64,
    day_began: Instant,
}

/// A sliding-window request limit, shared by the stand-in's connections.
#[derive(Debug)]
pub struct RateWindow {
    limit: usize,
    window: Duration,
    retry_after: String,
    headers: Headers,
    admitted: Mutex<VecDeque<Instant>>,
    buckets: Mutex<Option<Buckets>>,
}

impl RateWindow {
    /// At most `limit` requests in any `window`; a refusal says
    /// `Retry-After: retry_after` (seconds, or an HTTP date); `headers`
    /// adds the `x-ratelimit-*` headers to every answer.
    #[must_use]
    pub fn new(limit: usize, window: Duration, retry_after: &str, headers: bool) -> Self {
        let headers = if headers {
            Headers::Aligned
        } else {
            Headers::None
        };
        Self::with(limit, window, retry_after, headers)
    }

    /// At most `limit` requests in any `window`, answering with `headers`.
    #[must_use]
    pub fn with(limit: usize, window: Duration, retry_after: &str, headers: Headers) -> Self {
        Self {
            limit: limit.max(1),
            window,
            retry_after: retry_after.to_owned(),
            headers,
            admitted: Mutex::new(VecDeque::new()),
            buckets: Mutex::new(None),
        }
    }

    /// Admits or refuses a request arriving now.
    pub fn admit(&self) -> Verdict {
        let now = Instant::now();
        let mut admitted = self
            .admitted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while admitted
            .front()
            .is_some_and(|at| now.duration_since(*at) >= self.window)
        {
            admitted.pop_front();
        }
        let mut ok = admitted.len() < self.limit;
        let mut headers = Vec::new();
        let day = self.day(now, &mut ok);
        if ok {
            admitted.push_back(now);
        }
        if !ok {
            headers.push(("Retry-After".to_owned(), self.retry_after.clone()));
        }
        let used = admitted.len();
        let remaining = self.limit.saturating_sub(used);
        // Whole again once `used` requests refill at `limit` per window.
        let reset = self.window.mul_f64(used as f64 / self.limit as f64);
        let aligned = |names: [&'static str; 3]| {
            [
                (names[0], self.limit.to_string()),
                (names[1], remaining.to_string()),
                (names[2], format!("{}ms", reset.as_millis().max(1))),
            ]
        };
        let pairs: Vec<(&str, String)> = match self.headers {
            Headers::None => Vec::new(),
            Headers::Aligned => aligned(NAMES).to_vec(),
            Headers::RemainingOnly => aligned(NAMES)[1..].to_vec(),
            Headers::Malformed => vec![
                (NAMES[0], "lots".to_owned()),
                (NAMES[1], "-3".to_owned()),
                (NAMES[2], "soon".to_owned()),
                ("anthropic-ratelimit-requests-limit", "many".to_owned()),
                ("anthropic-ratelimit-requests-remaining", "9".to_owned()),
                ("anthropic-ratelimit-requests-reset", "later".to_owned()),
            ],
            Headers::Continuous { per_minute } => self.continuous(per_minute, now, ok, false),
            Headers::Anthropic { per_minute } => self.continuous(per_minute, now, ok, true),
            Headers::PerDay { per_minute, .. } => {
                let mut pairs = self.continuous(per_minute, now, ok, false);
                pairs.extend(day);
                pairs
            }
        };
        headers.extend(pairs.into_iter().map(|(n, v)| (n.to_owned(), v)));
        Verdict {
            admitted: ok,
            headers,
        }
    }
}

/// OpenAI's names of the requests window's headers.
const NAMES: [&str; 3] = [
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
];

impl RateWindow {
    /// The continuous bucket of `per_minute` as a request finds it at
    /// `now` (charged when `admitted`), in OpenAI's headers or Anthropic's;
    /// tokens likewise, a thousand a request.
    fn continuous(
        &self,
        per_minute: u64,
        now: Instant,
        admitted: bool,
        anthropic: bool,
    ) -> Vec<(&'static str, String)> {
        let size = per_minute as f64;
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let bucket = buckets.get_or_insert(Buckets {
            tokens: size,
            at: now,
            day_used: 0,
            day_began: now,
        });
        let per_second = size / 60.0;
        bucket.tokens =
            (bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * per_second).min(size);
        bucket.at = now;
        let found = bucket.tokens;
        if admitted {
            bucket.tokens = (bucket.tokens - 1.0).max(0.0);
        }
        let reset = Duration::from_secs_f64((size - found) / per_second);
        let remaining = found.floor() as u64;
        let tokens = remaining * 1000;
        let (limit, tokens_limit) = (per_minute.to_string(), (per_minute * 1000).to_string());
        if anthropic {
            let at = chrono::DateTime::<chrono::Utc>::from(std::time::SystemTime::now() + reset);
            let at = at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            return vec![
                ("anthropic-ratelimit-requests-limit", limit),
                (
                    "anthropic-ratelimit-requests-remaining",
                    remaining.to_string(),
                ),
                ("anthropic-ratelimit-requests-reset", at.clone()),
                ("anthropic-ratelimit-tokens-limit", tokens_limit),
                ("anthropic-ratelimit-tokens-remaining", tokens.to_string()),
                ("anthropic-ratelimit-tokens-reset", at),
            ];
        }
        let reset = format!("{:.3}s", reset.as_secs_f64());
        vec![
            (NAMES[0], limit),
            (NAMES[1], remaining.to_string()),
            (NAMES[2], reset.clone()),
            ("x-ratelimit-limit-tokens", tokens_limit),
            ("x-ratelimit-remaining-tokens", tokens.to_string()),
            ("x-ratelimit-reset-tokens", reset),
        ]
    }

    /// With a per-day limit: refuses (`ok` false) once the day is spent,
    /// counts an admitted request, and gives the day's headers.
    fn day(&self, now: Instant, ok: &mut bool) -> Vec<(&'static str, String)> {
        let Headers::PerDay {
            per_day, day_ms, ..
        } = self.headers
        else {
            return Vec::new();
        };
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let bucket = buckets.get_or_insert(Buckets {
            tokens: f64::MAX,
            at: now,
            day_used: 0,
            day_began: now,
        });
        let day = Duration::from_millis(day_ms);
        while now.duration_since(bucket.day_began) >= day {
            bucket.day_began += day;
            bucket.day_used = 0;
        }
        if bucket.day_used >= per_day {
            *ok = false;
        } else if *ok {
            bucket.day_used += 1;
        }
        let reset = day.saturating_sub(now.duration_since(bucket.day_began));
        vec![
            ("x-ratelimit-limit-requests-day", per_day.to_string()),
            (
                "x-ratelimit-remaining-requests-day",
                (per_day - bucket.day_used).to_string(),
            ),
            (
                "x-ratelimit-reset-requests-day",
                format!("{:.3}", reset.as_secs_f64()),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(v: &Verdict, name: &str) -> Option<String> {
        v.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.clone())
    }

    #[test]
    fn a_continuous_bucket_reports_the_request_as_it_found_it_and_a_day_runs_out() {
        let window = RateWindow::with(
            100,
            Duration::from_secs(1),
            "1",
            Headers::PerDay {
                per_minute: 600,
                per_day: 2,
                day_ms: 60_000,
            },
        );
        let first = window.admit();
        assert_eq!(
            header(&first, "x-ratelimit-remaining-requests").as_deref(),
            Some("600")
        );
        assert_eq!(
            header(&first, "x-ratelimit-reset-requests").as_deref(),
            Some("0.000s")
        );
        let second = window.admit();
        // It found the first one gone, and a sliver of it back.
        assert_eq!(
            header(&second, "x-ratelimit-remaining-requests").as_deref(),
            Some("599")
        );
        let reset = header(&second, "x-ratelimit-reset-requests").unwrap();
        assert!(["0.099s", "0.100s"].contains(&reset.as_str()), "{reset}");
        assert_eq!(
            header(&second, "x-ratelimit-remaining-requests-day").as_deref(),
            Some("0")
        );
        let third = window.admit();
        assert!(!third.admitted);
        assert_eq!(header(&third, "Retry-After").as_deref(), Some("1"));
        let anthropic = RateWindow::with(
            10,
            Duration::from_secs(1),
            "1",
            Headers::Anthropic { per_minute: 60 },
        );
        let verdict = anthropic.admit();
        let reset = header(&verdict, "anthropic-ratelimit-requests-reset").unwrap();
        assert!(
            chrono::DateTime::parse_from_rfc3339(&reset).is_ok(),
            "{reset}"
        );
        assert_eq!(
            header(&verdict, "anthropic-ratelimit-requests-limit").as_deref(),
            Some("60")
        );
        let only =
            RateWindow::with(10, Duration::from_secs(1), "1", Headers::RemainingOnly).admit();
        assert_eq!(header(&only, "x-ratelimit-limit-requests"), None);
        assert_eq!(
            header(&only, "x-ratelimit-remaining-requests").as_deref(),
            Some("9")
        );
    }

    #[test]
    fn it_admits_the_limit_then_refuses_with_retry_after_and_counts_down() {
        let window = RateWindow::new(3, Duration::from_secs(60), "1", true);
        let verdicts: Vec<Verdict> = (0..4).map(|_| window.admit()).collect();
        assert_eq!(
            verdicts.iter().map(|v| v.admitted).collect::<Vec<_>>(),
            [true, true, true, false]
        );
        let header = |v: &Verdict, name: &str| {
            v.headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, value)| value.clone())
        };
        assert_eq!(
            header(&verdicts[0], "x-ratelimit-remaining-requests").as_deref(),
            Some("2")
        );
        assert_eq!(
            header(&verdicts[0], "x-ratelimit-reset-requests").as_deref(),
            Some("20000ms")
        );
        assert_eq!(header(&verdicts[3], "Retry-After").as_deref(), Some("1"));
        assert_eq!(
            header(&verdicts[3], "x-ratelimit-remaining-requests").as_deref(),
            Some("0")
        );
        let quiet = RateWindow::new(1, Duration::from_secs(1), "2", false);
        assert!(quiet.admit().headers.is_empty());
        assert_eq!(
            quiet.admit().headers,
            [("Retry-After".to_owned(), "2".to_owned())]
        );
    }
}
