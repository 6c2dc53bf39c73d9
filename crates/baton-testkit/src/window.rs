//! A provider's rate limit, for the model stand-in: at most `limit`
//! requests in any sliding window of `window`, the rest refused with `429`
//! and `Retry-After`. With headers on, every answer says what is left as
//! OpenAI-compatible providers do (`x-ratelimit-limit-requests`,
//! `-remaining-requests`, and `-reset-requests`: the time until the limit is
//! whole again at its steady rate, `limit` per `window`).

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

/// A sliding-window request limit, shared by the stand-in's connections.
#[derive(Debug)]
pub struct RateWindow {
    limit: usize,
    window: Duration,
    retry_after: String,
    headers: bool,
    admitted: Mutex<VecDeque<Instant>>,
}

impl RateWindow {
    /// At most `limit` requests in any `window`; a refusal says
    /// `Retry-After: retry_after` (seconds, or an HTTP date); `headers`
    /// adds the `x-ratelimit-*` headers to every answer.
    #[must_use]
    pub fn new(limit: usize, window: Duration, retry_after: &str, headers: bool) -> Self {
        Self {
            limit: limit.max(1),
            window,
            retry_after: retry_after.to_owned(),
            headers,
            admitted: Mutex::new(VecDeque::new()),
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
        let ok = admitted.len() < self.limit;
        if ok {
            admitted.push_back(now);
        }
        let mut headers = Vec::new();
        if !ok {
            headers.push(("Retry-After".to_owned(), self.retry_after.clone()));
        }
        if self.headers {
            let used = admitted.len();
            let remaining = self.limit.saturating_sub(used);
            // Whole again once `used` requests refill at `limit` per window.
            let reset = self.window.mul_f64(used as f64 / self.limit as f64);
            headers.extend([
                (
                    "x-ratelimit-limit-requests".to_owned(),
                    self.limit.to_string(),
                ),
                (
                    "x-ratelimit-remaining-requests".to_owned(),
                    remaining.to_string(),
                ),
                (
                    "x-ratelimit-reset-requests".to_owned(),
                    format!("{}ms", reset.as_millis().max(1)),
                ),
            ]);
        }
        Verdict {
            admitted: ok,
            headers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
