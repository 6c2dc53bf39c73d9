//! What a provider's answer says of its rate limits. A header that cannot
//! be read is ignored with a warning, never an error: the call's own answer
//! still counts. The headers read:
//!
//! - `Retry-After`, in seconds or as an HTTP date (RFC 9110);
//! - OpenAI's `x-ratelimit-limit-…`, `-remaining-…` and `-reset-…`, for
//!   `requests` and for `tokens`; the reset is a duration (`1s`, `6m0s`,
//!   `20ms`, or bare seconds);
//! - the same with a `-minute` or `-day` suffix (`x-ratelimit-limit-requests-day`),
//!   as providers that give a per-day limit beside a per-minute one write them;
//! - Anthropic's `anthropic-ratelimit-requests-limit`, `-remaining` and
//!   `-reset` (an RFC 3339 time), and the same for `tokens`;
//! - `remaining` and `reset` without a `limit`, from any of these.

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, RETRY_AFTER};

/// Which family of headers a window was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// `x-ratelimit-*` (OpenAI and the providers that write as it does).
    OpenAi,
    /// `anthropic-ratelimit-*`.
    Anthropic,
}

/// The span of time a window's `limit` counts over, as its headers name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Span {
    /// Unnamed (`x-ratelimit-limit-requests`) or a minute: OpenAI and
    /// Anthropic document their limits per minute.
    Minute,
    /// A day (`x-ratelimit-limit-requests-day`).
    Day,
}

/// One rate-limit window, as the provider reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    /// How many the window allows (`…-limit…`), when the provider says.
    pub(crate) limit: Option<u64>,
    /// How many are left in it (`…-remaining…`).
    pub(crate) remaining: u64,
    /// When it is whole again (`…-reset…`), from now.
    pub(crate) reset: Duration,
    /// How precisely `reset` is written: a time to the second, a duration
    /// to the millisecond.
    pub(crate) precision: Duration,
    /// The span the limit counts over.
    pub(crate) span: Span,
    /// The headers it was read from.
    pub(crate) family: Family,
}

impl Window {
    /// How many of the window are used, when its limit is known.
    pub(crate) fn used(&self) -> Option<u64> {
        self.limit.map(|limit| limit.saturating_sub(self.remaining))
    }
}

/// What one answer's headers say of the provider's limits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Advice {
    /// How long to wait before asking again.
    pub(crate) retry_after: Option<Duration>,
    /// The requests windows (per minute, per day), as read.
    pub(crate) requests: Vec<Window>,
    /// The tokens windows.
    pub(crate) tokens: Vec<Window>,
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
        let windows = |kind: &str| -> Vec<Window> {
            [
                (
                    format!("x-ratelimit-{{}}-{kind}"),
                    Span::Minute,
                    Family::OpenAi,
                ),
                (
                    format!("x-ratelimit-{{}}-{kind}-minute"),
                    Span::Minute,
                    Family::OpenAi,
                ),
                (
                    format!("x-ratelimit-{{}}-{kind}-day"),
                    Span::Day,
                    Family::OpenAi,
                ),
                (
                    format!("anthropic-ratelimit-{kind}-{{}}"),
                    Span::Minute,
                    Family::Anthropic,
                ),
            ]
            .into_iter()
            .filter_map(|(pattern, span, family)| {
                let name = |part: &str| pattern.replace("{}", part);
                window(
                    &text,
                    [&name("limit"), &name("remaining"), &name("reset")],
                    span,
                    family,
                    now,
                )
            })
            .collect()
        };
        Self {
            retry_after,
            requests: windows("requests"),
            tokens: windows("tokens"),
        }
    }

    /// Which headers were heard, as `baton doctor` names them (empty for
    /// none): `x-ratelimit`, `anthropic-ratelimit`, `retry-after`.
    pub(crate) fn heard(&self) -> Vec<&'static str> {
        let mut heard = Vec::new();
        let all = || self.requests.iter().chain(&self.tokens);
        if all().any(|w| w.family == Family::OpenAi && w.span == Span::Minute) {
            heard.push("x-ratelimit");
        }
        if all().any(|w| w.span == Span::Day) {
            heard.push("x-ratelimit-day");
        }
        if all().any(|w| w.family == Family::Anthropic) {
            heard.push("anthropic-ratelimit");
        }
        if self.retry_after.is_some() {
            heard.push("retry-after");
        }
        heard
    }
}

/// The window whose `limit`, `remaining` and `reset` headers are `names`,
/// when `remaining` and `reset` are there and readable (`limit` may be
/// missing); a warning when some are there but cannot be read.
fn window<'a>(
    text: &impl Fn(&str) -> Option<&'a str>,
    names: [&str; 3],
    span: Span,
    family: Family,
    now: SystemTime,
) -> Option<Window> {
    let [limit, remaining, reset] = names.map(text);
    if limit.is_none() && remaining.is_none() && reset.is_none() {
        return None;
    }
    let number = |value: &str| value.trim().parse::<u64>().ok();
    let read_reset = |value: &str| match family {
        Family::OpenAi => duration(value).map(|d| (d, Duration::from_millis(1))),
        Family::Anthropic => rfc3339(value, now),
    };
    let read = (
        limit.map(number),
        remaining.and_then(number),
        reset.and_then(read_reset),
    );
    match read {
        (None | Some(Some(1..)), Some(remaining), Some((reset, precision))) => {
            let limit = read.0.flatten();
            Some(Window {
                limit,
                remaining: limit.map_or(remaining, |limit| remaining.min(limit)),
                reset,
                precision,
                span,
                family,
            })
        }
        _ => {
            tracing::warn!(
                limit = limit.unwrap_or("-"),
                remaining = remaining.unwrap_or("-"),
                reset = reset.unwrap_or("-"),
                "ignoring rate-limit headers that cannot be read: {}, {}, {}",
                names[0],
                names[1],
                names[2]
            );
            None
        }
    }
}

/// An RFC 3339 time (Anthropic's `reset`) as the time from `now` until it
/// (a time already past is none), and how precisely it is written: to the
/// second, unless it has a fraction.
pub(crate) fn rfc3339(value: &str, now: SystemTime) -> Option<(Duration, Duration)> {
    let value = value.trim();
    let at: SystemTime = chrono::DateTime::parse_from_rfc3339(value).ok()?.into();
    let precision = if value.contains('.') {
        Duration::from_millis(1)
    } else {
        Duration::from_secs(1)
    };
    Some((at.duration_since(now).unwrap_or(Duration::ZERO), precision))
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
            [Window {
                limit: Some(10),
                remaining: 3,
                reset: Duration::from_millis(700),
                precision: Duration::from_millis(1),
                span: Span::Minute,
                family: Family::OpenAi,
            }]
        );
        assert_eq!(advice.tokens[0].limit, Some(40_000));
        assert_eq!(advice.retry_after, Some(Duration::from_secs(2)));
        assert_eq!(advice.heard(), ["x-ratelimit", "retry-after"]);
        // Malformed or partial: ignored, never a failure.
        let bad = Advice::of(
            &headers(&[
                ("x-ratelimit-limit-requests", "ten"),
                ("x-ratelimit-remaining-requests", "3"),
                ("x-ratelimit-reset-requests", "1s"),
                ("x-ratelimit-limit-tokens", "100"),
                ("anthropic-ratelimit-requests-limit", "50"),
                ("anthropic-ratelimit-requests-remaining", "49"),
                ("anthropic-ratelimit-requests-reset", "tomorrow"),
                ("x-ratelimit-limit-requests-day", "0"),
                ("x-ratelimit-remaining-requests-day", "0"),
                ("x-ratelimit-reset-requests-day", "60"),
                ("retry-after", "whenever"),
            ]),
            now,
        );
        assert_eq!(bad, Advice::default());
        assert_eq!(Advice::of(&HeaderMap::new(), now), Advice::default());
    }

    #[test]
    fn anthropic_per_day_and_remaining_only_windows_are_read() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let advice = Advice::of(
            &headers(&[
                ("anthropic-ratelimit-requests-limit", "600"),
                ("anthropic-ratelimit-requests-remaining", "599"),
                // 1 700 000 000 is 2023-11-14T22:13:20Z.
                (
                    "anthropic-ratelimit-requests-reset",
                    "2023-11-14T22:13:20.100Z",
                ),
                ("anthropic-ratelimit-tokens-limit", "80000"),
                ("anthropic-ratelimit-tokens-remaining", "79000"),
                ("anthropic-ratelimit-tokens-reset", "2023-11-14T22:13:21Z"),
                ("x-ratelimit-limit-requests-day", "14400"),
                ("x-ratelimit-remaining-requests-day", "14000"),
                ("x-ratelimit-reset-requests-day", "33011.5"),
            ]),
            now,
        );
        let anthropic = advice
            .requests
            .iter()
            .find(|w| w.family == Family::Anthropic);
        assert_eq!(
            anthropic,
            Some(&Window {
                limit: Some(600),
                remaining: 599,
                reset: Duration::from_millis(100),
                precision: Duration::from_millis(1),
                span: Span::Minute,
                family: Family::Anthropic,
            })
        );
        let day = advice
            .requests
            .iter()
            .find(|w| w.span == Span::Day)
            .unwrap();
        assert_eq!((day.limit, day.remaining), (Some(14_400), 14_000));
        assert_eq!(day.reset, Duration::from_millis(33_011_500));
        // A time to the second is read as one.
        assert_eq!(advice.tokens[0].reset, Duration::from_secs(1));
        assert_eq!(advice.tokens[0].precision, Duration::from_secs(1));
        assert_eq!(advice.heard(), ["x-ratelimit-day", "anthropic-ratelimit"]);
        // A time already past is no wait; an offset is read.
        assert_eq!(
            rfc3339("2023-11-14T23:13:19+01:00", now),
            Some((Duration::ZERO, Duration::from_secs(1)))
        );
        // Remaining and reset alone make a window without a limit.
        let only = Advice::of(
            &headers(&[
                ("x-ratelimit-remaining-requests", "4"),
                ("x-ratelimit-reset-requests", "2s"),
            ]),
            now,
        );
        assert_eq!(only.requests[0].limit, None);
        assert_eq!(only.requests[0].remaining, 4);
    }
}
