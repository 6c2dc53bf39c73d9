//! The worker loop: for each message pulled from `agent-<A>`,
//!
//! 1. **decode** it ([`Delivery`], dead-lettering what cannot be read);
//! 2. **refuse** what must not run: a passed deadline, an invalid parent ([`crate::worker::plan`]);
//! 3. **accept** it and **run** the agent with progress ([`crate::worker::run`]);
//! 4. **route** the outcome through the rules ([`crate::author::routing`]), the
//!    registry ([`Runtime::lookup`]) and the planner, or start a delegation
//!    ([`crate::worker::join`]);
//! 5. **guard** against loops ([`crate::worker::guard`], inside the planner);
//! 6. **publish, then ack** ([`Runtime::execute`]);
//! 7. **handle failure**: retries, dead letters and escalations are plans too.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream;
use baton_proto::{DeadLetterReason, Envelope, Kind, Subjects, Wire, now_ms};
use tracing::Instrument;

use crate::author::agent::Agent;
use crate::author::outcome::{AgentError, Outcome};
use crate::author::routing::{Decided, Routing, Step};
use crate::author::target::Target;
use crate::error::{Error, ErrorKind};
use crate::nats::claimcheck::ClaimFailure;
use crate::nats::connection::{Connection, Permissions};
use crate::nats::provision;
use crate::nats::publish::Publisher;
use crate::worker::accept::Accepting;
use crate::worker::advisory;
use crate::worker::config::{WorkerConfig, WorkerStats};
use crate::worker::delivery::Delivery;
use crate::worker::intake::{self, IntakeSettings, Source};
use crate::worker::join::{self, Received};
use crate::worker::plan::{Output, Plan, Settle};
use crate::worker::registry::{RegistryClient, spawn_heartbeats};
use crate::worker::run::with_progress;
use crate::worker::runtime::{AgentPolicy, Runtime};

/// A pool member of one agent type: pulls from `agent-<A>` and runs the agent.
pub struct Worker<A> {
    client: async_nats::Client,
    permissions: Permissions,
    config: WorkerConfig,
    agent: Arc<A>,
    stats: Arc<WorkerStats>,
}

impl<A: Agent> Worker<A> {
    /// A worker of `agent` on `connection` (a [`Connection`], or a plain
    /// `async_nats::Client`).
    pub fn new(connection: impl Into<Connection>, config: WorkerConfig, agent: A) -> Self {
        let connection = connection.into();
        Self {
            client: connection.client().clone(),
            permissions: connection.permissions().clone(),
            config,
            agent: Arc::new(agent),
            stats: Arc::default(),
        }
    }

    /// The worker's live counters.
    #[must_use]
    pub fn stats(&self) -> Arc<WorkerStats> {
        self.stats.clone()
    }

    /// Provisions the streams and the consumer, then serves until `shutdown`
    /// resolves; in-flight work finishes within the grace period.
    ///
    /// # Errors
    ///
    /// Only for start-up problems (JetStream unreachable, a mismatched stream
    /// or consumer). Per-message failures are logged and never end the loop.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), Error> {
        let jetstream = jetstream::new(self.client.clone());
        let config = self.config;
        let attempts = self.agent.retry_policy().max_attempts;
        if attempts >= config.max_deliveries {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "the agent's max_attempts ({attempts}) must be below max_deliveries ({}): \
                     lower the attempts or raise --max-deliveries",
                    config.max_deliveries
                ),
            ));
        }
        let publisher = Publisher::new(jetstream.clone(), self.permissions);
        check_rights(&publisher, &config).await?;
        provision::provision(&publisher, &config.subjects, &config.streams).await?;
        let max_deliver = advisory::max_deliver(config.max_deliveries);
        let mut consumer = provision::agent_consumer(
            &jetstream,
            &config.subjects,
            &config.agent,
            config.ack_wait,
            max_deliver,
        )
        .await?;
        let ack_wait = consumer
            .info()
            .await
            .map_or(config.ack_wait, |info| info.config.ack_wait);
        provision::cover_redeliveries(
            &publisher,
            &config.subjects,
            &Subjects::agent_consumer(&config.agent),
            provision::redelivery_span(ack_wait, max_deliver).unwrap_or(ack_wait),
        )
        .await;
        let settings = IntakeSettings {
            concurrency: self.agent.concurrency(),
            pull_expires: config.pull_expires,
            shutdown_grace: config.shutdown_grace,
        };
        let heartbeats = spawn_heartbeats(
            self.client.clone(),
            &config,
            settings.concurrency,
            self.stats.clone(),
        );
        let registry = config.use_registry.then(|| {
            RegistryClient::new(self.client.clone(), &config.subjects)
                .with_budget(config.lookup_budget)
                .with_memory(config.registry_memory)
        });
        tracing::info!(agent = %config.agent, instance = %config.instance, concurrency = settings.concurrency, ?ack_wait, "worker started");
        let policy = AgentPolicy {
            retry: self.agent.retry_policy(),
            timeout: self.agent.timeout(),
            ack_wait,
            concurrency: settings.concurrency,
        };
        let server_max_payload = self.client.server_info().max_payload;
        let rt = Runtime::new(
            config,
            publisher,
            registry,
            self.stats,
            policy,
            server_max_payload,
        );
        let cancels = crate::worker::cancel::watch(
            jetstream.clone(),
            rt.config.subjects.clone(),
            rt.config.streams.replicas,
            rt.cancelled.clone(),
            Duration::from_secs(5),
        )
        .await;
        let rt = Arc::new(rt);
        let source = Source {
            client: self.client.clone(),
            jetstream,
            stream: rt.config.subjects.tasks_stream(),
            consumer: Subjects::agent_consumer(&rt.config.agent),
        };
        let net = advisory::Net {
            client: self.client.clone(),
            publisher: rt.publisher.clone(),
            subjects: rt.config.subjects.clone(),
            stream: source.stream.clone(),
            consumer: source.consumer.clone(),
            agent: rt.config.agent.clone(),
            metrics: Some(rt.metrics.clone()),
        }
        .spawn()
        .await?;
        let agent = self.agent;
        crate::health::set_serving(true);
        let shutdown = crate::health::draining(shutdown);
        intake::serve(source, settings, shutdown, |message| {
            let rt = rt.clone();
            let agent = agent.clone();
            async move {
                rt.stats.in_flight.fetch_add(1, Ordering::Relaxed);
                // Boxed: the handler's future is large, and a task moves its future on spawn.
                Box::pin(handle(&rt, agent.as_ref(), message)).await;
                rt.stats.in_flight.fetch_sub(1, Ordering::Relaxed);
            }
        })
        .await;
        heartbeats.abort();
        net.abort();
        cancels.abort();
        tracing::info!(agent = %rt.config.agent, "worker stopped");
        Ok(())
    }
}

/// Fails the start of a worker whose NATS user may not pull its tasks,
/// write events or dead-letter, as far as the server reports its rights.
async fn check_rights(publisher: &Publisher, config: &WorkerConfig) -> Result<(), Error> {
    let subjects = &config.subjects;
    let pull = format!(
        "$JS.API.CONSUMER.MSG.NEXT.{}.{}",
        subjects.tasks_stream(),
        Subjects::agent_consumer(&config.agent)
    );
    let needed = [
        ("pull its agent type's tasks", pull),
        ("write session events", subjects.events(uuid::Uuid::nil())),
        ("dead-letter", subjects.dlq(&config.agent)),
    ];
    let role = format!("worker {}", config.agent);
    publisher.check_rights(&needed, &role).await
}

/// Handles one message, from decoding to settling.
async fn handle<A: Agent>(rt: &Runtime, agent: &A, message: jetstream::Message) {
    let config = &rt.config;
    // Exported as `invoke_agent {agent}`, with the OpenTelemetry GenAI
    // attributes and Baton's own (`crate::worker::metrics::record_outcome` adds the
    // outcome, and the status and error type of a failure).
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
        gen_ai.conversation.id = empty,
        baton.hop = empty,
        baton.reason = empty,
        baton.path.length = empty,
        baton.outcome = empty,
        error.type = empty,
    );
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
            return Box::pin(rt.unreadable(&delivery, &DeadLetterReason::MaxDeliveries, &detail))
                .await;
        }
        // 1. Decode, with the claim-checked parts restored.
        let Some(envelope) = decode(rt, &delivery).await else {
            return;
        };
        if rt.cancelled.contains(envelope.session) {
            tracing::info!(session = %envelope.session, "session cancelled; dropped unrun");
            return rt.execute(&delivery, Plan::ack(Vec::new())).await;
        }
        span.record("session", tracing::field::display(envelope.session));
        span.record("gen_ai.conversation.id", tracing::field::display(envelope.session));
        span.record("envelope", tracing::field::display(envelope.id));
        let path = u64::try_from(envelope.path.len()).unwrap_or(u64::MAX);
        span.record("baton.path.length", path);
        span.record("baton.hop", path.saturating_add(1));
        if let Some(reason) = &envelope.reason {
            span.record("baton.reason", reason.as_str());
        }
        // 2. Refuse what must not run.
        if let Some(mut plan) = rt.planner().refuse(&envelope, now_ms()) {
            tracing::info!("refused before running the agent");
            if Box::pin(ended_at_deadline(rt, &envelope)).await {
                // The deadline watch ended the session already: only the
                // dead letter is left to write.
                plan.outputs
                    .retain(|output| !matches!(output, Output::Event(_)));
            }
            return rt.execute(&delivery, plan).await;
        }
        let orphaned = match envelope.parent {
            Some(_) => Box::pin(orphan(rt, &envelope)).await,
            None => None,
        };
        if let Some(plan) = orphaned {
            tracing::info!("refused: the parent's agent type has no workers");
            return rt.execute(&delivery, plan).await;
        }
        if envelope.kind == Kind::Result {
            Box::pin(on_result(rt, agent, &delivery, &envelope)).await;
        } else {
            // Boxed, like the handler: the run's future is large.
            Box::pin(process(rt, agent, &delivery, envelope)).await;
        }
    }
    .instrument(span.clone())
    .await;
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
            Box::pin(rt.unreadable(delivery, &err.reason(), err.detail())).await;
            return None;
        }
    };
    if envelope.claims.is_empty() {
        return Some(envelope);
    }
    let restored = match Box::pin(rt.claims.check_in(payload)).await {
        Ok(restored) => restored,
        Err(ClaimFailure::Permanent(detail)) => {
            Box::pin(rt.unreadable(delivery, &DeadLetterReason::ClaimMissing, &detail)).await;
            return None;
        }
        Err(ClaimFailure::Transient(err)) => {
            tracing::warn!(error = %err, "claim-check store unavailable; leaving the message for redelivery");
            return None;
        }
    };
    rt.metrics
        .claims("restored", restored.len().saturating_sub(payload.len()));
    match Envelope::from_msgpack_limited(&restored, rt.claims.max_restored()) {
        Ok(envelope) => Some(envelope),
        Err(err) => {
            Box::pin(rt.unreadable(delivery, &err.reason(), err.detail())).await;
            None
        }
    }
}

/// Whether `envelope` is a session's root whose deadline passed and whose
/// session has ended already (the router's deadline watch failed it).
async fn ended_at_deadline(rt: &Runtime, envelope: &Envelope) -> bool {
    if envelope.parent.is_some() || envelope.deadline.is_none_or(|d| now_ms() <= d) {
        return false;
    }
    let jetstream = rt.publisher.jetstream();
    match crate::nats::ending::last_event(jetstream, &rt.config.subjects, envelope.session).await {
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
    // 3. Accept. The event is sent once the run has lasted `accepted_after`
    // (at the `full` level stored, its PubAck awaited with the outputs, so no
    // extra round trip; at `lean` live, unstored), or else folded into the
    // hop's next event, one message instead of two.
    let accepted = rt.planner().accepted(&envelope, delivery.attempt);
    let mut accepted = Accepting::new(rt, delivery, accepted).await;
    let task = rt.task(envelope.clone(), delivery.attempt, delivery.headers());
    let deadline = envelope.deadline;
    let started = std::time::Instant::now();
    let run = with_progress(rt.pace, delivery, agent.handle(task), "agent", deadline);
    // A cancel stops the run: its future is dropped (an exec program with it).
    let result = tokio::select! {
        result = accepted.during(rt, delivery, run) => result,
        () = rt.cancelled.wait(envelope.session) => {
            tracing::info!(session = %envelope.session, "session cancelled; run stopped");
            return rt.execute(delivery, Plan::ack(Vec::new())).await;
        }
    };
    rt.metrics.ran(started.elapsed(), result.is_ok());
    match &result {
        Ok(_) => tracing::debug!("agent finished"),
        Err(err) => tracing::info!(error = %err, "agent failed"),
    }
    // 4, 5 and 7; a run that overran the session's deadline ends it, whatever
    // the agent decided.
    let plan = match rt.planner().overran(&envelope, now_ms()) {
        Some(plan) => Some(plan),
        None => decide(rt, agent, delivery, &envelope, result).await,
    };
    let Some(plan) = plan else {
        // Left for redelivery: the attempt still counts as accepted.
        accepted.store(rt, delivery).await;
        return;
    };
    if rt.cancelled.contains(envelope.session) {
        tracing::info!(session = %envelope.session, "session cancelled; outputs dropped");
        return rt.execute(delivery, Plan::ack(Vec::new())).await;
    }
    if !accepted.finish(rt, delivery, &plan.outputs).await {
        return;
    }
    // 6.
    rt.execute(delivery, plan).await;
}

/// Steps 4 and 7: the plan for what the agent returned on `envelope`. A
/// delegation starts its join; anything else goes through the routing rules,
/// the registry if it needs to, and the planner. `None` leaves the message
/// for redelivery.
async fn decide<A: Agent>(
    rt: &Runtime,
    agent: &A,
    delivery: &Delivery<'_>,
    envelope: &Envelope,
    result: Result<Outcome, AgentError>,
) -> Option<Plan> {
    let result = match result.map(|outcome| Routing::decide(agent.routing(), envelope, outcome)) {
        Ok(Decided::Delegate(delegation)) => {
            return match Box::pin(join::start(rt, envelope, delegation)).await {
                Ok(plan) => Some(plan),
                Err(err) => {
                    tracing::error!(error = %err, "cannot start the delegation; leaving the message for redelivery");
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
            Target::Agent(to) => rt.served.check(to).await.err().map(Err),
            _ => None,
        },
        (None, _) => None,
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
            tracing::error!(error = %err, "cannot record a result; leaving it for redelivery");
            return;
        }
    };
    let (outputs, task, results, claimed) = match received {
        Received::Plan(plan) => return rt.execute(delivery, plan).await,
        Received::Later(delay) => return delivery.settle(Settle::Nak(delay)).await,
        Received::Continue {
            outputs,
            task,
            results,
            claimed,
        } => (outputs, task, results, claimed),
    };
    // The result is on record (and says so) before the continuation runs,
    // however long that takes.
    if !rt.publish(delivery, &outputs).await {
        return;
    }
    let all_in = results.all_in();
    let continued = task.envelope.clone();
    // A join that waited until the session's deadline ends the session.
    if let Some(plan) = rt.planner().overran(&continued, now_ms()) {
        return rt.execute(delivery, plan).await;
    }
    let resumed = with_progress(
        rt.pace,
        delivery,
        agent.resume(*task, results),
        "the continuation",
        continued.deadline,
    )
    .await;
    let resumed = match resumed {
        // An async report that keeps waiting.
        Ok(Outcome::Wait(_)) if !claimed => {
            return rt.execute(delivery, Plan::ack(Vec::new())).await;
        }
        Ok(Outcome::Wait(_)) if all_in => Err(AgentError::fatal(
            "every child answered and the continuation still waits: return an outcome from resume",
        )),
        other => other,
    };
    if !claimed {
        let join_id = envelope.parent.as_ref().map(|p| p.id).unwrap_or_default();
        match join::claim(rt, join_id, envelope.id).await {
            Ok(true) => {}
            // Another report ended the join first.
            Ok(false) => return rt.execute(delivery, Plan::ack(Vec::new())).await,
            Err(err) => {
                tracing::error!(error = %err, "cannot claim the join; leaving the result for redelivery");
                return;
            }
        }
    }
    if let Some(plan) = decide(rt, agent, delivery, &continued, resumed).await {
        rt.execute(delivery, plan).await;
    }
}
