//! Whether a session has ended, read from its events: the check behind the
//! guarded writes of [`crate::publish::Class::Ending`], so that a session
//! that has ended gets no second terminal event, whatever path would write
//! it.

use async_nats::jetstream::{self, stream::LastRawMessageErrorKind};
use baton_proto::{Event, EventType, Wire};

use crate::error::{Error, ErrorKind};

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
/// One read of the last event settles it in almost every case: a terminal
/// event ends the session, anything a running session writes means it
/// runs. Only events that may also come after the end (a late child's
/// `result`, a `dead_lettered` copy of a leftover message) make it read the
/// session's events from the start.
pub(crate) async fn read(
    jetstream: &jetstream::Context,
    stream: &str,
    subject: &str,
) -> Result<End, Error> {
    let failed = |what: &str, err: Box<dyn std::error::Error + Send + Sync>| {
        Error::with_source(
            ErrorKind::JetStream,
            format!("cannot read {what} on {subject}"),
            err,
        )
    };
    let stream = jetstream
        .get_stream_no_info(stream)
        .await
        .map_err(|err| failed("the events stream", err.into()))?;
    let last = match stream.get_last_raw_message_by_subject(subject).await {
        Ok(last) => last,
        Err(err) if matches!(err.kind(), LastRawMessageErrorKind::NoMessageFound) => {
            return Ok(End {
                ended: false,
                last_seq: 0,
            });
        }
        Err(err) => return Err(failed("the last event", err.into())),
    };
    let last_seq = last.sequence;
    let kind = Event::from_msgpack(&last.payload)
        .ok()
        .map(|event| event.kind);
    let ended = match kind {
        Some(kind) if kind.is_terminal() => true,
        Some(EventType::Result | EventType::DeadLettered) | None => {
            let mut ended = false;
            let mut seq = 0;
            while seq < last_seq {
                let next = stream
                    .raw_message_builder()
                    .sequence(seq + 1)
                    .next_by_subject(subject.to_owned())
                    .send()
                    .await
                    .map_err(|err| failed("the events", err.into()))?;
                seq = next.sequence;
                match Event::from_msgpack(&next.payload).map(|event| event.kind) {
                    Ok(kind) if kind.is_terminal() => ended = true,
                    Ok(EventType::Reopened) => ended = false,
                    _ => {}
                }
            }
            ended
        }
        Some(_) => false,
    };
    Ok(End { ended, last_seq })
}
