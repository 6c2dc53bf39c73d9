//! The gatekeeper: every router judges each gated rollout (`baton rollout
//! --steps`) every few seconds, from the sessions started on each version
//! within the step, and promotes it to the next step or rolls it back as
//! its gates say ([`judge`]).
//!
//! Every router judges; a decision is applied by compare-and-swap on the
//! rollout, at the step it was made for, so one router applies it and the
//! others find the step moved on. A router that dies mid-rollout leaves
//! the state in the rollout, where the others read it: no step is skipped
//! or decided twice. The router that applied a decision records it on
//! `baton.decisions.<agent>` with an id derived from the rollout, the step
//! and what was decided, and counts it (`baton.rollout.decisions`).

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use baton_client::versions::StepWatch;
use baton_client::versions::Versions;
use baton_client::versions::gates::{Verdict, judge};
use baton_proto::{AgentName, Rollout, RolloutDecision, Side, Subjects, now_ms};
use opentelemetry::KeyValue;
use opentelemetry::metrics::Counter;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use baton_nats::{Error, ErrorKind};

/// How often the gated rollouts are judged.
const EVERY: Duration = Duration::from_secs(2);

/// How long decisions are kept.
const KEPT: Duration = Duration::from_secs(365 * 24 * 3600);

/// What a gatekeeper (and an operator's `baton rollout` and `versions`)
/// does on NATS for gated rollouts: reads the events and outcomes streams, and creates,
/// writes and reads the decisions stream.
#[must_use]
pub fn footprint(subjects: &Subjects) -> baton_proto::footprint::Footprint {
    use baton_proto::footprint::Footprint;
    Footprint::stream_reader(&subjects.events_stream())
        // Feedback: a session marked wrong fails.
        .with(Footprint::stream_reader(&subjects.outcomes_stream()))
        .with(Footprint::stream_admin(&subjects.decisions_stream()))
        .with(Footprint::stream_reader(&subjects.decisions_stream()))
        .publishes([
            subjects.all_decisions(),
            // Whether a type has any decision, before reading them.
            baton_proto::footprint::api(format_args!(
                "STREAM.MSG.GET.{}",
                subjects.decisions_stream()
            )),
        ])
}

/// `BATON_DECISIONS`, created if missing with `replicas`.
///
/// # Errors
///
/// When JetStream refuses the stream.
pub async fn decisions_stream(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    replicas: usize,
) -> Result<stream::Stream, Error> {
    let config = stream::Config {
        name: subjects.decisions_stream(),
        subjects: vec![subjects.all_decisions()],
        retention: stream::RetentionPolicy::Limits,
        storage: stream::StorageType::File,
        max_age: KEPT,
        num_replicas: replicas,
        ..Default::default()
    };
    (jetstream.get_or_create_stream(config).await).map_err(|err| {
        Error::with_source(
            ErrorKind::JetStream,
            "cannot create the decisions stream",
            err,
        )
    })
}

/// Records `decision` on its agent type's decisions subject, once.
///
/// # Errors
///
/// When JetStream does not acknowledge it.
pub async fn record(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    decision: &RolloutDecision,
) -> Result<(), Error> {
    let failed = |err: &dyn std::fmt::Display| {
        Error::new(
            ErrorKind::JetStream,
            format!("cannot record a rollout decision: {err}"),
        )
    };
    let bytes = rmp_serde::to_vec_named(decision).map_err(|err| failed(&err))?;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", decision.id.to_string().as_str());
    let subject = subjects.decisions(decision.agent.as_str());
    let ack = (jetstream
        .publish_with_headers(subject, headers, bytes.into())
        .await)
        .map_err(|err| failed(&err))?;
    ack.await.map(drop).map_err(|err| failed(&err))
}

/// The step each gated rollout is read for, and its watch.
type Readers = HashMap<(AgentName, Uuid, u32), StepWatch>;

/// The gatekeeper of one router.
pub(crate) struct Gatekeeper {
    jetstream: jetstream::Context,
    subjects: Subjects,
    versions: Versions,
    /// This router, as decisions name it.
    by: String,
    counted: Counter<u64>,
}

impl Gatekeeper {
    /// The gatekeeper of the router `by`; it opens the rollouts bucket and
    /// the decisions stream.
    pub(crate) async fn open(
        jetstream: jetstream::Context,
        subjects: Subjects,
        replicas: usize,
        by: String,
    ) -> Result<Self, Error> {
        decisions_stream(&jetstream, &subjects, replicas).await?;
        let versions = Versions::open(
            jetstream.clone(),
            subjects.clone(),
            replicas,
            Duration::from_millis(500),
        )
        .await?;
        let counted = baton_nats::meter::meter()
            .u64_counter("baton.rollout.decisions")
            .with_description("Gated rollouts' decisions, by agent type and decision (promote, promoted, rollback)")
            .build();
        Ok(Self {
            jetstream,
            subjects,
            versions,
            by,
            counted,
        })
    }

    /// Judges every running gated rollout every few seconds, until `stop`.
    pub(crate) async fn keep(self, stop: CancellationToken) {
        // The step each gated rollout is read for, and its sessions so far.
        let mut readers = Readers::new();
        loop {
            if let Err(err) = self.judge_all(&mut readers).await {
                tracing::warn!(error = %err, "the gated rollouts could not be judged; trying again");
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(EVERY) => {}
            }
        }
    }

    async fn judge_all(&self, readers: &mut Readers) -> Result<(), Error> {
        let rollouts = self.versions.rollouts().await?;
        let mut running = Vec::new();
        for rollout in rollouts.into_values() {
            // A decision whose router could not record it is recorded here
            // (once: its id is the record's).
            if let Some(last) = rollout.gated.as_ref().and_then(|g| g.last.as_ref())
                && now_ms().saturating_sub(last.at) < 90_000
                && let Err(err) = record(&self.jetstream, &self.subjects, last).await
            {
                tracing::warn!(agent = %rollout.agent, error = %err, "a rollout decision could not be recorded; trying again");
            }
            let Some(gated) = rollout.gated.as_ref().filter(|g| g.is_running()) else {
                continue;
            };
            running.push((rollout.agent.clone(), gated.id, gated.step));
            // One rollout that cannot be judged does not hold up the others.
            if let Err(err) = self.judge_one(&rollout, readers).await {
                tracing::warn!(agent = %rollout.agent, error = %err, "a gated rollout could not be judged; trying again");
            }
        }
        readers.retain(|key, watch| running.contains(key) && !watch.stopped());
        Ok(())
    }

    /// Judges `rollout`'s step from what its watch read, and decides.
    async fn judge_one(&self, rollout: &Rollout, readers: &mut Readers) -> Result<(), Error> {
        let Some(gated) = rollout.gated.as_ref() else {
            return Ok(());
        };
        let key = (rollout.agent.clone(), gated.id, gated.step);
        if readers.get(&key).is_none_or(StepWatch::stopped) {
            let watch =
                StepWatch::open(&self.jetstream, &self.subjects, &rollout.agent, gated).await?;
            readers.insert(key.clone(), watch);
            self.started(rollout).await?;
        }
        let Some(watch) = readers.get(&key) else {
            return Ok(());
        };
        let tally = watch.tally();
        let sides = (tally.side(&rollout.current), tally.side(&gated.version));
        let verdict = judge(gated, (&sides.0, &sides.1), now_ms());
        self.decide(rollout, verdict, sides).await
    }

    /// Records the start of `rollout`'s gated rollout, when it just began:
    /// the same record as `baton rollout --steps` makes, so it is kept once
    /// whoever makes it (a worker's `[rollout]` makes none).
    async fn started(&self, rollout: &Rollout) -> Result<(), Error> {
        let Some(gated) = rollout.gated.as_ref() else {
            return Ok(());
        };
        let fresh = now_ms().saturating_sub(gated.since) < 60_000;
        if gated.step != 0 || !fresh {
            return Ok(());
        }
        let start = ("start", "0/start");
        let decision = RolloutDecision::of(
            &rollout.agent,
            gated,
            start,
            ("started", &self.by, gated.since),
        );
        record(&self.jetstream, &self.subjects, &decision).await
    }

    /// Applies `verdict` to `rollout` (by compare-and-swap at its step) and
    /// records it, when it decides anything.
    async fn decide(
        &self,
        rollout: &Rollout,
        verdict: Verdict,
        (base, new): (Side, Side),
    ) -> Result<(), Error> {
        let Some(gated) = rollout.gated.as_ref() else {
            return Ok(());
        };
        let (id, step) = (gated.id, gated.step);
        let (rollback, why, readings) = match verdict {
            Verdict::Wait(why) => {
                tracing::debug!(agent = %rollout.agent, %why, "a gated rollout waits");
                return Ok(());
            }
            Verdict::Promote(readings) => (false, "every gate holds".to_owned(), readings),
            Verdict::Rollback(why, readings) => (true, why, readings),
        };
        let now = now_ms();
        // Made on the rollout as it stood when judged, before the change.
        let mut draft = RolloutDecision::of(&rollout.agent, gated, ("", ""), (&why, &self.by, now));
        (draft.base, draft.new, draft.readings) = (Some(base), Some(new), readings);
        let mut made = None;
        // The decision is stored with the change it makes: if this router
        // dies before recording it, another records it (see `judge_all`).
        (self.versions)
            .change(&rollout.agent, |stored: &mut Rollout| {
                made = None;
                let applied = if rollback {
                    stored.gate_roll_back(id, step, now)
                } else {
                    stored.gate_promote(id, step, now)
                };
                if !applied {
                    return Ok::<_, Error>(false);
                }
                settled(&mut draft, stored, rollback);
                if let Some(gated) = stored.gated.as_mut() {
                    gated.last = Some(Box::new(draft.clone()));
                }
                made = Some(draft.clone());
                Ok(true)
            })
            .await?;
        let Some(decision) = made else {
            return Ok(());
        };
        let what = decision.what.clone();
        tracing::info!(agent = %rollout.agent, version = %gated.version, step, decision = %what, why = %decision.why, "a gated rollout decided");
        let labels = [
            KeyValue::new("agent", rollout.agent.to_string()),
            KeyValue::new("decision", what),
        ];
        self.counted.add(1, &labels);
        record(&self.jetstream, &self.subjects, &decision).await
    }
}

/// Completes `draft` with what deciding did to `stored`: what it was, its
/// id, and the share the version takes now.
fn settled(draft: &mut RolloutDecision, stored: &Rollout, rollback: bool) {
    let ended = stored.gated.as_ref().and_then(|g| g.ended.as_deref());
    let what = match (rollback, ended) {
        (true, _) => "rollback",
        (false, Some("promoted")) => "promoted",
        (false, _) => "promote",
    };
    draft.what = what.to_owned();
    draft.id = baton_proto::derive_id_labelled(draft.rollout, &format!("{}/{what}", draft.step), 0);
    draft.next_weight = match &stored.ramp {
        Some(ramp) => ramp.weight,
        None if stored.current == draft.version => 100,
        None => 0,
    };
}
