//! Deadline timers: the watch that ends a session at its deadline wherever
//! its task is, even in a queue no worker pulls from.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::envelope::uuid_text;
use crate::{Map, PROTOCOL_VERSION, derive_id_labelled};

/// Published to `baton.agent._deadline` when a session with a deadline
/// starts. The router holds it (Nak with a delay) until the deadline, then
/// fails the session with `deadline_exceeded` unless it has ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(
    title = "DeadlineTimer",
    description = "Published to `baton.agent._deadline`; its id (`Nats-Msg-Id`) is derived from the session."
)]
pub struct DeadlineTimer {
    /// Protocol major version: `1`.
    pub v: u64,
    /// The session it watches.
    #[serde(with = "uuid_text")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub session: Uuid,
    /// The session's deadline, unix ms.
    pub deadline: u64,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

impl DeadlineTimer {
    /// The timer of `session`, due at `deadline` (unix ms).
    #[must_use]
    pub fn new(session: Uuid, deadline: u64) -> Self {
        Self {
            v: PROTOCOL_VERSION,
            session,
            deadline,
            extra: Map::new(),
        }
    }

    /// The timer's message id: one timer per session and deadline, however
    /// many processes publish it (a replay that extends the deadline starts
    /// a new one).
    #[must_use]
    pub fn id(&self) -> Uuid {
        derive_id_labelled(
            self.session,
            &format!("deadline-timer/{}", self.deadline),
            0,
        )
    }
}

/// The id of the `failed` event that ends `session` at `deadline`. The
/// router's timer and a worker that sees the deadline pass both use it, so
/// the session gets one terminal event.
#[must_use]
pub fn deadline_event_id(session: Uuid, deadline: u64) -> Uuid {
    derive_id_labelled(session, &format!("deadline/{deadline}"), 0)
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
