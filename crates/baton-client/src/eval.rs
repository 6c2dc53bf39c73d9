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

use std::time::Duration;

use baton_proto::{AgentName, Event, Reason, Version};
use uuid::Uuid;

use crate::client::Client;
use crate::client::replay::replay_from;
use crate::{SessionReplay, ending};
use baton_nats::{Error, ErrorKind};

mod choose;
mod measure;

pub use choose::Recorded;
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
    /// Runs the session `recorded` ended again as an evaluation, with
    /// `agent` on `version` from its first hop on, and measures both; an
    /// evaluation that has not ended within `timeout` is cancelled, and
    /// measured `unfinished`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Config`] when the session cannot be replayed or never
    /// reached `agent`; when NATS fails.
    pub async fn evaluate(
        &self,
        recorded: &Recorded,
        (agent, version): (&AgentName, &Version),
        timeout: Duration,
    ) -> Result<Trial, Error> {
        let session = recorded.end.session;
        let history = self.history(session).await?;
        let end = ending(&history).unwrap_or(&recorded.end).clone();
        let Some(hop) = end.path.iter().position(|hop| hop.agent == *agent) else {
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
        let (mut task, to) = replay_from(session, &history, &options)?;
        if let Some(replay) = task.replay.as_mut() {
            replay.eval = true;
        }
        self.submit_to(&to, &task).await?;
        let base = Measured::of(&history, &end, (agent, recorded.feedback));
        let (replayed, finished) = self.evaluated(task.session, timeout).await?;
        let trial = match ending(&replayed).filter(|_| finished) {
            Some(last) => Measured::of(&replayed, last, (agent, None)),
            None => Measured::unfinished(),
        };
        // A write stopped anywhere (a delegated child's too) is shown.
        let would_write = (replayed.iter())
            .find(|event| event.reason.as_ref() == Some(&Reason::WouldWrite))
            .map(|event| event.detail.clone().unwrap_or_default());
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

    /// The events of the evaluation `session`, followed to its end, and
    /// whether it ended by itself within `timeout`: else it is cancelled,
    /// and its events say how far it went.
    async fn evaluated(
        &self,
        session: Uuid,
        timeout: Duration,
    ) -> Result<(Vec<Event>, bool), Error> {
        use futures::StreamExt as _;
        let mut stream = self.follow(session).await?;
        let followed = async {
            let mut events = Vec::new();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(event) => events.push(event),
                    Err(err) if err.kind() == ErrorKind::Decode => {
                        tracing::warn!(%session, error = %err, "skipping an unreadable event");
                    }
                    Err(err) => return Err(err),
                }
            }
            Ok(events)
        };
        match tokio::time::timeout(timeout, followed).await {
            Ok(events) => Ok((events?, true)),
            Err(_) => {
                let why = format!("the evaluation did not end within {timeout:?}");
                let finished = match self.cancel(session, &why).await {
                    // It ended just as the time ran out.
                    Ok(crate::Cancel::Ended(_)) => true,
                    Ok(_) => false,
                    Err(err) => {
                        tracing::warn!(%session, error = %err, "cannot cancel an unfinished evaluation");
                        false
                    }
                };
                Ok((self.history(session).await?, finished))
            }
        }
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
        let (events, finished) = self.evaluated(task.session, timeout).await?;
        let Some(end) = ending(&events).filter(|_| finished) else {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!("the judgement did not end within {timeout:?}, and was cancelled"),
            ));
        };
        let said = end
            .output
            .as_ref()
            .map(baton_author::text_of)
            .unwrap_or_default();
        Ok(Verdict::read(&said))
    }
}
