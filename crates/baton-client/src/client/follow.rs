//! A client following sessions: their events, stored then live, read
//! from the events stream or through the router.

use std::time::Duration;

use async_nats::jetstream;
use baton_proto::footprint::Footprint;
use baton_proto::{Event, EventType, Wire};
use futures::{StreamExt, TryStreamExt};
use uuid::Uuid;

use super::{Client, EventStream, Reads};
use crate::client::reading::TrackedEvents;
use baton_nats::nats::claimcheck::ClaimFailure;
use baton_nats::{Error, ErrorKind};

/// How long a read of stored events waits for the next before it says they
/// were removed while read.
const STALLED: Duration = Duration::from_secs(10);

impl Client {
    /// The events of `session`: the stored ones from the start, then live ones as they come.
    ///
    /// # Errors
    ///
    /// When the events stream cannot be read.
    pub async fn events(&self, session: Uuid) -> Result<EventStream, Error> {
        let tracked = self.tracked_events(session).await?;
        Ok(Box::pin(tracked.map(|item| item.map(|(event, _)| event))))
    }

    /// The events of `session` up to its end: the stream stops after a
    /// terminal event that nothing follows yet. A session that was
    /// re-opened (a replayed dead letter, whose `reopened` event follows the
    /// old terminal event) is followed to its new end.
    ///
    /// # Errors
    ///
    /// When the events stream cannot be read.
    pub async fn follow(&self, session: Uuid) -> Result<EventStream, Error> {
        let tracked = self.tracked_events(session).await?;
        Ok(until(tracked, |event: &Event| event.kind.is_terminal()))
    }

    /// The events of `session` up to where it rests: its end, or a
    /// `waiting` event (a person or the user is asked) that nothing
    /// follows yet. Each reader that waits for a session's answer (the
    /// CLI, the A2A and MCP gateways, a conversation's turn) follows it
    /// here.
    ///
    /// # Errors
    ///
    /// When the events stream cannot be read.
    pub async fn follow_to_rest(&self, session: Uuid) -> Result<EventStream, Error> {
        let tracked = self.tracked_events(session).await?;
        Ok(until(tracked, |event: &Event| {
            event.kind.is_terminal() || event.kind == EventType::Waiting
        }))
    }

    /// The last event stored for `session`, as stored (a claim-checked part
    /// not restored): one read.
    ///
    /// # Errors
    ///
    /// When the events stream cannot be read.
    pub async fn last_event(&self, session: Uuid) -> Result<Option<Event>, Error> {
        if self.reads().await == Reads::Router {
            // With the session's whole path (a compact handoff names only its hop).
            return Ok(Event::last_with_path(&self.history(session).await?));
        }
        baton_nats::state::session::last_event(&self.jetstream, &self.subjects, session).await
    }

    /// The terminal event `session` ended with, its claims restored; `None`
    /// while it runs. One read of its last event, when that is the end (a
    /// session's usual last event); else its events are read.
    ///
    /// # Errors
    ///
    /// When the events stream or the claim-check store cannot be read.
    pub async fn ending(&self, session: Uuid) -> Result<Option<Event>, Error> {
        if self.reads().await == Reads::Router {
            return Ok(crate::ending(&self.history(session).await?).cloned());
        }
        let subject = self.subjects.events(session);
        let stream = self.subjects.events_stream();
        let Some(last) =
            baton_nats::nats::events::last_message(&self.jetstream, &stream, &subject).await?
        else {
            return Ok(None);
        };
        let event = stored_event(&self.claims, &subject, &last.payload).await?;
        if !event.kind.is_terminal() {
            // A late event after the end, or none yet: read them all.
            return Ok(crate::ending(&self.history(session).await?).cloned());
        }
        Ok(Some(event))
    }

    /// The events of `session` stored so far (with the live ones that came
    /// while reading them), without waiting for more: what a page shows.
    /// Empty when nothing of the session is stored.
    ///
    /// # Errors
    ///
    /// When the events stream cannot be read, or stops giving the stored
    /// events before the last (they were removed while read: a conversation
    /// expired or deleted meanwhile).
    pub async fn history(&self, session: Uuid) -> Result<Vec<Event>, Error> {
        if self.reads().await == Reads::Router {
            let client = self.jetstream.client();
            let stored = crate::client::reading::events(&client, &self.subjects, session, false);
            return shown(stored)
                .map(|item| item.map(|(event, _)| event))
                .try_collect()
                .await;
        }
        let (name, stream) = self.events_stream().await?;
        match stream
            .get_last_raw_message_by_subject(&self.subjects.events(session))
            .await
        {
            Ok(_) => {}
            Err(err)
                if err.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound =>
            {
                return Ok(Vec::new());
            }
            Err(err) => {
                return Err(Error::with_source(
                    ErrorKind::JetStream,
                    format!("cannot read stream {name}"),
                    err,
                ));
            }
        }
        let mut tracked = self.tracked_events(session).await?;
        let mut events = Vec::new();
        loop {
            // Stored events come at once; none for this long means they
            // were removed after the last was seen.
            let Ok(next) = tokio::time::timeout(STALLED, tracked.next()).await else {
                return Err(Error::new(
                    ErrorKind::JetStream,
                    format!(
                        "no event of session {session} came for {}s before the last stored one: they were removed while read (an expired or deleted conversation), or the server stalled",
                        STALLED.as_secs()
                    ),
                ));
            };
            let Some(item) = next else {
                break;
            };
            let (event, after) = item?;
            events.push(event);
            if after == 0 {
                break;
            }
        }
        Ok(events)
    }

    /// The events stream, with its name (streams are created when missing).
    pub(crate) async fn events_stream(
        &self,
    ) -> Result<(String, jetstream::stream::Stream<()>), Error> {
        self.ensure_streams().await?;
        let name = self.subjects.events_stream();
        // Its info is not read: the streams were ensured above.
        let stream = self
            .jetstream
            .get_stream_no_info(&name)
            .await
            .map_err(|err| {
                Error::with_source(
                    ErrorKind::JetStream,
                    format!("cannot open stream {name}"),
                    err,
                )
            })?;
        Ok((name, stream))
    }

    /// Each event with the number of the session's events stored after it.
    pub(super) async fn tracked_events(&self, session: Uuid) -> Result<TrackedEvents, Error> {
        if self.reads().await == Reads::Router {
            let client = self.jetstream.client();
            let followed = crate::client::reading::followed(&client, &self.subjects, session).await;
            return Ok(shown(followed));
        }
        let (_, stream) = self.events_stream().await?;
        // Progress a `lean` worker does not store arrives live: subscribe
        // before reading the stored events, so none is missed.
        let live = self
            .jetstream
            .client()
            .subscribe(self.subjects.live(session))
            .await
            .map_err(|err| {
                Error::with_source(
                    ErrorKind::Connect,
                    "cannot follow the session's live events",
                    err,
                )
            })?;
        let filter = Some(self.subjects.events(session));
        let (messages, reading) = baton_nats::nats::ordered::read_from_start(
            &stream,
            filter,
            "follow the session's events",
        )
        .await?;
        let claims = self.claims.clone();
        // Kept as long as the stream: `lean` workers publish while it lives.
        let scope = baton_nats::state::followers::Scope::Session(session);
        let following =
            baton_nats::state::followers::follow(&self.jetstream.client(), &self.subjects, scope)
                .await;
        // A live event is never the stored end: it counts as one more to come.
        let live = live.filter_map(move |message| {
            let (_following, _reading) = (&following, &reading);
            std::future::ready(
                Event::from_msgpack(&message.payload)
                    .ok()
                    .map(|event| Ok((event, 1))),
            )
        });
        let stored = messages.then(move |message| {
            let claims = claims.clone();
            async move {
                let message = message.map_err(|err| {
                    Error::with_source(ErrorKind::JetStream, "event stream failed", err)
                })?;
                let pending = message.info().map_or(0, |info| info.pending);
                let event = stored_event(&claims, &message.subject, &message.payload).await?;
                Ok((event, pending))
            }
        });
        Ok(shown(Box::pin(futures::stream::select(stored, live))))
    }

    /// Waits for the terminal event (`completed` or `failed`) of `session`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Timeout`] when none arrives within `timeout`.
    pub async fn wait(&self, session: Uuid, timeout: Duration) -> Result<Event, Error> {
        let mut events = self.follow(session).await?;
        let terminal = async {
            let mut last = None;
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) if event.kind.is_terminal() => last = Some(event),
                    Ok(_) => {}
                    Err(err) if err.kind() == ErrorKind::Decode => {
                        tracing::warn!(error = %err, "skipping event")
                    }
                    Err(err) => return Err(err),
                }
            }
            last.ok_or_else(|| {
                Error::new(
                    ErrorKind::JetStream,
                    "the event stream ended before the session did",
                )
            })
        };
        tokio::time::timeout(timeout, terminal)
            .await
            .unwrap_or_else(|_| {
                Err(Error::new(
                    ErrorKind::Timeout,
                    format!("session {session} did not end within {timeout:?}"),
                ))
            })
    }
}

/// `tracked`'s events, up to the first that `stops` of those that nothing
/// stored follows yet (a session re-opened after its end goes on).
pub(super) fn until<F>(tracked: TrackedEvents, stops: F) -> EventStream
where
    F: Fn(&Event) -> bool + Send + Sync + 'static,
{
    let stops = std::sync::Arc::new(stops);
    Box::pin(futures::stream::unfold(
        (tracked, false),
        move |(mut tracked, ended)| {
            let stops = std::sync::Arc::clone(&stops);
            async move {
                if ended {
                    return None;
                }
                let item = tracked.next().await?;
                let ended = matches!(&item, Ok((event, 0)) if stops(event));
                Some((item.map(|(event, _)| event), (tracked, ended)))
            }
        },
    ))
}

/// The events as a reader sees them: each `accepted` and `started` event
/// folded into another comes first, restored; and an `accepted` event
/// folded twice (into a `handoff` the server took, then into the
/// `dead_lettered` event of its refused envelope) is shown once, as is a
/// `started` event stored both folded and on its own (a later attempt of
/// a hop whose acknowledgement was lost).
fn shown(events: TrackedEvents) -> TrackedEvents {
    let mut restored = std::collections::HashSet::new();
    Box::pin(events.flat_map(unfolded).filter(move |item| {
        let first = match item {
            Ok((event, _)) if matches!(event.kind, EventType::Accepted | EventType::Started) => {
                restored.insert(event.id)
            }
            _ => true,
        };
        std::future::ready(first)
    }))
}

/// The events one stored event stands for: the events folded into it come
/// first, restored, each with as many more to come after it.
fn unfolded(
    item: Result<(Event, u64), Error>,
) -> futures::stream::Iter<std::vec::IntoIter<Result<(Event, u64), Error>>> {
    let items = match item {
        Ok((event, pending)) => {
            let events = event.unfold();
            let last = events.len() as u64;
            (events.into_iter().zip(1..))
                .map(|(event, n)| Ok((event, pending + last - n)))
                .collect()
        }
        Err(err) => vec![Err(err)],
    };
    futures::stream::iter(items)
}

/// What following sessions from the events stream uses: reading it from
/// the start, and its newest messages.
#[must_use]
pub fn footprint(subjects: &baton_proto::Subjects) -> Footprint {
    Footprint::stream_reader(&subjects.events_stream())
        .with(baton_nats::nats::events::footprint(subjects))
        .with(baton_nats::state::followers::follower_footprint(subjects))
}

/// A stored event of `subject` from its `payload`, with the parts it keeps
/// in the claim-check store restored.
async fn stored_event(
    claims: &baton_nats::ClaimCheck,
    subject: &str,
    payload: &[u8],
) -> Result<Event, Error> {
    let unreadable = |err: String| {
        Error::new(
            ErrorKind::Decode,
            format!("unreadable event on {subject}: {err}"),
        )
    };
    let event =
        Event::from_msgpack(payload).map_err(|err| unreadable(baton_nats::error_chain(&err)))?;
    if event.claims.is_empty() {
        return Ok(event);
    }
    // An event with a large output keeps it in the claim-check store.
    let restored = claims.check_in(payload).await.map_err(|err| match err {
        ClaimFailure::Permanent(detail) => unreadable(detail),
        ClaimFailure::Transient(err) => err,
    })?;
    Event::from_msgpack_limited(&restored, claims.max_restored())
        .map_err(|err| unreadable(baton_nats::error_chain(&err)))
}
