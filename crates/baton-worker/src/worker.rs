//! The worker loop of DESIGN.md: decode, check the deadline, accept, run the
//! agent with progress, route the outcome, publish, then ack.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use baton_proto::{AgentName, DeadLetterReason, Envelope, Subjects, Wire, now_ms};
use tracing::Instrument;

use crate::agent::{Agent, AgentError, Task};
use crate::config::{WorkerConfig, WorkerStats};
use crate::error::Error;
use crate::intake::{self, IntakeSettings, Source};
use crate::join::{self, Handled, Joins, Started};
use crate::outputs::{Emitter, settle};
use crate::plan::{Planner, Settle};
use crate::provision;
use crate::publish::{Outgoing, Publisher};
use crate::registry::{RegistryClient, spawn_heartbeats};
use crate::trace;

/// A pool member of one agent type: pulls from `agent-<A>` and runs the agent.
pub struct Worker<A> {
    client: async_nats::Client,
    config: WorkerConfig,
    agent: Arc<A>,
    stats: Arc<WorkerStats>,
}

pub(crate) struct Shared<A> {
    pub(crate) config: WorkerConfig,
    pub(crate) agent: Arc<A>,
    pub(crate) publisher: Publisher,
    pub(crate) registry: Option<RegistryClient>,
    pub(crate) stats: Arc<WorkerStats>,
    pub(crate) progress_every: Duration,
    /// The delegation bucket, opened on first use.
    joins: tokio::sync::OnceCell<Joins>,
}

impl<A> Shared<A> {
    /// The join bucket, opened (and created if missing) on first use.
    pub(crate) async fn joins(&self) -> Result<&Joins, Error> {
        self.joins
            .get_or_try_init(|| async {
                let bucket = self.config.subjects.joins_bucket();
                Joins::open(self.publisher.jetstream(), &bucket).await
            })
            .await
    }
}

impl<A: Agent> Worker<A> {
    /// A worker of `agent` on `client`.
    pub fn new(client: async_nats::Client, config: WorkerConfig, agent: A) -> Self {
        Self {
            client,
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
        provision::provision(&jetstream, &config.subjects, &config.streams).await?;
        let mut consumer =
            provision::agent_consumer(&jetstream, &config.subjects, &config.agent, config.ack_wait)
                .await?;
        let ack_wait = consumer
            .info()
            .await
            .map_or(config.ack_wait, |info| info.config.ack_wait);
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
        });
        tracing::info!(agent = %config.agent, instance = %config.instance, concurrency = settings.concurrency, ?ack_wait, "worker started");
        let shared = Arc::new(Shared {
            config,
            agent: self.agent,
            publisher: Publisher::new(jetstream),
            registry,
            stats: self.stats,
            progress_every: (ack_wait / 3).max(Duration::from_millis(100)),
            joins: tokio::sync::OnceCell::new(),
        });
        let source = Source {
            client: self.client.clone(),
            jetstream: shared.publisher.jetstream().clone(),
            stream: shared.config.subjects.tasks_stream(),
            consumer: Subjects::agent_consumer(&shared.config.agent),
        };
        intake::serve(source, settings, shutdown, |message| {
            let shared = shared.clone();
            async move {
                shared.stats.in_flight.fetch_add(1, Ordering::Relaxed);
                // Boxed: the handler's future is large, and a task moves its future on spawn.
                Box::pin(handle(&shared, message)).await;
                shared.stats.in_flight.fetch_sub(1, Ordering::Relaxed);
            }
        })
        .await;
        heartbeats.abort();
        tracing::info!(agent = %shared.config.agent, "worker stopped");
        Ok(())
    }
}

async fn handle<A: Agent>(shared: &Shared<A>, message: jetstream::Message) {
    let config = &shared.config;
    let attempt = message.info().map_or(1, |info| {
        u32::try_from(info.delivered).unwrap_or(u32::MAX).max(1)
    });
    let parent = trace::extract(message.headers.as_ref());
    let span = tracing::info_span!(
        "baton.handle",
        agent = %config.agent,
        instance = %config.instance,
        attempt,
        session = tracing::field::Empty,
        envelope = tracing::field::Empty,
    );
    trace::adopt(&span, &parent);
    let emitter = Emitter {
        subjects: &config.subjects,
        agent: &config.agent,
        span: &span,
        parent: &parent,
    };

    let envelope = match Envelope::from_msgpack_limited(&message.payload, config.max_payload) {
        Ok(envelope) => envelope,
        Err(err) => {
            let _enter = span.enter();
            tracing::warn!(subject = %message.subject, reason = %err.reason(), detail = err.detail(), "undecodable message; dead-lettering");
            drop(_enter);
            let outgoing = emitter.undecodable(&message, &err.reason(), err.detail());
            finish(shared, &message, &outgoing, Settle::Term, true)
                .instrument(span.clone())
                .await;
            return;
        }
    };
    span.record("session", tracing::field::display(envelope.session));
    span.record("envelope", tracing::field::display(envelope.id));
    if envelope.kind == baton_proto::Kind::Result {
        on_result(shared, &message, &envelope, attempt, &emitter)
            .instrument(span.clone())
            .await;
        return;
    }
    process(shared, message, envelope, attempt, &emitter)
        .instrument(span.clone())
        .await;
}

async fn process<A: Agent>(
    shared: &Shared<A>,
    message: jetstream::Message,
    envelope: Envelope,
    attempt: u32,
    emitter: &Emitter<'_>,
) {
    let config = &shared.config;
    let retry = shared.agent.retry_policy();
    let planner = Planner {
        agent: &config.agent,
        instance: &config.instance,
        fallback: config.fallback.as_ref(),
        retry,
        tier: config.profile.tier,
    };

    if let Some(plan) = planner.deadline_exceeded(&envelope, now_ms()) {
        tracing::info!("deadline exceeded; failing the session");
        publish_plan(
            shared,
            &message,
            emitter,
            &plan.outputs,
            plan.settle,
            plan.failed,
        )
        .await;
        return;
    }

    // The accepted event is sent now but its PubAck is awaited with the
    // outputs, so accepting costs no extra round trip.
    let mut early = Vec::new();
    match emitter.event(&planner.accepted(&envelope, attempt)) {
        Ok(accepted) => early.push(accepted),
        Err(err) => tracing::warn!(error = %err, "cannot encode accepted event"),
    }
    let pending_accept = match early.first() {
        Some(accepted) => Some(shared.publisher.send(accepted).await),
        None => None,
    };

    let task = Task {
        envelope: envelope.clone(),
        attempt,
        agent: config.agent.clone(),
        instance: config.instance.clone(),
    };
    let result = run_agent(shared, &message, task).await;
    match &result {
        Ok(_) => tracing::debug!("agent finished"),
        Err(err) => tracing::info!(error = %err, "agent failed"),
    }
    let Some((outgoing, settle_with, failed)) = outcome_outputs(
        shared, &message, &planner, &envelope, attempt, result, emitter,
    )
    .await
    else {
        return;
    };
    if let Some(pending) = pending_accept {
        if pending.wait().await.is_err() {
            // Publish it again (same id) before the outputs, keeping the order.
            if let Err(err) = shared.publisher.publish_one(&early[0]).await {
                tracing::error!(error = %err, "accepted event not durable; leaving the message for redelivery");
                return;
            }
        }
    }
    finish(shared, &message, &outgoing, settle_with, failed).await;
}

/// The messages an agent's result leads to, and how to settle the delivery:
/// a delegation starts its join; anything else is looked up in the registry
/// if it needs to be, then planned. `None` leaves the message for redelivery.
async fn outcome_outputs<A: Agent>(
    shared: &Shared<A>,
    message: &jetstream::Message,
    planner: &Planner<'_>,
    envelope: &Envelope,
    attempt: u32,
    result: Result<crate::Outcome, AgentError>,
    emitter: &Emitter<'_>,
) -> Option<(Vec<Outgoing>, Settle, bool)> {
    let result = match result {
        Ok(crate::Outcome::Delegate {
            children,
            mode,
            update,
        }) => match join::start(shared, planner, envelope, children, mode, update, emitter).await {
            Ok(Started::Outgoing(outgoing)) => return Some((outgoing, Settle::Ack, false)),
            Ok(Started::Refused(err)) => Err(err),
            Err(err) => {
                tracing::error!(error = %err, "cannot start the delegation; leaving the message for redelivery");
                return None;
            }
        },
        other => other,
    };
    let found = match (&shared.registry, planner.lookup_request(envelope, &result)) {
        (Some(registry), Some(request)) => Some(best_candidate(registry, &request).await),
        _ => None,
    };
    let plan = planner.plan_routed(envelope, attempt, result, found);
    match emitter.outputs(message, &plan.outputs) {
        Ok(outgoing) => Some((outgoing, plan.settle, plan.failed)),
        Err(err) => {
            // Only a free-form value that msgpack cannot hold gets here.
            tracing::error!(error = %err, "cannot encode the outcome; dead-lettering");
            let detail = format!("cannot encode the agent's outcome: {err}");
            Some((
                emitter.undecodable(message, &DeadLetterReason::Fatal, &detail),
                Settle::Term,
                true,
            ))
        }
    }
}

/// A child's `result` for a delegation of this agent type: record it in the
/// join, and run the continuation if it completed the join.
async fn on_result<A: Agent>(
    shared: &Shared<A>,
    message: &jetstream::Message,
    envelope: &Envelope,
    attempt: u32,
    emitter: &Emitter<'_>,
) {
    let config = &shared.config;
    let planner = Planner {
        agent: &config.agent,
        instance: &config.instance,
        fallback: config.fallback.as_ref(),
        retry: shared.agent.retry_policy(),
        tier: config.profile.tier,
    };
    let handled = match join::on_result(shared, &planner, emitter, envelope).await {
        Ok(handled) => handled,
        Err(err) => {
            tracing::error!(error = %err, "cannot record a result; leaving it for redelivery");
            return;
        }
    };
    let (mut outgoing, task, results, claimed) = match handled {
        Handled::Done(outgoing) => {
            finish(shared, message, &outgoing, Settle::Ack, false).await;
            return;
        }
        Handled::Later(delay) => {
            join::later(message, delay).await;
            return;
        }
        Handled::Malformed(detail) => {
            tracing::warn!(detail, "unusable result; dead-lettering");
            let outgoing = emitter.undecodable(message, &DeadLetterReason::Malformed, detail);
            finish(shared, message, &outgoing, Settle::Term, true).await;
            return;
        }
        Handled::Fire {
            outgoing,
            task,
            results,
            claimed,
        } => (outgoing, task, results, claimed),
    };
    // The result is on record (and says so) before the continuation runs,
    // however long that takes.
    if let Err(err) = shared.publisher.publish_all(&outgoing).await {
        tracing::error!(error = %err, "result events not durable; leaving the result for redelivery");
        return;
    }
    outgoing.clear();
    let join_id = envelope.parent.as_ref().map(|p| p.id).unwrap_or_default();
    let all_in = results.all_in();
    let cont = task.envelope.clone();
    let resumed = with_progress(
        shared,
        message,
        shared.agent.resume(*task, results),
        "the continuation",
    )
    .await;
    let resumed = match resumed {
        Ok(crate::Outcome::Wait { .. }) if !claimed => {
            // An async report that keeps waiting.
            finish(shared, message, &outgoing, Settle::Ack, false).await;
            return;
        }
        Ok(crate::Outcome::Wait { .. }) if all_in => Err(AgentError::fatal(
            "every child answered and the continuation still waits: return an outcome from resume",
        )),
        other => other,
    };
    if !claimed {
        match join::claim(shared, join_id, envelope.id).await {
            Ok(true) => {}
            Ok(false) => {
                // Another report ended the join first.
                finish(shared, message, &outgoing, Settle::Ack, false).await;
                return;
            }
            Err(err) => {
                tracing::error!(error = %err, "cannot claim the join; leaving the result for redelivery");
                return;
            }
        }
    }
    let Some((more, settle_with, failed)) =
        outcome_outputs(shared, message, &planner, &cont, attempt, resumed, emitter).await
    else {
        return;
    };
    outgoing.extend(more);
    finish(shared, message, &outgoing, settle_with, failed).await;
}

async fn publish_plan<A: Agent>(
    shared: &Shared<A>,
    message: &jetstream::Message,
    emitter: &Emitter<'_>,
    outputs: &[crate::plan::Output],
    settle_with: Settle,
    failed: bool,
) {
    let outgoing = match emitter.outputs(message, outputs) {
        Ok(outgoing) => outgoing,
        Err(err) => {
            // Only a free-form value that msgpack cannot hold gets here.
            tracing::error!(error = %err, "cannot encode the outcome; dead-lettering");
            let detail = format!("cannot encode the agent's outcome: {err}");
            let outgoing = emitter.undecodable(message, &DeadLetterReason::Fatal, &detail);
            finish(shared, message, &outgoing, Settle::Term, true).await;
            return;
        }
    };
    finish(shared, message, &outgoing, settle_with, failed).await;
}

async fn finish<A: Agent>(
    shared: &Shared<A>,
    message: &jetstream::Message,
    outgoing: &[crate::publish::Outgoing],
    settle_with: Settle,
    failed: bool,
) {
    if let Err(err) = shared.publisher.publish_all(outgoing).await {
        tracing::error!(error = %err, "outputs not durable; leaving the message un-acked for redelivery");
        return;
    }
    settle(message, settle_with).await;
    shared.stats.processed.fetch_add(1, Ordering::Relaxed);
    if failed {
        shared.stats.failed.fetch_add(1, Ordering::Relaxed);
    }
}

/// The registry's best agent for `request`, or why there is none.
pub(crate) async fn best_candidate(
    registry: &RegistryClient,
    request: &baton_proto::LookupRequest,
) -> Result<AgentName, String> {
    let response = registry.lookup(request).await.map_err(|err| {
        tracing::warn!(error = %err, "registry lookup failed; taking the fallback path");
        err.to_string()
    })?;
    let Some(best) = response.candidates.first() else {
        let mut want = format!("capabilities [{}]", request.requires.join(", "));
        if !request.domains.is_empty() {
            want.push_str(&format!(", a domain of [{}]", request.domains.join(", ")));
        }
        if let Some(tier) = request.min_tier {
            want.push_str(&format!(", tier >= {tier}"));
        }
        return Err(format!(
            "no live agent offers {want} outside the path [{}]",
            request.exclude.join(", ")
        ));
    };
    AgentName::new(best.agent.as_str())
        .map_err(|err| format!("the registry proposed an invalid agent type: {err}"))
}

/// Runs the agent under its timeout, telling the server the work is alive.
async fn run_agent<A: Agent>(
    shared: &Shared<A>,
    message: &jetstream::Message,
    task: Task,
) -> Result<crate::Outcome, AgentError> {
    with_progress(shared, message, shared.agent.handle(task), "agent").await
}

/// Runs `work` under the agent's timeout, sending `+WPI` often enough that
/// `ack_wait` never expires under a live worker.
async fn with_progress<A: Agent>(
    shared: &Shared<A>,
    message: &jetstream::Message,
    work: impl Future<Output = Result<crate::Outcome, AgentError>>,
    what: &str,
) -> Result<crate::Outcome, AgentError> {
    let timeout = shared.agent.timeout();
    let work = tokio::time::timeout(timeout, work);
    tokio::pin!(work);
    // Start one period out: an interval's "immediate" first tick still waits
    // for the timer wheel (up to 1 ms), which would delay every message.
    let mut progress = tokio::time::interval_at(
        tokio::time::Instant::now() + shared.progress_every,
        shared.progress_every,
    );
    loop {
        tokio::select! {
            result = &mut work => {
                return result.unwrap_or_else(|_| Err(AgentError::retryable(format!("{what} timed out after {timeout:?}"))));
            }
            _ = progress.tick() => {
                if let Err(err) = message.ack_with(AckKind::Progress).await {
                    tracing::debug!(error = %err, "could not send progress");
                }
            }
        }
    }
}
