//! Waiting for a condition without hand-written polling loops.

use std::fmt;
use std::future::Future;
use std::time::Duration;

/// How often [`eventually`] looks again.
const EVERY: Duration = Duration::from_millis(50);

/// A condition that did not hold in time, with what the last look saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeout {
    /// How long it waited.
    pub waited: Duration,
    /// What the last look reported.
    pub last: String,
}

impl fmt::Display for Timeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not within {:?}; last look: {}", self.waited, self.last)
    }
}

impl std::error::Error for Timeout {}

/// Looks every 50 ms until `look` returns `Ok`, and returns its value. A
/// look returns `Err` with what it saw when the condition does not hold yet.
///
/// # Errors
///
/// [`Timeout`] with the last look's report when `timeout` passes first.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use std::time::Duration;
///
/// let mut count = 0;
/// let seen = baton_testkit::eventually(Duration::from_secs(5), || {
///     count += 1;
///     let now = count;
///     async move { if now >= 3 { Ok(now) } else { Err(format!("count {now}")) } }
/// })
/// .await
/// .unwrap();
/// assert_eq!(seen, 3);
/// # });
/// ```
pub async fn eventually<T, E, F, Fut>(timeout: Duration, mut look: F) -> Result<T, Timeout>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: fmt::Display,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let last = match look().await {
            Ok(value) => return Ok(value),
            Err(seen) => seen.to_string(),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(Timeout {
                waited: timeout,
                last,
            });
        }
        tokio::time::sleep(EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn it_gives_up_with_the_last_report() {
        let err = eventually(Duration::from_secs(1), || async { Err::<(), _>("still 0") })
            .await
            .unwrap_err();
        assert_eq!(err.last, "still 0");
        assert_eq!(err.waited, Duration::from_secs(1));
    }
}
