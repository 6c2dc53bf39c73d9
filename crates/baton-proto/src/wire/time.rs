use std::time::{SystemTime, UNIX_EPOCH};

/// The current time in unix milliseconds, the protocol's time unit.
#[must_use]
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

/// How far ahead a deadline may lie: 366 days. A deadline further out is
/// refused where a task enters (the router, a worker, the client), so that
/// no timer is held for longer than the server can express.
pub const MAX_DEADLINE_AHEAD_MS: u64 = 366 * 24 * 60 * 60 * 1000;

/// Why `deadline` (unix ms) is refused at `now`: it lies more than
/// [`MAX_DEADLINE_AHEAD_MS`] ahead. `None` for a deadline in range, or one
/// that has passed (that is `deadline_exceeded`, not a malformed task).
#[must_use]
pub fn deadline_out_of_range(deadline: u64, now: u64) -> Option<String> {
    let ahead = deadline.checked_sub(now)?;
    (ahead > MAX_DEADLINE_AHEAD_MS).then(|| {
        format!(
            "deadline {deadline} (unix ms) lies {} days ahead, more than the 366 allowed: \
             send a deadline within a year, or none",
            ahead / (24 * 60 * 60 * 1000)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_past_a_year_ahead_are_out_of_range() {
        let now = 1_700_000_000_000;
        assert_eq!(
            deadline_out_of_range(now + MAX_DEADLINE_AHEAD_MS, now),
            None
        );
        assert_eq!(
            deadline_out_of_range(now - 5, now),
            None,
            "passed, not malformed"
        );
        let far = deadline_out_of_range(u64::MAX, now).expect("refused");
        assert!(
            far.contains("18446744073709551615") && far.contains("within a year"),
            "{far}"
        );
        assert!(deadline_out_of_range(now + MAX_DEADLINE_AHEAD_MS + 1, now).is_some());
    }
}
