//! Which recorded sessions `baton eval` tries: the most recent finished
//! ones that reached the agent type, read from the events stream, each
//! with the feedback it was given, read from the outcomes stream.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use baton_proto::{AgentName, Event, EventType, Outcome, OutcomeKind, Start, Wire as _};
use futures::StreamExt as _;
use uuid::Uuid;

use crate::client::Client;
use baton_nats::{Error, ErrorKind};

/// A recorded session to try: how it ended (its end event, without its
/// context), and the latest feedback score it was given, if any.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Its end.
    pub end: Event,
    /// Its latest feedback score (0 to 1), when someone gave one.
    pub feedback: Option<f64>,
}

/// How long a reader of what is stored waits for its next message before
/// it says the stream stalled (rather than end on a part of it).
const STALLED: Duration = Duration::from_secs(30);

/// An ordered reader of a stream, from a time on.
type Read<I> = (
    async_nats::jetstream::consumer::pull::Ordered,
    baton_nats::nats::ordered::Reading<I>,
);

impl Client {
    /// The `count` most recent finished sessions that reached `agent`
    /// (with `turns`, conversation turns instead of sessions) and ended
    /// since `since` (unix ms), newest first. Replays are left out, and so
    /// are sessions that were not started replayable.
    ///
    /// # Errors
    ///
    /// When the events stream cannot be read.
    pub async fn reached(
        &self,
        agent: &AgentName,
        since: Option<u64>,
        turns: bool,
        count: usize,
    ) -> Result<Vec<Recorded>, Error> {
        let (_, stream) = self.events_stream().await?;
        let read = baton_nats::nats::ordered::read_since(
            &stream,
            since.unwrap_or(0),
            "read the recorded sessions",
        )
        .await?;
        let (ends, replayable) = ends_of(read, agent, turns).await?;
        let mut ends: Vec<Event> = ends.into_values().collect();
        ends.sort_by_key(|end| std::cmp::Reverse(end.at));
        let mut chosen = Vec::new();
        for end in ends {
            if chosen.len() >= count {
                break;
            }
            // A session that began before `since` was read from: its start
            // is looked up on its own (one that began after has none).
            let began = (end.path.first()).map_or(end.at, |hop| hop.accepted_at.unwrap_or(hop.at));
            let before_reading = since.is_some_and(|since| began <= since);
            let started = replayable.contains(&end.session)
                || (before_reading
                    && (self.history(end.session).await?.iter())
                        .any(|e| Start::from_event(e).is_some()));
            if started {
                chosen.push(end);
            }
        }
        let oldest = chosen.iter().map(|end| end.at).min().unwrap_or(0);
        let sessions: HashSet<Uuid> = chosen.iter().map(|end| end.session).collect();
        let mut feedback = self.feedback_since(oldest, &sessions).await?;
        Ok(chosen
            .into_iter()
            .map(|end| Recorded {
                feedback: feedback.remove(&end.session),
                end,
            })
            .collect())
    }

    /// The latest feedback score each of `sessions` was given since `from`
    /// (unix ms), when the registry keeps outcomes.
    async fn feedback_since(
        &self,
        from: u64,
        sessions: &HashSet<Uuid>,
    ) -> Result<HashMap<Uuid, f64>, Error> {
        let mut scores = HashMap::new();
        let name = self.subjects().outcomes_stream();
        let stream = crate::versions::holding::existing(self.jetstream(), &name).await?;
        let Some(stream) = stream.filter(|_| !sessions.is_empty()) else {
            return Ok(scores); // No registry has kept any, or none is asked for.
        };
        let read = baton_nats::nats::ordered::read_since(&stream, from, "read feedback").await?;
        each_stored(read, "the outcomes stream", |message| {
            let Ok(record) = Outcome::from_msgpack(&message.payload) else {
                return;
            };
            let score = record.score.filter(|score| (0.0..=1.0).contains(score));
            if let (OutcomeKind::Feedback, Some(score)) = (&record.kind, score) {
                if sessions.contains(&record.session) {
                    scores.insert(record.session, score);
                }
            }
        })
        .await?;
        Ok(scores)
    }
}

/// Reads what `read` has stored: the last end of each session that
/// reached `agent` (a conversation turn when `turns`), none once re-opened,
/// each without its context; and the sessions started replayable.
async fn ends_of<I: Clone + Send + Sync + 'static>(
    read: Read<I>,
    agent: &AgentName,
    turns: bool,
) -> Result<(HashMap<Uuid, Event>, HashSet<Uuid>), Error> {
    let mut ends: HashMap<Uuid, Event> = HashMap::new();
    let mut replayable = HashSet::new();
    each_stored(read, "the events stream", |message| {
        // A stored event may stand for several (a `started` folded in).
        let events =
            Event::from_msgpack(&message.payload).map_or_else(|_| Vec::new(), Event::unfold);
        for mut event in events {
            if Start::from_event(&event).is_some() {
                replayable.insert(event.session);
            }
            if event.kind == EventType::Reopened {
                ends.remove(&event.session);
            } else if event.kind.is_terminal()
                && event.replay_of.is_none()
                && event.conversation.is_some() == turns
                && event.path.iter().any(|hop| hop.agent == *agent)
            {
                event.context = None;
                event.output = None;
                ends.insert(event.session, event);
            }
        }
    })
    .await?;
    Ok((ends, replayable))
}

/// Gives `each` every message `read` had stored when it began (and any
/// stored meanwhile), in order, then stops; `what` names the stream.
///
/// # Errors
///
/// When the stream fails, or stops delivering for [`STALLED`] before its
/// end: a part of it is not taken for the whole.
async fn each_stored<I: Clone + Send + Sync + 'static>(
    (mut messages, reading): Read<I>,
    what: &str,
    mut each: impl FnMut(&async_nats::jetstream::Message),
) -> Result<(), Error> {
    if reading.stored() == 0 {
        return Ok(());
    }
    loop {
        let next = tokio::time::timeout(STALLED, messages.next()).await;
        let next = next.map_err(|_| {
            Error::new(
                ErrorKind::Timeout,
                format!("{what} stopped delivering for {STALLED:?} before its end"),
            )
        })?;
        let Some(message) = next else {
            return Ok(());
        };
        let message = message.map_err(|err| {
            Error::with_source(ErrorKind::JetStream, format!("cannot read {what}"), err)
        })?;
        each(&message);
        if message.info().map_or(true, |info| info.pending == 0) {
            return Ok(());
        }
    }
}
