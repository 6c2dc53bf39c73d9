//! Trying a version of an agent type on recorded sessions (`baton eval`).
//!
//! Each recorded session that reached the agent type is replayed as an
//! evaluation ([`baton_proto::Replay::eval`]): the hops before the type's
//! first hop reuse their recorded answers, the type runs again on the
//! version tried (its model or program called anew), a tool call recorded
//! with the same arguments gets its recorded result, a read-only tool may
//! be called again, and a call that may write is never made: the replay
//! fails with reason `would_write`. A replay's end is never counted as a
//! live outcome (by rollouts or the registry). Each session is measured
//! from the type's first hop on, as recorded and as replayed ([`Trial`]),
//! and the trials are summed up with intervals ([`Summary`]).

use std::collections::HashMap;
use std::time::Duration;

use baton_proto::{AgentName, Event, EventType, Reason, Start, Version, Wire as _};
use futures::StreamExt as _;
use uuid::Uuid;

use crate::client::Client;
use crate::client::replay::replay_task;
use crate::{SessionReplay, ending};
use baton_nats::{Error, ErrorKind};

mod measure;

pub use measure::{Measured, Share, Summary, Verdict};

/// A recorded session tried again on another version.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Trial {
    /// The recorded session.
    pub session: Uuid,
    /// Its evaluation: the replay's session.
    pub replay: Uuid,
    /// The recorded session, from the agent type's first hop on.
    pub base: Measured,
    /// The evaluation, likewise.
    pub trial: Measured,
    /// Whether both ended alike: with equal answers when both completed,
    /// else with the same kind of end and reason.
    pub same_answer: bool,
    /// The call the evaluation stopped before (`would_write`), as shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_write: Option<String>,
    /// What the judge said of the new answer against the recorded one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// The task the recorded session started with (what a judge reads).
    #[serde(skip)]
    pub asked: String,
}

impl Client {
    /// The ends of the `count` most recent finished sessions that reached
    /// `agent` (with `turns`, conversation turns instead of sessions)
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
    ) -> Result<Vec<Event>, Error> {
        let (_, stream) = self.events_stream().await?;
        let last = (stream.get_info().await)
            .map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "cannot read the events stream", err)
            })?
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
        let mut ends: Vec<Event> = (ends.into_values())
            .filter(|end| replayable.contains(&end.session))
            .collect();
        ends.sort_by_key(|end| std::cmp::Reverse(end.at));
        ends.truncate(count);
        Ok(ends)
    }

    /// Runs the session `end` ended again as an evaluation, with `agent`
    /// on `version` from its first hop on, and measures both; a replay
    /// that has not ended within `timeout` is measured `unfinished`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Config`] when the session cannot be replayed or never
    /// reached `agent`; when NATS fails.
    pub async fn evaluate(
        &self,
        end: &Event,
        (agent, version): (&AgentName, &Version),
        timeout: Duration,
    ) -> Result<Trial, Error> {
        let session = end.session;
        let history = self.history(session).await?;
        let end = ending(&history).unwrap_or(end).clone();
        let hop = end.path.iter().position(|hop| hop.agent == *agent);
        let Some(hop) = hop else {
            return Err(Error::new(
                ErrorKind::Config,
                format!("session {session} never reached {agent}"),
            ));
        };
        let options = SessionReplay {
            from: Some(hop + 1),
            onto: std::iter::once((agent.clone(), version.clone())).collect(),
            ..SessionReplay::default()
        };
        let mut task = replay_task(session, &history, &options)?;
        if let Some(replay) = task.replay.as_mut() {
            replay.eval = true;
        }
        let to = AgentName::new(task.to.as_deref().unwrap_or_default()).map_err(|err| {
            Error::new(
                ErrorKind::Config,
                format!("session {session} started at an agent type that is not valid: {err}"),
            )
        })?;
        self.submit_to(&to, &task).await?;
        let base = Measured::of(&history, &end, agent);
        let trial = match self.wait(task.session, timeout).await {
            Ok(_) => {
                let replayed = self.history(task.session).await?;
                match ending(&replayed) {
                    Some(last) => Measured::of(&replayed, last, agent),
                    None => Measured::unfinished(),
                }
            }
            Err(err) if err.kind() == ErrorKind::Timeout => Measured::unfinished(),
            Err(err) => return Err(err),
        };
        let would_write = (trial.reason.as_ref() == Some(&Reason::WouldWrite))
            .then(|| trial.detail.clone().unwrap_or_default());
        Ok(Trial {
            session,
            replay: task.session,
            same_answer: base.alike(&trial),
            base,
            trial,
            would_write,
            verdict: None,
            asked: (history.iter())
                .find_map(|event| event.context.as_ref())
                .map(|context| context.initial_query.clone())
                .unwrap_or_default(),
        })
    }

    /// Asks agent type `judge` whether the answer of `trial` is better,
    /// the same or worse than the recorded one, for the task it asked: a
    /// session of its own, whose answer's first such word is the verdict.
    ///
    /// # Errors
    ///
    /// When its session does not end within `timeout`, or NATS fails.
    pub async fn judge(
        &self,
        judge: &AgentName,
        trial: &Trial,
        timeout: Duration,
    ) -> Result<Verdict, Error> {
        let shown = |measured: &Measured| {
            measured
                .answer
                .clone()
                .unwrap_or_else(|| format!("(no answer: the session ended {})", measured.outcome))
        };
        let text = format!(
            "Compare two answers to the same task, and say whether answer B is better, the same or \
             worse than answer A. Reply with one word: better, same or worse.\n\n\
             Task:\n{}\n\nAnswer A (the recorded one):\n{}\n\nAnswer B (the new version's):\n{}\n",
            trial.asked,
            shown(&trial.base),
            shown(&trial.trial),
        );
        // The judgement runs as an evaluation about the recorded session:
        // nothing of it is reused (`before` 0), it writes nothing, asks no
        // person, and is no live outcome of the judge's type.
        let mut task = baton_proto::Envelope::task(text);
        let mut replay = baton_proto::Replay::of(trial.session);
        replay.before = Some(0);
        replay.eval = true;
        task.replay = Some(replay);
        self.submit_to(judge, &task).await?;
        let end = self.wait(task.session, timeout).await?;
        let said = end
            .output
            .as_ref()
            .map(baton_author::text_of)
            .unwrap_or_default();
        Ok(Verdict::read(&said))
    }
}

/// Reads `messages` up to stream sequence `last`: the last end of each
/// session that reached `agent` (a conversation turn when `turns`), none
/// once re-opened, and the sessions started replayable.
async fn ends_of(
    mut messages: async_nats::jetstream::consumer::pull::Ordered,
    last: u64,
    agent: &AgentName,
    turns: bool,
) -> Result<(HashMap<Uuid, Event>, std::collections::HashSet<Uuid>), Error> {
    let mut ends: HashMap<Uuid, Event> = HashMap::new();
    let mut replayable = std::collections::HashSet::new();
    // Nothing stored since the start asked for: the reader waits for new
    // messages, so a quiet second ends the reading.
    let quiet = Duration::from_secs(2);
    while let Ok(Some(message)) = tokio::time::timeout(quiet, messages.next()).await {
        let message = message.map_err(|err| {
            Error::with_source(ErrorKind::JetStream, "cannot read the events stream", err)
        })?;
        let sequence = message.info().map_or(last, |info| info.stream_sequence);
        // A stored event may stand for several (a `started` folded in).
        let events =
            Event::from_msgpack(&message.payload).map_or_else(|_| Vec::new(), Event::unfold);
        for event in events {
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
                ends.insert(event.session, event);
            }
        }
        if sequence >= last {
            break;
        }
    }
    Ok((ends, replayable))
}
