//! What a provider's answer says of its rate limits: `Retry-After`, in
//! seconds or as an HTTP date (RFC 9110), and the `x-ratelimit-*` headers
//! OpenAI-compatible providers send (`limit`, `remaining` and `reset`, for
//! requests and for tokens). A header that cannot be read is ignored with
//! a warning, never an error: the call's own answer still counts.

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, RETRY_AFTER};

/// One rate-limit window, as the provider reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    /// How many the window allows (`x-ratelimit-limit-…`).
    pub(crate) limit: u64,
    /// How many are left in it (`x-ratelimit-remaining-…`).
    pub(crate) remaining: u64,
    /// When it is whole again (`x-ratelimit-reset-…`).
    pub(crate) reset: Duration,
}

/// What one answer's headers say of the provider's limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Advice {
    /// How long to wait before asking again.
    pub(crate) retry_after: Option<Duration>,
    /// The requests window.
    pub(crate) requests: Option<Window>,
    /// The tokens window.
    pub(crate) tokens: Option<Window>,
}

impl Advice {
    /// The advice of `headers`, read at `now`.
    pub(crate) fn of(headers: &HeaderMap, now: SystemTime) -> Self {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let retry_after = text(RETRY_AFTER.as_str()).and_then(|value| {
            let parsed = retry_after(value, now);
            if parsed.is_none() {
                tracing::warn!(
                    value,
                    "ignoring a Retry-After header that is neither seconds nor an HTTP date"
                );
            }
            parsed
        });
        Self {
            retry_after,
            requests: window(&text, "requests"),
            tokens: window(&text, "tokens"),
        }
    }
}

/// The window of `kind` (`requests`, `tokens`) the headers report, when all
/// three of its headers are there and readable.
fn window<'a>(text: &impl Fn(&str) -> Option<&'a str>, kind: &str) -> Option<Window> {
    let limit = text(&format!("x-ratelimit-limit-{kind}"));
    let remaining = text(&format!("x-ratelimit-remaining-{kind}"));
    let reset = text(&format!("x-ratelimit-reset-{kind}"));
    if limit.is_none() && remaining.is_none() && reset.is_none() {
        return None;
    }
    let read = (
        limit.and_then(|v| v.trim().parse::<u64>().ok()),
        remaining.and_then(|v| v.trim().parse::<u64>().ok()),
        reset.and_then(duration),
    );
    match read {
        (Some(limit), Some(remaining), Some(reset)) if limit > 0 => Some(Window {
            limit,
            remaining: remaining.min(limit),
            reset,
        }),
        _ => {
            tracing::warn!(
                kind,
                limit = limit.unwrap_or("-"),
                remaining = remaining.unwrap_or("-"),
                reset = reset.unwrap_or("-"),
                "ignoring x-ratelimit headers that cannot be read"
            );
            None
        }
    }
}

/// A `Retry-After` value: delay seconds, or an HTTP date (a date already
/// past is no wait).
pub(crate) fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A reset time as providers write it: `1s`, `20ms`, `6m0s`, `1h2m3.5s`,
/// or bare seconds (`0.5`).
pub(crate) fn duration(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let (mut total, mut number) = (0.0_f64, String::new());
    let mut chars = value.chars().peekable();
    let mut any = false;
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let unit = match (c, chars.peek()) {
            ('m', Some('s')) => {
                chars.next();
                0.001
            }
            ('h', _) => 3600.0,
            ('m', _) => 60.0,
            ('s', _) => 1.0,
            _ => return None,
        };
        total += number.parse::<f64>().ok()? * unit;
        number.clear();
        any = true;
    }
    if !number.is_empty() || !any {
        return None;
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn retry_after_is_read_in_seconds_and_as_an_http_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        assert_eq!(retry_after("7", now), Some(Duration::from_secs(7)));
        // RFC 9110's example date, 1 h 2 min after `now`.
        let later = "Wed, 21 Oct 2015 08:30:00 GMT";
        assert_eq!(retry_after(later, now), Some(Duration::from_secs(3720)));
        let past = "Wed, 21 Oct 2015 07:00:00 GMT";
        assert_eq!(retry_after(past, now), Some(Duration::ZERO));
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("-3", now), None);
    }

    #[test]
    fn reset_times_are_read_as_providers_write_them() {
        assert_eq!(duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(duration("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(duration("1h2m3.5s"), Some(Duration::from_millis(3_723_500)));
        assert_eq!(duration("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(duration("12"), Some(Duration::from_secs(12)));
        for bad in ["", "s", "1x", "1s2", "ms", "-1"] {
            assert_eq!(duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_ratelimit_headers_give_both_windows_and_bad_ones_are_ignored() {
        let now = SystemTime::now();
        let advice = Advice::of(
            &headers(&[
                ("x-ratelimit-limit-requests", "10"),
                ("x-ratelimit-remaining-requests", "3"),
                ("x-ratelimit-reset-requests", "700ms"),
                ("x-ratelimit-limit-tokens", "40000"),
                ("x-ratelimit-remaining-tokens", "39000"),
                ("x-ratelimit-reset-tokens", "1.5s"),
                ("retry-after", "2"),
            ]),
            now,
        );
        assert_eq!(
            advice.requests,
            Some(Window {
                limit: 10,
                remaining: 3,
                reset: Duration::from_millis(700)
            })
        );
        assert_eq!(advice.tokens.map(|w| w.limit), Some(40_000));
        assert_eq!(advice.retry_after, Some(Duration::from_secs(2)));
        // Malformed or partial: ignored, never a failure.
        let bad = Advice::of(
            &headers(&[
                ("x-ratelimit-limit-requests", "ten"),
                ("x-ratelimit-remaining-requests", "3"),
                ("x-ratelimit-reset-requests", "1s"),
                ("x-ratelimit-limit-tokens", "100"),
                ("retry-after", "whenever"),
            ]),
            now,
        );
        assert_eq!(bad, Advice::default());
        assert_eq!(Advice::of(&HeaderMap::new(), now), Advice::default());
    }
}
