//! A session read from its events: its last event, with the whole path
//! when that event names only its new hops.

use async_nats::jetstream;
use baton_proto::{Event, Subjects, Wire};
use uuid::Uuid;

use crate::error::Error;
use crate::nats::events::{each_event, last_message};

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
