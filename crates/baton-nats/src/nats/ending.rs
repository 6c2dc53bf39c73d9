//! Whether a session has ended, read from its events: the check behind the
//! guarded writes of [`crate::nats::publish::Class::Ending`], so that a session
//! that has ended gets no second terminal event, whatever path would write
//! it.

use async_nats::jetstream::{self, message::StreamMessage, stream::LastRawMessageErrorKind};
use baton_proto::footprint::{Footprint, api};
use baton_proto::{Event, EventType, Subjects, Wire};
use uuid::Uuid;

use crate::error::{Error, ErrorKind};

/// What the events stream says of one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct End {
    /// A terminal event stands, and no `reopened` event after it.
    pub(crate) ended: bool,
    /// The stream sequence of the session's last event; 0 with none.
    pub(crate) last_seq: u64,
}

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

fn failed(subject: &str, what: &str, err: Box<dyn std::error::Error + Send + Sync>) -> Error {
    Error::with_source(
        ErrorKind::JetStream,
        format!("cannot read {what} on {subject}"),
        err,
    )
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

/// Reads the session's events on `subject` of `stream`, in order, up to
/// `last_seq`, and gives each that decodes to `seen`.
async fn each_event(
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

/// The last event of `session`, if it has any.
pub async fn last_event(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    session: Uuid,
) -> Result<Option<Event>, Error> {
    let (stream, subject) = (subjects.events_stream(), subjects.events(session));
    let Some(last) = last_message(jetstream, &stream, &subject).await? else {
        return Ok(None);
    };
    let Ok(mut event) = Event::from_msgpack(&last.payload) else {
        return Ok(None);
    };
    // A handoff that names only its new hops: the earlier events name the rest.
    if event.path_from.is_some() {
        event.path = whole_path(jetstream, &stream, &subject, last.sequence).await?;
        event.path_from = None;
    }
    Ok(Some(event))
}

/// The session's path as its events up to `last_seq` name it.
async fn whole_path(
    jetstream: &jetstream::Context,
    stream: &str,
    subject: &str,
    last_seq: u64,
) -> Result<Vec<baton_proto::Hop>, Error> {
    let mut path = Vec::new();
    each_event(jetstream, (stream, subject), last_seq, |event| {
        Event::follow_path(&mut path, &event);
    })
    .await?;
    Ok(path)
}

/// For the router (a worker's check rides on the first event its hop
/// writes): the terminal event of `session` when the message that `opens`
/// it (see
/// `Envelope::opens_session`: a root task, not sent back after a person's
/// decision, not a conversation's turn) is on its first delivery (`attempt`
/// of 1) and the session has ended already: a careless client's second
/// task. A redelivery is not judged here: its outputs are republished under
/// the same ids, as always. Nor is a conversation's turn: it is sent only
/// while its conversation's record says it runs, which closing a turn reads the
/// session's end before changing, under an id derived from the turn (so a
/// repeat is a JetStream duplicate). A session that cannot be read counts
/// as open.
pub async fn ended_before(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    (session, opens): (Uuid, bool),
    attempt: u32,
) -> Option<Event> {
    if !opens || attempt != 1 {
        return None;
    }
    match last_event(jetstream, subjects, session).await {
        Ok(last) => last.filter(|event| event.kind.is_terminal()),
        Err(err) => {
            tracing::warn!(error = %err, "cannot tell whether the session ended; running the task");
            None
        }
    }
}

/// What reading a session's end uses: messages of the events stream by
/// subject.
#[must_use]
pub fn footprint(subjects: &Subjects) -> Footprint {
    Footprint::new().publishes([api(format_args!(
        "STREAM.MSG.GET.{}",
        subjects.events_stream()
    ))])
}
