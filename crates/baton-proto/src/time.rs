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
