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
        let mut readers = HashMap::new();
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

    async fn judge_all(
        &self,
        readers: &mut HashMap<(AgentName, Uuid, u32), StepWatch>,
    ) -> Result<(), Error> {
        let rollouts = self.versions.rollouts().await?;
        let (mut running, mut judged) = (Vec::new(), Vec::new());
        for rollout in rollouts.into_values() {
            let Some(gated) = rollout.gated.as_ref().filter(|g| g.is_running()) else {
                continue;
            };
            let key = (rollout.agent.clone(), gated.id, gated.step);
            running.push(key.clone());
            readers.retain(|_, watch| !watch.stopped());
            if !readers.contains_key(&key) {
                let watch =
                    StepWatch::open(&self.jetstream, &self.subjects, &rollout.agent, gated).await?;
                readers.insert(key.clone(), watch);
                self.started(&rollout).await?;
            }
            let Some(watch) = readers.get(&key) else {
                continue;
            };
            let tally = watch.tally();
            let base = tally.side(&rollout.current);
            let new = tally.side(&gated.version);
            let verdict = judge(gated, (&base, &new), now_ms());
            judged.push((rollout, verdict, (base, new)));
        }
        readers.retain(|key, _| running.contains(key));
        for (rollout, verdict, sides) in judged {
            self.decide(&rollout, verdict, sides).await?;
        }
        Ok(())
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
        let decision = RolloutDecision {
            v: baton_proto::PROTOCOL_VERSION,
            id: baton_proto::derive_id_labelled(gated.id, "0/start", 0),
            rollout: gated.id,
            agent: rollout.agent.clone(),
            version: gated.version.clone(),
            at: gated.since,
            what: "start".to_owned(),
            step: 0,
            weight: gated.weight(),
            next_weight: gated.weight(),
            why: "started".to_owned(),
            base: None,
            new: None,
            readings: Vec::new(),
            by: self.by.clone(),
            extra: baton_proto::Map::new(),
        };
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
        let mut applied = false;
        let now = now_ms();
        let changed = (self.versions)
            .change(&rollout.agent, |stored: &mut Rollout| {
                applied = if rollback {
                    stored.gate_roll_back(id, step, now)
                } else {
                    stored.gate_promote(id, step, now)
                };
                Ok::<_, Error>(applied)
            })
            .await?;
        if !applied {
            return Ok(());
        }
        let ended = changed.gated.as_ref().and_then(|g| g.ended.clone());
        let what = match (rollback, ended.as_deref()) {
            (true, _) => "rollback",
            (false, Some("promoted")) => "promoted",
            (false, _) => "promote",
        };
        let decision = RolloutDecision {
            v: baton_proto::PROTOCOL_VERSION,
            id: baton_proto::derive_id_labelled(id, &format!("{step}/{what}"), 0),
            rollout: id,
            agent: rollout.agent.clone(),
            version: gated.version.clone(),
            at: now,
            what: what.to_owned(),
            step,
            weight: gated.weight(),
            next_weight: (changed.ramp.as_ref()).map(|ramp| ramp.weight).unwrap_or(
                if changed.current == gated.version {
                    100
                } else {
                    0
                },
            ),
            why,
            base: Some(base),
            new: Some(new),
            readings,
            by: self.by.clone(),
            extra: baton_proto::Map::new(),
        };
        tracing::info!(agent = %rollout.agent, version = %gated.version, step, decision = what, why = %decision.why, "a gated rollout decided");
        let labels = [
            KeyValue::new("agent", rollout.agent.to_string()),
            KeyValue::new("decision", what),
        ];
        self.counted.add(1, &labels);
        record(&self.jetstream, &self.subjects, &decision).await
    }
}
