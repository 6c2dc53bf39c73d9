//! Whether a session has ended, read from its events: the check behind the
//! guarded writes of [`Class::Ending`](super::Class::Ending), so that a
//! session that has ended gets no second terminal event, whatever path
//! would write it.

use async_nats::jetstream;
use baton_proto::{Event, EventType, Wire};

use crate::error::Error;
use crate::nats::events::{each_event, last_message};

/// What the events stream says of one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct End {
    /// A terminal event stands, and no `reopened` event after it.
    pub(crate) ended: bool,
    /// The stream sequence of the session's last event; 0 with none.
    pub(crate) last_seq: u64,
}

/// Reads the end of the session whose events are on `subject` of `stream`.
///
/// One read of the last event tells in almost every case: a terminal
/// event ends the session, anything a running session writes means it
/// runs. Only events that may also come after the end (a late child's
/// `result`, a `dead_lettered` copy of a leftover message) make it read the
/// session's events from the start.
pub(crate) async fn read(
    jetstream: &jetstream::Context,
    stream: &str,
    subject: &str,
) -> Result<End, Error> {
    let Some(last) = last_message(jetstream, stream, subject).await? else {
        return Ok(End {
            ended: false,
            last_seq: 0,
        });
    };
    let last_seq = last.sequence;
    let kind = Event::from_msgpack(&last.payload)
        .ok()
        .map(|event| event.kind);
    let ended = match kind {
        Some(kind) if kind.is_terminal() => true,
        Some(EventType::Result | EventType::DeadLettered) | None => {
            ended_by_scan(jetstream, stream, subject, last_seq).await?
        }
        Some(_) => false,
    };
    Ok(End { ended, last_seq })
}

/// Whether the session's events up to `last_seq` leave it ended: a terminal
/// event, with no `reopened` after it.
async fn ended_by_scan(
    jetstream: &jetstream::Context,
    stream: &str,
    subject: &str,
    last_seq: u64,
) -> Result<bool, Error> {
    let mut ended = false;
    each_event(
        jetstream,
        (stream, subject),
        last_seq,
        |event| match event.kind {
            kind if kind.is_terminal() => ended = true,
            EventType::Reopened => ended = false,
            _ => {}
        },
    )
    .await?;
    Ok(ended)
}
