//! A worker's metrics, through the OpenTelemetry metrics API. They go
//! wherever the process's meter provider sends them (`baton` serves them to
//! Prometheus and can push them over OTLP); without a provider they cost
//! nothing.
//!
//! Each count is taken from what became durable: the events of a plan
//! whose outputs were published, so a message left for redelivery counts
//! once, when it is finally settled. No label carries a session or an
//! envelope id.

use std::sync::Arc;
use std::time::Duration;

use baton_proto::{Event, EventType};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram};

use crate::config::WorkerStats;
use crate::decide::Output;

pub(crate) use baton_nats::meter::{SECONDS, meter};

/// The instruments of one worker.
pub(crate) struct Metrics {
    agent: KeyValue,
    messages: Counter<u64>,
    handoffs: Counter<u64>,
    retries: Counter<u64>,
    dead_letters: Counter<u64>,
    loops: Counter<u64>,
    run_time: Histogram<f64>,
    session_time: Histogram<f64>,
    claim_bytes: Counter<u64>,
}

impl Metrics {
    /// The instruments of a worker of `agent`, with gauges that read
    /// `stats` and `concurrency` when collected.
    pub(crate) fn new(agent: &str, stats: &Arc<WorkerStats>, concurrency: usize) -> Self {
        let meter = meter();
        let label = KeyValue::new("agent", agent.to_owned());
        let (seen, in_flight) = (label.clone(), Arc::clone(stats));
        meter
            .i64_observable_gauge("baton.in_flight")
            .with_description("Messages this worker is handling now")
            .with_callback(move |gauge| {
                let now = i64::try_from(in_flight.in_flight()).unwrap_or(i64::MAX);
                gauge.observe(now, std::slice::from_ref(&seen));
            })
            .build();
        let (seen, limit) = (
            label.clone(),
            i64::try_from(concurrency).unwrap_or(i64::MAX),
        );
        meter
            .i64_observable_gauge("baton.concurrency")
            .with_description("How many messages this worker handles at once, at most")
            .with_callback(move |gauge| gauge.observe(limit, std::slice::from_ref(&seen)))
            .build();
        Self {
            agent: label,
            messages: meter
                .u64_counter("baton.messages")
                .with_description("Messages settled, by agent type and outcome (the last event the message caused)")
                .build(),
            handoffs: meter
                .u64_counter("baton.handoffs")
                .with_description("Handoffs made durable, by the agent type they left, the one they went to, and why")
                .build(),
            retries: meter
                .u64_counter("baton.retries")
                .with_description("Failed attempts that will be retried")
                .build(),
            dead_letters: meter
                .u64_counter("baton.dead_letters")
                .with_description("Messages dead-lettered, by reason")
                .build(),
            loops: meter
                .u64_counter("baton.loops_detected")
                .with_description("Routes the loop guard refused")
                .build(),
            run_time: meter
                .f64_histogram("baton.agent.duration")
                .with_unit("s")
                .with_description("How long one run of the agent took, by result (ok or error)")
                .with_boundaries(SECONDS.to_vec())
                .build(),
            session_time: meter
                .f64_histogram("baton.session.duration")
                .with_unit("s")
                .with_description("From a session's first hop to its end, recorded where it ends, by outcome")
                .with_boundaries(SECONDS.to_vec())
                .build(),
            claim_bytes: meter
                .u64_counter("baton.claims.bytes")
                .with_unit("By")
                .with_description("Bytes moved through the claim-check store, by direction (stored or restored)")
                .build(),
        }
    }

    /// Counts what the events of `outputs`, now durable, say happened.
    pub(crate) fn settled(&self, outputs: &[Output]) {
        let events: Vec<&Event> = outputs
            .iter()
            .filter_map(|output| match output {
                Output::Event(event) => Some(&**event),
                _ => None,
            })
            .collect();
        let last = events
            .iter()
            .rev()
            .find(|event| event.kind != EventType::Accepted);
        let outcome = last.map_or("settled", |event| event.kind.as_str());
        let failure = last
            .filter(|event| event.kind == EventType::Failed)
            .map(|event| event.reason.as_ref().map_or("failed", |r| r.as_str()));
        record_outcome(outcome, failure);
        let outcome = KeyValue::new("outcome", outcome.to_owned());
        self.messages.add(1, &[self.agent.clone(), outcome]);
        for event in events {
            self.event(event);
        }
    }

    /// Counts a message that ended as a dead letter without a plan (it
    /// could not be read, or its outcome could not be sent).
    pub(crate) fn ended(&self, reason: &str) {
        record_outcome(EventType::Failed.as_str(), Some(reason));
        let outcome = KeyValue::new("outcome", EventType::Failed.as_str().to_owned());
        self.messages.add(1, &[self.agent.clone(), outcome]);
        self.dead_letters.add(
            1,
            &[
                self.agent.clone(),
                KeyValue::new("reason", reason.to_owned()),
            ],
        );
    }

    fn event(&self, event: &Event) {
        let reason = || {
            let reason = event.reason.as_ref().map_or("", |reason| reason.as_str());
            KeyValue::new("reason", reason.to_owned())
        };
        match event.kind {
            EventType::Handoff | EventType::Escalated => {
                let to = event.to.as_deref().unwrap_or_default().to_owned();
                self.handoffs.add(
                    1,
                    &[
                        KeyValue::new("from", self.agent.value.clone()),
                        KeyValue::new("to", to),
                        reason(),
                    ],
                );
            }
            EventType::Retrying => self.retries.add(1, std::slice::from_ref(&self.agent)),
            EventType::LoopDetected => self.loops.add(1, std::slice::from_ref(&self.agent)),
            EventType::DeadLettered => self.dead_letters.add(1, &[self.agent.clone(), reason()]),
            EventType::Completed | EventType::Failed if !event.path.is_empty() => {
                let started = event.path.first().map_or(event.at, |hop| hop.at);
                let took = Duration::from_millis(event.at.saturating_sub(started));
                let outcome = KeyValue::new("outcome", event.kind.as_str().to_owned());
                self.session_time.record(took.as_secs_f64(), &[outcome]);
            }
            _ => {}
        }
    }

    /// Records one run of the agent.
    pub(crate) fn ran(&self, took: Duration, ok: bool) {
        let result = KeyValue::new("result", if ok { "ok" } else { "error" });
        self.run_time
            .record(took.as_secs_f64(), &[self.agent.clone(), result]);
    }

    /// Counts bytes stored in, or restored from, the claim-check store.
    pub(crate) fn claims(&self, direction: &'static str, bytes: usize) {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        self.claim_bytes
            .add(bytes, &[KeyValue::new("direction", direction)]);
    }
}

/// Puts a settled message's outcome on the current (`invoke_agent`) span,
/// and marks the span failed, with the reason as `error.type`, when the
/// session failed here.
fn record_outcome(outcome: &str, failure: Option<&str>) {
    let span = tracing::Span::current();
    span.record("baton.outcome", outcome);
    if let Some(reason) = failure {
        span.record("otel.status_code", "ERROR");
        span.record("error.type", reason);
    }
}

impl baton_nats::pipeline::advisory::CountsDeadLetters for Metrics {
    fn dead_lettered(&self, reason: &baton_proto::DeadLetterReason) {
        self.ended(reason.as_str());
    }
}
