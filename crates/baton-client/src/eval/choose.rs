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

/// A quiet while after which a reader has read all there is: an ordered
/// reader waits for new messages once it has delivered the stored ones.
const QUIET: Duration = Duration::from_secs(2);

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
        let failed =
            |err| Error::with_source(ErrorKind::JetStream, "cannot read the events stream", err);
        let last = (stream.get_info().await)
            .map_err(failed)?
            .state
            .last_sequence;
        if last == 0 {
            return Ok(Vec::new());
        }
        let (messages, _reading) = baton_nats::nats::ordered::read_since(
            &stream,
            since.unwrap_or(0),
            "read the recorded sessions",
        )
        .await?;
        let (ends, replayable) = ends_of(messages, last, agent, turns).await?;
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
        let (mut messages, _reading) =
            baton_nats::nats::ordered::read_since(&stream, from, "read feedback").await?;
        while let Ok(Some(message)) = tokio::time::timeout(QUIET, messages.next()).await {
            let message = message.map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "cannot read the outcomes stream", err)
            })?;
            let Ok(record) = Outcome::from_msgpack(&message.payload) else {
                continue;
            };
            let score = record.score.filter(|score| (0.0..=1.0).contains(score));
            if let (OutcomeKind::Feedback, Some(score)) = (&record.kind, score) {
                if sessions.contains(&record.session) {
                    scores.insert(record.session, score);
                }
            }
            if message.info().is_ok_and(|info| info.pending == 0) {
                break;
            }
        }
        Ok(scores)
    }
}

/// Reads `messages` up to stream sequence `last`: the last end of each
/// session that reached `agent` (a conversation turn when `turns`), none
/// once re-opened, each without its context; and the sessions started
/// replayable.
async fn ends_of(
    mut messages: async_nats::jetstream::consumer::pull::Ordered,
    last: u64,
    agent: &AgentName,
    turns: bool,
) -> Result<(HashMap<Uuid, Event>, HashSet<Uuid>), Error> {
    let mut ends: HashMap<Uuid, Event> = HashMap::new();
    let mut replayable = HashSet::new();
    while let Ok(Some(message)) = tokio::time::timeout(QUIET, messages.next()).await {
        let message = message.map_err(|err| {
            Error::with_source(ErrorKind::JetStream, "cannot read the events stream", err)
        })?;
        let sequence = message.info().map_or(last, |info| info.stream_sequence);
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
        if sequence >= last {
            break;
        }
    }
    Ok((ends, replayable))
}
