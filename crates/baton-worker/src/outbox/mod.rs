//! Step 6 of the worker loop, in one place: a hop's outputs are prepared
//! (encoded, claim-checked, sized), made durable, and only then is the
//! message settled. Every message a worker sends goes out here: the plan's
//! outputs, the hop's `accepted` event ([`accepted`]), what a running hop
//! reports, and the dead letter of a message it cannot handle. Which events
//! are stored and which go live is decided once, by [`EventLevel::stores`].
//!
//! - [`prepare`]: outputs into messages that fit the server;
//! - [`settle`]: publish, then ack, nak or term, dead-lettering what the
//!   server will never take (also used by the router and the deadline watch);
//! - [`accepted`]: the hop's `accepted` event, folded or sent on its own.

pub(crate) mod accepted;
mod compact;
mod prepare;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use baton_proto::footprint::Footprint;
use baton_proto::{AgentName, DeadLetterReason, Event, Subjects};

use crate::config::{EventLevel, LiveEvents, WorkerStats};
use crate::decide::{Output, Plan, Settle};
use crate::metrics::Metrics;
use baton_nats::ClaimCheck;
use baton_nats::nats::publish::{Outgoing, Publisher};
use baton_nats::pipeline::address::pin_ahead;
use baton_nats::pipeline::delivery::Delivery;
use baton_nats::pipeline::opening::{Opened, Opening};
use baton_nats::pipeline::settle::{self, Finished};
use baton_nats::state::followers::Followers;
use baton_nats::state::rollouts::Rollouts;
use prepare::Unsendable;

/// Where a worker's messages leave.
pub(crate) struct Outbox {
    pub(crate) publisher: Publisher,
    subjects: Subjects,
    /// Which events are stored.
    level: EventLevel,
    /// Events keep once what they hold twice.
    compact: bool,
    agent: AgentName,
    claims: Arc<ClaimCheck>,
    /// Where contexts that refer to a transcript come from.
    transcripts: baton_nats::state::transcript::Transcripts,
    /// The largest message the server accepts, headers included.
    server_max_payload: usize,
    /// How often a message whose outputs take long to prepare acks progress.
    progress_every: Duration,
    metrics: Arc<Metrics>,
    stats: Arc<WorkerStats>,
    /// Who follows live events: an event the level does not store is sent
    /// only when someone does (unless `live` says always).
    pub(crate) followers: Arc<Followers>,
    live: LiveEvents,
    /// The agent types' rollouts: an envelope for a versioned type is
    /// pinned to a version before it leaves.
    pub(crate) rollouts: Rollouts,
}

/// What an [`Outbox`] is made of.
pub(crate) struct Parts {
    pub(crate) transcripts: baton_nats::state::transcript::Transcripts,
    pub(crate) publisher: Publisher,
    pub(crate) subjects: Subjects,
    pub(crate) level: EventLevel,
    pub(crate) compact: bool,
    pub(crate) live: LiveEvents,
    pub(crate) agent: AgentName,
    pub(crate) claims: Arc<ClaimCheck>,
    pub(crate) server_max_payload: usize,
    pub(crate) progress_every: Duration,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) stats: Arc<WorkerStats>,
    pub(crate) rollouts: Rollouts,
}

impl Outbox {
    pub(crate) fn new(parts: Parts) -> Self {
        Self {
            publisher: parts.publisher,
            subjects: parts.subjects,
            level: parts.level,
            compact: parts.compact,
            live: parts.live,
            agent: parts.agent,
            claims: parts.claims,
            transcripts: parts.transcripts,
            server_max_payload: parts.server_max_payload,
            progress_every: parts.progress_every,
            metrics: parts.metrics,
            stats: parts.stats,
            followers: Arc::default(),
            rollouts: parts.rollouts,
        }
    }

    /// Carries `plan` out: prepares its outputs, makes them durable, settles
    /// the delivery and counts it. Outputs that can never be sent (too large
    /// even after the claim-check, or not encodable) end the session instead:
    /// a dead letter with the reason, and `dead_lettered` and `failed`
    /// events. When the claim-check store is unreachable, the message is
    /// left for redelivery.
    pub(crate) async fn execute(&self, delivery: &Delivery<'_>, mut plan: Plan) {
        stamp_accepted(&mut plan.outputs, &self.agent, delivery.received_at);
        // Each message is pinned where it goes (the plan gave its id, and a
        // timer for its own deadline); the delivery names its subject from
        // the pin. One lookup for an unversioned type, no allocation.
        for output in &mut plan.outputs {
            if let Output::Envelope { to, envelope } = output {
                pin_ahead(&self.rollouts, to, envelope);
            }
        }
        self.refer_to_transcripts(&mut plan.outputs, delivery.attempt == 1);
        delivery.fold_into(&mut plan.outputs);
        // An event the level does not store, and nobody follows, is neither
        // encoded nor sent; the metrics still count it.
        let sent: Vec<&Output> = plan
            .outputs
            .iter()
            .filter(|output| !self.unwanted(output))
            .collect();
        let outgoing = match self.prepare(delivery, &sent).await {
            Ok(outgoing) => outgoing,
            Err(Unsendable::Permanent(reason, detail)) => {
                tracing::error!(%reason, detail, "the outcome cannot be sent; dead-lettering");
                return self.end(delivery, &reason, &detail).await;
            }
            Err(Unsendable::Transient(err)) => {
                tracing::error!(error = %err, "claim-check store unavailable");
                return settle::leave(delivery).await;
            }
        };
        let (live, mut durable) = self.split_live(outgoing, &sent);
        match Box::pin(self.opened(delivery, &mut durable)).await {
            Gate::Go => {}
            Gate::Left => return settle::leave(delivery).await,
            Gate::Ended(end) => return Box::pin(self.ended_before(delivery, &end)).await,
        }
        match settle::finish(&self.publisher, delivery, &durable, plan.settle).await {
            Finished::Settled => {
                self.publisher.publish_live(&live).await;
                self.metrics.settled(&plan.outputs);
                self.count(plan.failed);
            }
            Finished::Ended(reason) => self.ended(&reason),
            Finished::Left => {}
        }
    }

    /// Acks `delivery` with nothing to publish (a cancelled session, a join
    /// another report ended).
    pub(crate) async fn discard(&self, delivery: &Delivery<'_>) {
        self.execute(delivery, Plan::ack(Vec::new())).await;
    }

    /// Leaves `delivery` for redelivery soon, after a failure retrying can
    /// mend (see [`settle::leave`]).
    pub(crate) async fn leave(&self, delivery: &Delivery<'_>) {
        settle::leave(delivery).await;
    }

    /// Settles `delivery` to come again after `delay`, publishing nothing.
    pub(crate) async fn later(&self, delivery: &Delivery<'_>, delay: Duration) {
        settle::settle(delivery, Settle::Nak(delay)).await;
    }

    /// Makes `outputs` durable without settling (a join's notes, before a
    /// continuation that may take long). `false` leaves the message for
    /// redelivery.
    pub(crate) async fn publish(&self, delivery: &Delivery<'_>, outputs: &[Output]) -> bool {
        let outputs: Vec<&Output> = outputs.iter().collect();
        let published = match self.prepare(delivery, &outputs).await {
            Ok(outgoing) => self.publisher.publish_all(&outgoing).await,
            Err(Unsendable::Permanent(_, detail)) => Err(baton_nats::Error::new(
                baton_nats::ErrorKind::Publish,
                detail,
            )),
            Err(Unsendable::Transient(err)) => Err(err),
        };
        if let Err(err) = &published {
            tracing::error!(error = %err, "outputs not durable");
            settle::leave(delivery).await;
        }
        published.is_ok()
    }

    /// Dead-letters a message that is not a readable envelope.
    pub(crate) async fn unreadable(
        &self,
        delivery: &Delivery<'_>,
        reason: &DeadLetterReason,
        detail: &str,
    ) {
        tracing::warn!(subject = %delivery.message.subject, %reason, detail, "unreadable message; dead-lettering");
        self.end(delivery, reason, detail).await;
    }

    /// Ends the message as a dead letter with `reason`, and its session's
    /// failure when the session can be read.
    async fn end(&self, delivery: &Delivery<'_>, reason: &DeadLetterReason, detail: &str) {
        let outgoing = delivery.unreadable(reason, detail);
        match settle::finish(&self.publisher, delivery, &outgoing, Settle::Term).await {
            Finished::Left => {}
            Finished::Ended(ended) => self.ended(&ended),
            Finished::Settled => self.ended(reason),
        }
    }

    /// Sends `event` live only (a `delta`), best effort: never stored,
    /// whatever the event level.
    pub(crate) async fn live(&self, event: &Event) {
        let subject = self.subjects.live(event.session);
        if let Some(message) = plain(event, subject, async_nats::HeaderMap::new()) {
            self.publisher
                .publish_live(std::slice::from_ref(&message))
                .await;
        }
    }

    /// Sends `event`, a report of a running hop, best effort: stored or
    /// live by the event level; a failure is logged. A root task's
    /// `opening` checks its session with the first event it stores.
    pub(crate) async fn report(
        &self,
        event: &Event,
        headers: async_nats::HeaderMap,
        opening: Option<&Opening>,
    ) {
        if self.unwanted_event(event) {
            return;
        }
        let subject = self.subjects.events(event.session);
        let Some(message) = plain(event, subject, headers) else {
            return;
        };
        if let Err(err) = self.send_event(event, message, opening).await {
            tracing::warn!(error = %err, kind = %event.kind, "cannot store an event");
        }
    }

    /// Sends one event's `message` on its own: live when the level does not
    /// store `event`'s kind (callers leave out what nobody follows), else
    /// stored ([`Outbox::store`]), its PubAck awaited.
    async fn send_event(
        &self,
        event: &Event,
        mut message: Outgoing,
        opening: Option<&Opening>,
    ) -> Result<(), baton_nats::Error> {
        if self.level.stores(&event.kind) {
            return self.store(opening, &message).await;
        }
        message.subject = self.subjects.live(event.session);
        self.publisher
            .publish_live(std::slice::from_ref(&message))
            .await;
        Ok(())
    }

    /// Stores one event's `message`, its PubAck awaited: through a root
    /// task's `opening` while the hop has stored nothing, so that it checks
    /// the session (nothing is written into a session that ended).
    async fn store(
        &self,
        opening: Option<&Opening>,
        message: &Outgoing,
    ) -> Result<(), baton_nats::Error> {
        if let Some(opening) = opening {
            match opening.write(&self.publisher, message).await? {
                Opened::Written | Opened::Ended(_) => return Ok(()),
                Opened::Open => {}
            }
        }
        self.publisher.publish_one(message).await
    }

    /// Splits `outgoing` (of `outputs`, which leave out what nobody
    /// follows) into the events the level sends live, once the rest is
    /// durable, and the rest: returns (live, durable).
    fn split_live(
        &self,
        outgoing: Vec<Outgoing>,
        outputs: &[&Output],
    ) -> (Vec<Outgoing>, Vec<Outgoing>) {
        let (mut live, mut durable) = (Vec::new(), Vec::new());
        for (mut message, output) in outgoing.into_iter().zip(outputs) {
            match output {
                Output::Event(event) if !self.level.stores(&event.kind) => {
                    message.subject = self.subjects.live(event.session);
                    live.push(message);
                }
                _ => durable.push(message),
            }
        }
        (live, durable)
    }

    /// Whether `output` is an event the level does not store and that has
    /// nobody to reach live.
    fn unwanted(&self, output: &Output) -> bool {
        matches!(output, Output::Event(event) if self.unwanted_event(event))
    }

    /// Whether `event` is of a kind the level does not store, and has
    /// nobody to reach live: it is not even encoded.
    pub(super) fn unwanted_event(&self, event: &Event) -> bool {
        !self.level.stores(&event.kind)
            && self.live != LiveEvents::Always
            && !self.followers.wants(event.session)
    }

    /// Counts a message that ended its session as a dead letter.
    fn ended(&self, reason: &DeadLetterReason) {
        self.metrics.ended(reason.as_str());
        self.count(true);
    }

    /// Counts a settled message.
    fn count(&self, failed: bool) {
        self.stats.processed.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Whether a plan's messages may be written, by a root task's opening.
enum Gate {
    /// Yes (the first event may be written already).
    Go,
    /// The session ended before the task arrived.
    Ended(Box<Event>),
    /// The opening could not be written: left for redelivery.
    Left,
}

impl Outbox {
    /// For a root task's first delivery: writes the first of `durable` that
    /// is an event of its session as the session's first event (and takes
    /// it out of `durable`), or reads the session when there is none; see
    /// [`baton_nats::pipeline::opening`].
    async fn opened(&self, delivery: &Delivery<'_>, durable: &mut Vec<Outgoing>) -> Gate {
        let Some(opening) = delivery.opening() else {
            return Gate::Go;
        };
        if self.publisher.forbidden(durable).await.is_some() {
            return Gate::Go; // Nothing is written: settling ends the message.
        }
        let first = durable.iter().position(|m| m.subject == opening.subject());
        let opened = match first {
            Some(at) => match opening.write(&self.publisher, &durable[at]).await {
                Ok(Opened::Written) => {
                    durable.remove(at);
                    return Gate::Go;
                }
                Ok(opened) => opened,
                Err(err) => {
                    use baton_nats::ErrorKind::{Forbidden, NoStream, TooLarge};
                    if matches!(err.kind(), Forbidden | NoStream | TooLarge) {
                        return Gate::Go; // Settling ends the message with its reason.
                    }
                    tracing::error!(error = %err, "the session's first event is not durable");
                    return Gate::Left;
                }
            },
            // Nothing durable (a cancelled run's discard): nothing to check.
            None if durable.is_empty() => return Gate::Go,
            None => opening.check(&self.publisher).await,
        };
        match opened {
            Opened::Ended(end) => Gate::Ended(end),
            Opened::Written | Opened::Open => Gate::Go,
        }
    }

    /// A root task whose session ended (with `end`) before it arrived: its
    /// outcome is dropped, and it is dead-lettered as `session_ended`.
    async fn ended_before(&self, delivery: &Delivery<'_>, end: &Event) {
        let Some(opening) = delivery.opening() else {
            return;
        };
        tracing::info!(session = %opening.session, "a root task for an ended session; its outcome dropped, dead-lettered");
        let plan = Plan::session_ended(opening.envelope, opening.session, end);
        let outgoing = match delivery.encode(&plan.outputs) {
            Ok(outgoing) => outgoing,
            Err(err) => {
                let detail = format!("cannot encode the dead letter: {err}");
                return self
                    .end(delivery, &DeadLetterReason::Malformed, &detail)
                    .await;
            }
        };
        match settle::finish(&self.publisher, delivery, &outgoing, plan.settle).await {
            Finished::Settled => {
                self.metrics.settled(&plan.outputs);
                self.count(plan.failed);
            }
            Finished::Ended(reason) => self.ended(&reason),
            Finished::Left => {}
        }
    }
}

/// Stamps this worker's hop (the last of each output's path, if it is
/// `agent`'s and not stamped yet) with when the delivery was taken.
fn stamp_accepted(outputs: &mut [Output], agent: &AgentName, received_at: u64) {
    for output in outputs {
        let path = match output {
            Output::Envelope { envelope, .. } => &mut envelope.path,
            Output::Event(event) => &mut event.path,
            Output::DeadLetter(_) => continue,
        };
        if let Some(hop) = path.last_mut().filter(|hop| hop.agent == agent.as_str()) {
            hop.accepted_at.get_or_insert(received_at);
        }
    }
}

/// What the outbox of a worker of `agent` publishes to: session events,
/// stored and live, its dead letters, and the agent types in `to` (every
/// agent type when `to` is empty, with a note saying so).
#[must_use]
pub(crate) fn footprint(subjects: &Subjects, agent: &AgentName, to: &[AgentName]) -> Footprint {
    let outbox = Footprint::new().publishes([
        format!("{}.events.*", subjects.prefix()),
        subjects.all_live(),
        subjects.dlq(agent),
    ]);
    if !to.is_empty() {
        // Each type's subject, and its versions'.
        let versions = to.iter().map(|to| format!("{}.*", subjects.agent(to)));
        return outbox.publishes(to.iter().map(|to| subjects.agent(to)).chain(versions));
    }
    outbox
        .publishes([
            format!("{}.agent.*", subjects.prefix()),
            format!("{}.agent.*.*", subjects.prefix()),
        ])
        .noting(format!(
            "publish to every agent type ({}.agent.*) is open: give the agent types this worker hands off, \
             delegates, escalates and answers to with --to A,B (its routes, its fallback, the agent types \
             that delegate to it, and the agent types its capability targets resolve to)",
            subjects.prefix()
        ))
}

/// `event` as a message on `subject`; `None` (logged) when it cannot be
/// encoded.
fn plain(event: &Event, subject: String, headers: async_nats::HeaderMap) -> Option<Outgoing> {
    match baton_proto::Wire::to_msgpack(event) {
        Ok(payload) => Some(Outgoing {
            class: baton_nats::nats::publish::Class::Plain,
            subject,
            id: event.id,
            payload: bytes::Bytes::from(payload),
            headers: headers.into(),
        }),
        Err(err) => {
            tracing::warn!(error = %err, kind = %event.kind, "cannot encode an event");
            None
        }
    }
}
