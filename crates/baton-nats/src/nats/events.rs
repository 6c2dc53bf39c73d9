//! A session's events, read by subject from the events stream: the last
//! message, and each event up to a sequence. Plumbing only: what a session's
//! events mean is read above it (the guarded writes' check in
//! `publish/guard.rs`, a session's last event in `state/session.rs`, a root
//! task's ended-session check in `pipeline/opening.rs`).

use async_nats::jetstream::{self, message::StreamMessage, stream::LastRawMessageErrorKind};
use baton_proto::footprint::{Footprint, api};
use baton_proto::{Event, Subjects, Wire};

use crate::error::{Error, ErrorKind};

/// The last message on `subject` of `stream`, with its sequence; `None`
/// when the subject has none.
pub async fn last_message(
    jetstream: &jetstream::Context,
    stream: &str,
    subject: &str,
) -> Result<Option<StreamMessage>, Error> {
    let stream = jetstream
        .get_stream_no_info(stream)
        .await
        .map_err(|err| failed(subject, "the events stream", err.into()))?;
    match stream.get_last_raw_message_by_subject(subject).await {
        Ok(last) => Ok(Some(last)),
        Err(err) if matches!(err.kind(), LastRawMessageErrorKind::NoMessageFound) => Ok(None),
        Err(err) => Err(failed(subject, "the last event", err.into())),
    }
}

pub(crate) fn failed(
    subject: &str,
    what: &str,
    err: Box<dyn std::error::Error + Send + Sync>,
) -> Error {
    Error::with_source(
        ErrorKind::JetStream,
        format!("cannot read {what} on {subject}"),
        err,
    )
}

/// Reads the session's events on `subject` of `stream`, in order, up to
/// `last_seq`, and gives each that decodes to `seen`.
pub(crate) async fn each_event(
    jetstream: &jetstream::Context,
    (stream, subject): (&str, &str),
    last_seq: u64,
    mut seen: impl FnMut(Event),
) -> Result<(), Error> {
    let stream = jetstream
        .get_stream_no_info(stream)
        .await
        .map_err(|err| failed(subject, "the events stream", err.into()))?;
    let mut seq = 0;
    while seq < last_seq {
        let next = stream
            .raw_message_builder()
            .sequence(seq + 1)
            .next_by_subject(subject.to_owned())
            .send()
            .await
            .map_err(|err| failed(subject, "the events", err.into()))?;
        seq = next.sequence;
        if let Ok(event) = Event::from_msgpack(&next.payload) {
            seen(event);
        }
    }
    Ok(())
}

/// What these reads use: messages of the events stream by subject.
#[must_use]
pub fn footprint(subjects: &Subjects) -> Footprint {
    Footprint::new().publishes([api(format_args!(
        "STREAM.MSG.GET.{}",
        subjects.events_stream()
    ))])
}
