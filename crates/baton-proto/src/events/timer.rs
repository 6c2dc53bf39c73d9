//! Deadline timers: the watch that ends a session at its deadline wherever
//! its task is, even in a queue no worker pulls from.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::uuid_text;
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
