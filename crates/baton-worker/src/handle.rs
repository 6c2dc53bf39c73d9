//! The worker loop, top-down, in the order of "How a worker handles a
//! message" (docs/internals/worker-loop.md). For each message pulled from
//! `agent-<A>`:
//!
//! 1. **decode** it ([`Delivery`], dead-lettering what cannot be read);
//! 2. **refuse** what must not run: a passed deadline, an invalid or orphaned
//!    parent ([`crate::decide`]);
//! 3. **accept** it and **run** the agent with progress ([`crate::run`]);
//! 4. **route** the outcome through the rules ([`Routing`]), the
//!    registry ([`Runtime::lookup`]) and the planner;
//! 5. **guard** against loops ([`crate::guard`], inside the planner);
//! 6. **publish, then ack**, in the outbox ([`crate::outbox`]);
//! 7. **handle failure**: retries, dead letters and escalations are plans too;
//! 8. **delegate**: a delegation starts its join ([`crate::join`]), and
//!    a child's result is recorded in it, the last one running the
//!    continuation.

use async_nats::jetstream;
use baton_proto::{DeadLetterReason, Envelope, Kind, Usage, Wire, now_ms};
use tracing::Instrument;

use crate::config::WorkerConfig;
use crate::decide::{Lookup, Output, Plan, usage};
use crate::join::{self, Received};
use crate::run::with_progress;
use crate::runtime::Runtime;
use baton_author::Agent;
use baton_author::Target;
use baton_author::{AgentError, Outcome};
use baton_author::{Decided, Routing, Step};
use baton_nats::ErrorKind;
use baton_nats::nats::claimcheck::ClaimFailure;
use baton_nats::pipeline::delivery::Delivery;

/// Handles one message, from decoding to settling.
pub(crate) async fn handle<A: Agent>(rt: &Runtime, agent: &A, message: jetstream::Message) {
    let config = &rt.config;
    let span = hop_span(config);
    let delivery = Delivery::new(message, span.clone(), &config.subjects, &config.agent)
        .settling(config.settle);
    span.record("attempt", delivery.attempt);
    async {
        // 0. A message that keeps coming back unsettled (its worker crashed
        // on it, or its outputs never became durable) ends here, unread.
        if delivery.attempt > config.max_deliveries {
            let detail = format!(
                "delivered {} times without being settled: its worker crashed on it each time, or its outputs could not be made durable",
                delivery.attempt - 1
            );
            let reason = &DeadLetterReason::MaxDeliveries;
            return Box::pin(rt.outbox.unreadable(&delivery, reason, &detail)).await;
        }
        // 1. Decode, with the claim-checked parts and a turn's transcript
        // restored.
        let Some(mut envelope) = decode(rt, &delivery).await else {
            return;
        };
        if !Box::pin(restore_history(rt, &delivery, &mut envelope)).await {
            return;
        }
        if let Some(version) = rt.config.serves_version() {
            // Its later visits here come back to this version.
            if !envelope.versions.contains_key(rt.config.agent.as_str()) {
                (envelope.versions).insert(rt.config.agent.clone(), version.clone());
            }
        }
        if rt.cancelled.contains(envelope.session) {
            tracing::info!(session = %envelope.session, "session cancelled; dropped unrun");
            return rt.outbox.discard(&delivery).await;
        }
        record_envelope(&span, &envelope);
        // 2. Refuse what must not run.
        if let Some(plan) = Box::pin(refuse(rt, &envelope)).await {
            return rt.outbox.execute(&delivery, plan).await;
        }
        // A root task's check that its session has not ended rides on its first write.
        delivery.open(&config.subjects, &envelope);
        if envelope.kind == Kind::Result {
            // 8. A child's result for one of this agent type's delegations.
            Box::pin(on_result(rt, agent, &delivery, &envelope)).await;
        } else {
            // 3 to 7. Boxed, like the handler: the run's future is large.
            Box::pin(process(rt, agent, &delivery, envelope)).await;
        }
    }
    .instrument(span.clone())
    .await;
}

tokio::task_local! {
    /// The `gen_ai.conversation.id` of the hop whose agent runs.
    static CONVERSATION: String;
}

/// The conversation the agent that runs now works in, for its spans'
/// `gen_ai.conversation.id` (a turn's conversation; a one-shot task's
/// session): `None` outside an agent's run.
#[must_use]
pub fn conversation_id() -> Option<String> {
    CONVERSATION.try_with(Clone::clone).ok()
}

/// What `gen_ai.conversation.id` is for `envelope`: its conversation's id
/// for a turn, its session for a one-shot task.
fn conversation_of(envelope: &Envelope) -> String {
    match &envelope.conversation {
        Some(turn) => turn.id.clone(),
        None => envelope.session.to_string(),
    }
}

/// The span of one hop, exported as `invoke_agent {agent}` with the
/// OpenTelemetry GenAI attributes and Baton's own
/// (`crate::metrics::record_outcome` adds the outcome, and the
/// status and error type of a failure).
fn hop_span(config: &WorkerConfig) -> tracing::Span {
    let empty = tracing::field::Empty;
    let span = tracing::info_span!(
        "baton.handle",
        agent = %config.agent,
        instance = %config.instance,
        attempt = empty,
        session = empty,
        envelope = empty,
        otel.name = %format_args!("invoke_agent {}", config.agent),
        otel.status_code = empty,
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = %config.agent,
        gen_ai.agent.version = empty,
        gen_ai.conversation.id = empty,
        baton.hop = empty,
        baton.reason = empty,
        baton.path.length = empty,
        baton.outcome = empty,
        error.type = empty,
    );
    if let Some(version) = &config.version {
        span.record("gen_ai.agent.version", version.as_str());
    }
    span
}

/// Records what the hop span says of `envelope`.
fn record_envelope(span: &tracing::Span, envelope: &Envelope) {
    span.record("session", tracing::field::display(envelope.session));
    // A conversation's turn is of that conversation; a one-shot task is its
    // own session's.
    span.record("gen_ai.conversation.id", conversation_of(envelope));
    span.record("envelope", tracing::field::display(envelope.id));
    let path = u64::try_from(envelope.path.len()).unwrap_or(u64::MAX);
    span.record("baton.path.length", path);
    span.record("baton.hop", path.saturating_add(1));
    if let Some(reason) = &envelope.reason {
        span.record("baton.reason", reason.as_str());
    }
}

/// Step 1: the envelope of a delivery, its claims restored. `None` when it
/// was dead-lettered, or left for redelivery because the claim-check store
/// is unreachable.
async fn decode(rt: &Runtime, delivery: &Delivery<'_>) -> Option<Envelope> {
    let config = &rt.config;
    let payload = &delivery.message.payload;
    let envelope = match Envelope::from_msgpack_limited(payload, config.max_payload) {
        Ok(envelope) => envelope,
        Err(err) => {
            Box::pin(rt.outbox.unreadable(delivery, &err.reason(), err.detail())).await;
            return None;
        }
    };
    if envelope.claims.is_empty() {
        return Some(envelope);
    }
    let restored = match Box::pin(rt.claims.check_in(payload)).await {
        Ok(restored) => restored,
        Err(ClaimFailure::Permanent(detail)) => {
            Box::pin(
                rt.outbox
                    .unreadable(delivery, &DeadLetterReason::ClaimMissing, &detail),
            )
            .await;
            return None;
        }
        Err(ClaimFailure::Transient(err)) => {
            tracing::warn!(error = %err, "claim-check store unavailable");
            rt.outbox.leave(delivery).await;
            return None;
        }
    };
    rt.metrics
        .claims("restored", restored.len().saturating_sub(payload.len()));
    match Envelope::from_msgpack_limited(&restored, rt.claims.max_restored()) {
        Ok(envelope) => Some(envelope),
        Err(err) => {
            Box::pin(rt.outbox.unreadable(delivery, &err.reason(), err.detail())).await;
            None
        }
    }
}

/// Puts the messages of a turn's transcript that `envelope`'s context
/// refers to before its own; `false` when they cannot be read (the message
/// is then dead-lettered, or left for redelivery).
async fn restore_history(rt: &Runtime, delivery: &Delivery<'_>, envelope: &mut Envelope) -> bool {
    let Some(history) = &envelope.context.history else {
        return true;
    };
    match rt.transcripts.prefix(history).await {
        Ok(prefix) => {
            envelope.context.expand(prefix);
            true
        }
        Err(err) if err.kind() == ErrorKind::Broken => {
            let reason = &DeadLetterReason::ClaimMissing;
            Box::pin(rt.outbox.unreadable(delivery, reason, &err.to_string())).await;
            false
        }
        Err(err) => {
            tracing::warn!(error = %err, "cannot read the conversation's transcript");
            rt.outbox.leave(delivery).await;
            false
        }
    }
}

/// Step 2: the plan for an envelope that must not reach the agent: its
/// deadline passed, or its parent is invalid or has no workers.
async fn refuse(rt: &Runtime, envelope: &Envelope) -> Option<Plan> {
    if let Some(mut plan) = rt.planner().refuse(envelope, now_ms()) {
        tracing::info!("refused before running the agent");
        if Box::pin(ended_at_deadline(rt, envelope)).await {
            // The deadline watch ended the session already: only the
            // dead letter is left to write.
            plan.outputs
                .retain(|output| !matches!(output, Output::Event(_)));
        }
        return Some(plan);
    }
    let plan = Box::pin(orphan(rt, envelope)).await?;
    tracing::info!("refused: the parent's agent type has no workers");
    Some(plan)
}

/// Whether `envelope` is a session's root whose deadline passed and whose
/// session has ended already (the router's deadline watch failed it).
async fn ended_at_deadline(rt: &Runtime, envelope: &Envelope) -> bool {
    if envelope.parent.is_some() || envelope.deadline.is_none_or(|d| now_ms() <= d) {
        return false;
    }
    let jetstream = rt.jetstream();
    match baton_nats::state::session::last_event(jetstream, &rt.config.subjects, envelope.session)
        .await
    {
        Ok(Some(last)) => last.kind.is_terminal(),
        Ok(None) => false,
        Err(err) => {
            tracing::warn!(error = %err, "cannot tell whether the session ended");
            false
        }
    }
}

/// A delegated child whose parent's agent type no worker serves: its result
/// could never be received, so it ends now, as its session's failure.
async fn orphan(rt: &Runtime, envelope: &Envelope) -> Option<Plan> {
    let parent = envelope.parent.as_ref()?;
    let agent = baton_proto::AgentName::new(parent.agent.as_str()).ok()?;
    if agent == rt.config.agent {
        return None;
    }
    let why = rt.served.check(&agent).await.err()?;
    let mut orphan = envelope.clone();
    orphan.parent = None;
    let detail = format!("the delegating agent cannot receive the result: {why}");
    Some(rt.planner().no_route(&orphan, &detail))
}

/// Steps 3 to 7 for a task, handoff or delegated child.
async fn process<A: Agent>(rt: &Runtime, agent: &A, delivery: &Delivery<'_>, envelope: Envelope) {
    // A team member confirms an asynchronous assignment before it works on it.
    if let Some(progress) = rt.planner().progress(&envelope) {
        if !rt.outbox.publish(delivery, &[progress]).await {
            return;
        }
    }
    // 3. Accept. The event is sent once the run has lasted `accepted_after`
    // (at the `full` level stored, its PubAck awaited with the outputs, so no
    // extra round trip; at `lean` live, unstored), or else folded into the
    // hop's next event, one message instead of two.
    let accepted = rt.planner().accepted(&envelope, delivery.attempt);
    let after = rt.config.accepted_after;
    let mut accepted = rt.outbox.accepting(delivery, accepted, after).await;
    // The agent shares the envelope: it is copied only if the agent changes
    // it, and comes back whole once the run is over.
    let shared = baton_author::Shared::new(envelope);
    let task = rt.task(shared.clone(), delivery);
    let spending = task.progress.clone();
    let (deadline, session, hop) = (shared.deadline, shared.session, shared.id);
    let started = std::time::Instant::now();
    // The agent's own spans (model and tool calls) name the conversation.
    let run = CONVERSATION.scope(conversation_of(&shared), agent.handle(task));
    let run = with_progress(rt.pace, delivery, run, "agent", deadline);
    // A cancel stops the run: its future is dropped (an exec program with it).
    let result = tokio::select! {
        result = rt.outbox.during(&mut accepted, delivery, after, run) => result,
        () = rt.cancelled.wait(session) => {
            tracing::info!(%session, "session cancelled; run stopped");
            return rt.outbox.discard(delivery).await;
        }
    };
    let mut envelope = shared.into_inner();
    rt.metrics.ran(started.elapsed(), result.is_ok());
    if let Err(err) = &result {
        tracing::info!(error = %err, "agent failed");
    }
    // The task as it arrived, for a replayable session's `started` event:
    // read before the plan moves the context on.
    let started = rt.planner().started(&envelope);
    // 4, 5 and 7; a run past the session's deadline ends it, whatever it decided.
    let plan = match rt.planner().overran(&envelope, now_ms()) {
        Some(plan) => Some(plan),
        None => {
            decide(
                rt,
                agent,
                delivery,
                &mut envelope,
                result,
                spending.spending(),
            )
            .await
        }
    };
    let Some(mut plan) = plan else {
        // Left for redelivery: the attempt still counts as accepted.
        rt.outbox.accepted_anyway(accepted, delivery).await;
        crate::reporter::send_steps(&spending, spending.held_steps()).await;
        return rt.outbox.leave(delivery).await;
    };
    if rt.cancelled.contains(envelope.session) {
        tracing::info!(session = %envelope.session, "session cancelled; outputs dropped");
        return rt.outbox.discard(delivery).await;
    }
    usage::stamp(&mut plan.outputs, &envelope, spending.spending());
    if let Some(started) = started {
        plan.outputs.insert(0, started);
    }
    crate::reporter::fold_steps(&spending, &mut plan.outputs, hop).await;
    if !rt
        .outbox
        .accepted_before(accepted, delivery, &plan.outputs)
        .await
    {
        return rt.outbox.leave(delivery).await;
    }
    // 6.
    rt.outbox.execute(delivery, plan).await;
}

/// Steps 4 and 7: the plan for what the agent returned on `envelope`. A
/// delegation starts its join; anything else goes through the routing rules,
/// the registry if it needs to, and the planner, which moves `envelope`'s
/// context on. `None` leaves the message for redelivery.
async fn decide<A: Agent>(
    rt: &Runtime,
    agent: &A,
    delivery: &Delivery<'_>,
    envelope: &mut Envelope,
    result: Result<Outcome, AgentError>,
    spent: Usage,
) -> Option<Plan> {
    let result = match result.map(|outcome| Routing::decide(agent.routing(), envelope, outcome)) {
        Ok(Decided::Delegate(delegation)) => {
            return match Box::pin(join::start(rt, envelope, delegation, spent)).await {
                Ok(plan) => Some(plan),
                Err(err) => {
                    tracing::error!(error = %err, "cannot start the delegation");
                    None
                }
            };
        }
        Ok(Decided::Step(step)) => Ok(step),
        Err(err) => Err(err),
    };
    let planner = rt.planner();
    let found = match (planner.lookup_request(envelope, &result), &result) {
        (Some(request), _) => Box::pin(rt.lookup(&request)).await,
        (None, Ok(Step::Handoff(handoff))) => match &handoff.target {
            Target::Agent(to) => match rt.served.check(to).await {
                Ok(()) => Lookup::NotAsked,
                Err(why) => Lookup::Nobody(why.to_string()),
            },
            _ => Lookup::NotAsked,
        },
        (None, _) => Lookup::NotAsked,
    };
    Some(planner.plan(envelope, delivery.attempt, result, found))
}

/// A child's `result` for a delegation of this agent type: record it in the
/// join, and run the continuation if it completed the join.
async fn on_result<A: Agent>(
    rt: &Runtime,
    agent: &A,
    delivery: &Delivery<'_>,
    envelope: &Envelope,
) {
    let received = match join::on_result(rt, envelope).await {
        Ok(received) => received,
        Err(err) => {
            tracing::error!(error = %err, "cannot record a result");
            return rt.outbox.leave(delivery).await;
        }
    };
    let (outputs, task, results, claimed) = match received {
        Received::Plan(plan) => return rt.outbox.execute(delivery, plan).await,
        Received::Later(delay) => return rt.outbox.later(delivery, delay).await,
        Received::Continue {
            outputs,
            task,
            results,
            claimed,
        } => (outputs, task, results, claimed),
    };
    // The result is on record (and says so) before the continuation runs,
    // however long that takes.
    if !rt.outbox.publish(delivery, &outputs).await {
        return;
    }
    let all_in = results.all_in();
    let continued = task.envelope.clone();
    // A join that waited until the session's deadline ends the session.
    if let Some(plan) = rt.planner().overran(&continued, now_ms()) {
        return rt.outbox.execute(delivery, plan).await;
    }
    let spending = task.progress.clone();
    let join_id = envelope.parent.as_ref().map(|p| p.id).unwrap_or_default();
    let resumed = with_progress(
        rt.pace,
        delivery,
        agent.resume(*task, results),
        "the continuation",
        continued.deadline,
    )
    .await;
    // A continuation's steps are sent on their own.
    crate::reporter::send_steps(&spending, spending.held_steps()).await;
    let resumed = match resumed {
        // An async report that keeps waiting: what it spent and said counts.
        Ok(Outcome::Wait(wait)) if !claimed => {
            let spent = spending.spending();
            let update = &wait.update;
            if let Err(err) = join::note_wait(rt, join_id, envelope.id, spent, update).await {
                tracing::error!(error = %err, "cannot note what a report spent");
                return rt.outbox.leave(delivery).await;
            }
            return rt.outbox.discard(delivery).await;
        }
        Ok(Outcome::Wait(wait)) if all_in && !wait.parked => Err(AgentError::fatal(
            "every child answered and the continuation still waits: return an outcome from resume",
        )),
        other => other,
    };
    let mut continued = continued;
    if !claimed {
        match join::claim(rt, join_id, envelope.id).await {
            // What reports that kept waiting meanwhile spent counts too.
            Ok(Some(usage)) => continued.usage = usage,
            // Another report ended the join first.
            Ok(None) => return rt.outbox.discard(delivery).await,
            Err(err) => {
                tracing::error!(error = %err, "cannot claim the join");
                return rt.outbox.leave(delivery).await;
            }
        }
    }
    let spent = spending.spending();
    conclude(rt, agent, delivery, &mut continued, resumed, spent).await;
}

/// Steps 4 to 7 after a continuation: its plan carried out, or the message
/// left for redelivery when it cannot be made.
async fn conclude<A: Agent>(
    rt: &Runtime,
    agent: &A,
    delivery: &Delivery<'_>,
    continued: &mut Envelope,
    resumed: Result<Outcome, AgentError>,
    spent: Usage,
) {
    match decide(rt, agent, delivery, continued, resumed, spent).await {
        Some(mut plan) => {
            usage::stamp(&mut plan.outputs, continued, spent);
            rt.outbox.execute(delivery, plan).await;
        }
        None => rt.outbox.leave(delivery).await,
    }
}
