//! Reading a gated rollout's step: its sessions from the events stream
//! and its feedback from the outcomes stream, once ([`StepReader`], for
//! `baton versions` and the doctor) or as they come ([`StepWatch`], for the
//! routers), and what `baton versions` and the console show of it.

use std::time::Duration;

use async_nats::jetstream;
use baton_proto::{AgentName, Event, Gated, Reading, Side, Wire as _};
use futures::StreamExt as _;

use super::gates::{Tally, Verdict, judge};
use baton_nats::{Error, ErrorKind};

/// Reads the events of a step as they come, into its [`Tally`].
pub struct StepReader {
    messages: jetstream::consumer::pull::Ordered,
    _reading: baton_nats::nats::ordered::Reading<jetstream::stream::Info>,
    /// The outcome records (feedback) since the step began, when the
    /// registry keeps them.
    feedback: Option<Feedback>,
    agent: AgentName,
    since: u64,
    escalated_fails: bool,
    /// The step's sessions so far.
    pub tally: Tally,
}

impl StepReader {
    /// Starts reading the events of `gated`'s step of `agent`, from when it
    /// began (a minute earlier, for sessions that started at its start).
    ///
    /// # Errors
    ///
    /// When the events stream cannot be read.
    pub async fn open(
        jetstream: &jetstream::Context,
        subjects: &baton_proto::Subjects,
        agent: &AgentName,
        gated: &Gated,
    ) -> Result<Self, Error> {
        let stream = (jetstream.get_stream(subjects.events_stream()).await).map_err(|err| {
            Error::with_source(ErrorKind::JetStream, "cannot read the events stream", err)
        })?;
        let from = gated.since.saturating_sub(60_000);
        let (messages, reading) =
            baton_nats::nats::ordered::read_since(&stream, from, "read a rollout's sessions")
                .await?;
        // Without a registry there is no feedback to read.
        let feedback =
            match super::holding::existing(jetstream, &subjects.outcomes_stream()).await? {
                Some(stream) => Some(
                    baton_nats::nats::ordered::read_since(&stream, from, "read feedback").await?,
                ),
                None => None,
            };
        Ok(Self {
            messages,
            _reading: reading,
            feedback,
            agent: agent.clone(),
            since: gated.since,
            escalated_fails: gated.escalated_fails,
            tally: Tally::default(),
        })
    }

    /// Reads what arrived since the last call (waiting at most `quiet`
    /// for each next message), for at most `budget`: a busy stream is
    /// read on at the next call, and judged on what was read meanwhile.
    ///
    /// # Errors
    ///
    /// When the stream fails.
    pub async fn catch_up(&mut self, quiet: Duration, budget: Duration) -> Result<(), Error> {
        let until = tokio::time::Instant::now() + budget;
        while tokio::time::Instant::now() < until {
            let Ok(next) = tokio::time::timeout(quiet, self.messages.next()).await else {
                break;
            };
            let Some(message) = next else {
                break;
            };
            let message = message.map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "the events stream failed", err)
            })?;
            if let Ok(event) = Event::from_msgpack(&message.payload) {
                (self.tally).add(&event, &self.agent, self.since, self.escalated_fails);
            }
            if message.info().is_ok_and(|info| info.pending == 0) {
                break;
            }
        }
        if let Some((records, _)) = self.feedback.as_mut() {
            while let Ok(Some(Ok(message))) = tokio::time::timeout(quiet, records.next()).await {
                if let Ok(record) = rmp_serde::from_slice(&message.payload) {
                    self.tally.feedback(&record);
                }
                if message.info().is_ok_and(|info| info.pending == 0) {
                    break;
                }
            }
        }
        Ok(())
    }
}

/// A reading of the outcome records.
type Feedback = (
    jetstream::consumer::pull::Ordered,
    baton_nats::nats::ordered::Reading<jetstream::stream::Info>,
);

/// A step's sessions read as they come, by a task of its own that never
/// stops mid-message; dropped, it stops.
pub struct StepWatch {
    tally: std::sync::Arc<std::sync::Mutex<Tally>>,
    task: tokio::task::JoinHandle<()>,
}

impl StepWatch {
    /// Starts reading the events of `gated`'s step of `agent`.
    ///
    /// # Errors
    ///
    /// When the events stream cannot be read.
    pub async fn open(
        jetstream: &jetstream::Context,
        subjects: &baton_proto::Subjects,
        agent: &AgentName,
        gated: &Gated,
    ) -> Result<Self, Error> {
        let mut reader = StepReader::open(jetstream, subjects, agent, gated).await?;
        let tally = std::sync::Arc::new(std::sync::Mutex::new(Tally::default()));
        let shared = tally.clone();
        let feedback = reader.feedback.take();
        let heard = tally.clone();
        let task = tokio::spawn(async move {
            let feedback = async move {
                let Some((mut records, _reading)) = feedback else {
                    return std::future::pending().await;
                };
                while let Some(Ok(message)) = records.next().await {
                    if let Ok(record) = rmp_serde::from_slice(&message.payload) {
                        let mut tally = heard
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        tally.feedback(&record);
                    }
                }
            };
            let events = async move {
                while let Some(Ok(message)) = reader.messages.next().await {
                    if let Ok(event) = Event::from_msgpack(&message.payload) {
                        let mut tally = shared
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        tally.add(&event, &reader.agent, reader.since, reader.escalated_fails);
                    }
                }
            };
            // Either reading stopping stops the watch, to be opened again.
            tokio::select! {
                () = events => {}
                () = feedback => {}
            }
        });
        Ok(Self { tally, task })
    }

    /// The step's sessions so far.
    #[must_use]
    pub fn tally(&self) -> Tally {
        (self
            .tally
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
        .clone()
    }

    /// Whether the reading stopped (the stream failed): open it again.
    #[must_use]
    pub fn stopped(&self) -> bool {
        self.task.is_finished()
    }
}

impl Drop for StepWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A gated rollout as it stands: the step's sessions on each side and
/// what the gates say of them now.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Analysis {
    /// The gated rollout.
    pub gated: Gated,
    /// The current version's sessions in the step.
    pub base: Side,
    /// The new version's sessions in the step.
    pub new: Side,
    /// `wait`, `promote`, `rollback` or `paused`: what the routers would
    /// decide now.
    pub verdict: String,
    /// Why, in a sentence.
    pub why: String,
    /// Each gate, as read.
    pub readings: Vec<Reading>,
}

impl super::Versions {
    /// What `rollout`'s gated rollout stands at, read now from its step's
    /// sessions; `None` without one under way.
    ///
    /// # Errors
    ///
    /// When the events stream cannot be read.
    pub async fn analysis(
        &self,
        rollout: &baton_proto::Rollout,
    ) -> Result<Option<Analysis>, Error> {
        let Some(gated) = rollout.gated.as_ref().filter(|g| g.ended.is_none()) else {
            return Ok(None);
        };
        let mut reader =
            StepReader::open(&self.jetstream, &self.subjects, &rollout.agent, gated).await?;
        reader
            .catch_up(Duration::from_millis(300), Duration::from_secs(30))
            .await?;
        let base = reader.tally.side(&rollout.current);
        let new = reader.tally.side(&gated.version);
        let judged = match judge(gated, (&base, &new), baton_proto::now_ms()) {
            _ if gated.paused.is_some() => (
                "paused",
                "held by a person: --resume lets it go on".to_owned(),
            ),
            Verdict::Wait(why) => ("wait", why),
            Verdict::Promote(_) => ("promote", "every gate holds".to_owned()),
            Verdict::Rollback(why, _) => ("rollback", why),
        };
        let ((verdict, why), readings) = (judged, super::gates::readings(gated, (&base, &new)));
        Ok(Some(Analysis {
            gated: gated.clone(),
            base,
            new,
            verdict: verdict.to_owned(),
            why,
            readings,
        }))
    }

    /// The decisions of `agent`'s gated rollouts, oldest first (none when
    /// no gated rollout ever ran).
    ///
    /// # Errors
    ///
    /// When the decisions stream cannot be read.
    pub async fn decisions(
        &self,
        agent: &AgentName,
    ) -> Result<Vec<baton_proto::RolloutDecision>, Error> {
        let name = self.subjects.decisions_stream();
        let Some(stream) = super::holding::existing(&self.jetstream, &name).await? else {
            return Ok(Vec::new());
        };
        let subject = self.subjects.decisions(agent.as_str());
        // None recorded: nothing to wait for.
        if baton_nats::nats::events::last_message(&self.jetstream, &name, &subject)
            .await?
            .is_none()
        {
            return Ok(Vec::new());
        }
        let filter = Some(subject);
        let (mut messages, _reading) =
            baton_nats::nats::ordered::read_from_start(&stream, filter, "read rollout decisions")
                .await?;
        let mut decisions = Vec::new();
        loop {
            let Ok(Some(message)) =
                tokio::time::timeout(Duration::from_millis(300), messages.next()).await
            else {
                return Ok(decisions);
            };
            let message = message.map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "the decisions stream failed", err)
            })?;
            if let Ok(decision) = rmp_serde::from_slice(&message.payload) {
                decisions.push(decision);
            }
            if message.info().is_ok_and(|info| info.pending == 0) {
                return Ok(decisions);
            }
        }
    }
}
