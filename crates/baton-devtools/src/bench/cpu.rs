//! What a hop costs: CPU time from the process counters (user and system
//! time of a process, from Linux's `/proc/<pid>/stat`) of the process that
//! runs the stages and of the nats-server the bench started, and the bytes
//! that server received (its `/varz` `in_bytes`).

/// Clock ticks a second in `/proc/<pid>/stat` (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: u64 = 100;

/// CPU time process `pid` has spent, in µs; `None` where the counters
/// cannot be read (not Linux, or the process is gone).
pub(super) fn spent_us(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    ticks(&stat).map(|ticks| ticks * (1_000_000 / TICKS_PER_SECOND))
}

/// `utime + stime` of one `/proc/<pid>/stat` line. The command name, in
/// parentheses, may hold spaces: the fields are counted after its `)`.
fn ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After the name: state (field 3) … utime is field 14, stime 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The CPU time of the bench's own process and of its server, at a moment.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sample {
    worker: Option<u64>,
    server: Option<u64>,
}

impl Sample {
    /// Now, for this process and server `server` (when its pid is known).
    pub(super) fn now(server: Option<u32>) -> Self {
        Self {
            worker: spent_us(std::process::id()),
            server: server.and_then(spent_us),
        }
    }

    /// What each spent since `earlier`, in µs per one of `hops`.
    pub(super) fn per_hop_since(self, earlier: Self, hops: u64) -> (f64, f64) {
        let per_hop = |now: Option<u64>, then: Option<u64>| match (now, then) {
            (Some(now), Some(then)) if hops > 0 => now.saturating_sub(then) as f64 / hops as f64,
            _ => f64::NAN,
        };
        (
            per_hop(self.worker, earlier.worker),
            per_hop(self.server, earlier.server),
        )
    }
}

/// The bytes the server at `monitor` has received from its clients so far
/// (`in_bytes` of its `/varz`); `None` without a monitor or when it does
/// not answer.
pub(super) async fn bytes_in(monitor: Option<&str>) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Varz {
        in_bytes: u64,
    }
    let varz = reqwest::get(format!("{}/varz", monitor?)).await.ok()?;
    Some(varz.json::<Varz>().await.ok()?.in_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utime_and_stime_are_read_after_the_name_even_with_spaces_in_it() {
        let stat = "4242 (nats server) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0";
        assert_eq!(ticks(stat), Some(325));
        assert_eq!(ticks("garbage"), None);
        let mine = spent_us(std::process::id());
        assert!(mine.is_some(), "this process's own counters are readable");
    }

    #[test]
    fn per_hop_is_the_difference_over_the_hops_and_nan_when_unknown() {
        let before = Sample {
            worker: Some(1_000),
            server: None,
        };
        let after = Sample {
            worker: Some(61_000),
            server: None,
        };
        let (worker, server) = after.per_hop_since(before, 1_000);
        assert!((worker - 60.0).abs() < 1e-9);
        assert!(server.is_nan());
    }
}
