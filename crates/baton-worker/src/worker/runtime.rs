//! What the per-message path needs, whatever the agent: the configuration,
//! the publisher, the registry, the join store and the counters. It carries
//! plans out: encode, publish, settle, count.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use baton_proto::{AgentName, DeadLetterReason, Envelope, EventType, LookupRequest};

use crate::author::agent::{RetryPolicy, Task};
use crate::error::{Error, ErrorKind};
use crate::nats::claimcheck::{ClaimCheck, ClaimFailure};
use crate::nats::publish::{Outgoing, Publisher};
use crate::nats::served::Served;
use crate::worker::config::{EventLevel, WorkerConfig, WorkerStats};
use crate::worker::delivery::{Delivery, Finished};
use crate::worker::join::store::JoinStore;
use crate::worker::metrics::Metrics;
use crate::worker::plan::{Found, Output, Plan, Planner, Settle};
use crate::worker::registry::RegistryClient;
use crate::worker::run::{Pace, keep_alive};

/// The shared, agent-independent state of one worker process.
pub(crate) struct Runtime {
    pub(crate) config: WorkerConfig,
    pub(crate) publisher: Publisher,
    pub(crate) registry: Option<RegistryClient>,
    pub(crate) stats: Arc<WorkerStats>,
    /// The agent's retry policy.
    pub(crate) retry: RetryPolicy,
    /// How long a run may take, and how often it acks progress.
    pub(crate) pace: Pace,
    /// This agent type's subject, where children answer.
    reply_to: String,
    /// The delegation bucket, opened on first use.
    joins: tokio::sync::OnceCell<JoinStore>,
    /// The claim-check bucket.
    pub(crate) claims: Arc<ClaimCheck>,
    /// Which agent types have workers.
    pub(crate) served: Served,
    /// The largest message the server accepts, headers included.
    server_max_payload: usize,
    /// What it counts for the process's metrics.
    pub(crate) metrics: Arc<Metrics>,
    /// The sessions cancelled, as far as this process knows.
    pub(crate) cancelled: Arc<crate::worker::cancel::Cancelled>,
    /// Where the agent's hops report what they do.
    reporter: Arc<crate::worker::reporter::Reporter>,
}

impl Runtime {
    pub(crate) fn new(
        config: WorkerConfig,
        publisher: Publisher,
        registry: Option<RegistryClient>,
        stats: Arc<WorkerStats>,
        agent: AgentPolicy,
        server_max_payload: usize,
    ) -> Self {
        let metrics = Arc::new(Metrics::new(
            config.agent.as_str(),
            &stats,
            agent.concurrency,
        ));
        let reply_to = config.subjects.agent(&config.agent);
        let publisher_js = publisher.jetstream().clone();
        let subjects = config.subjects.clone();
        let claims = ClaimCheck::new(
            publisher.jetstream().clone(),
            &config.subjects,
            config.claims.clone(),
            server_max_payload,
        );
        let reporter = Arc::new(crate::worker::reporter::Reporter {
            publisher: publisher.clone(),
            subjects: config.subjects.clone(),
            level: config.events,
            agent: config.agent.to_string(),
            instance: config.instance.clone(),
        });
        Self {
            config,
            publisher,
            registry,
            stats,
            retry: agent.retry,
            pace: Pace {
                timeout: agent.timeout,
                every: (agent.ack_wait / 3).max(Duration::from_millis(100)),
            },
            reply_to,
            joins: tokio::sync::OnceCell::new(),
            claims: Arc::new(claims),
            served: Served::new(publisher_js, subjects),
            server_max_payload,
            metrics,
            cancelled: Arc::default(),
            reporter,
        }
    }

    /// The planner of this worker.
    pub(crate) fn planner(&self) -> Planner<'_> {
        Planner {
            agent: &self.config.agent,
            instance: &self.config.instance,
            fallback: self.config.fallback.as_ref(),
            retry: self.retry,
            tier: self.config.profile.tier,
            reply_to: &self.reply_to,
        }
    }

    /// A delivery of `envelope` to this worker's agent.
    /// `headers` carry the hop's trace context to what it reports.
    pub(crate) fn task(
        &self,
        envelope: Envelope,
        attempt: u32,
        headers: async_nats::HeaderMap,
    ) -> Task {
        let progress = self.reporter.progress(&envelope, headers);
        Task {
            envelope,
            attempt,
            agent: self.config.agent.clone(),
            instance: self.config.instance.clone(),
            progress,
        }
    }

    /// The join bucket, opened (and created if missing) on first use.
    pub(crate) async fn joins(&self) -> Result<&JoinStore, Error> {
        self.joins
            .get_or_try_init(|| async {
                let bucket = self.config.subjects.joins_bucket();
                let replicas = self.config.streams.replicas;
                let claims = self.claims.clone();
                JoinStore::open(self.publisher.jetstream(), &bucket, replicas, claims).await
            })
            .await
    }

    /// The registry's best agent for `request`, or why there is none;
    /// `None` when this worker does not use the registry.
    pub(crate) async fn lookup(&self, request: &LookupRequest) -> Found {
        let registry = self.registry.as_ref()?;
        Some(registry.best(request).await)
    }

    /// The best agent for `request`, or why there is none.
    pub(crate) async fn best(&self, request: &LookupRequest) -> Result<AgentName, String> {
        self.lookup(request).await.unwrap_or_else(|| {
            Err("capability targets need the registry, and this worker does not use it".to_owned())
        })
    }

    /// Makes `outputs` durable without settling (a join's notes, before a
    /// continuation that may take long).
    pub(crate) async fn publish(&self, delivery: &Delivery<'_>, outputs: &[Output]) -> bool {
        let published = match self.prepare(delivery, outputs).await {
            Ok(outgoing) => self.publisher.publish_all(&outgoing).await,
            Err(Unsendable::Permanent(_, detail)) => Err(Error::new(ErrorKind::Publish, detail)),
            Err(Unsendable::Transient(err)) => Err(err),
        };
        if let Err(err) = &published {
            tracing::error!(error = %err, "outputs not durable; leaving the message for redelivery");
        }
        published.is_ok()
    }

    /// Carries `plan` out: prepares its outputs, makes them durable, settles
    /// the delivery and counts it. Outputs that can never be sent (too large
    /// even after the claim-check, or not encodable) end the session instead:
    /// a dead letter with the reason, and `dead_lettered` and `failed`
    /// events. When the claim-check store is unreachable, the message is
    /// left for redelivery.
    pub(crate) async fn execute(&self, delivery: &Delivery<'_>, mut plan: Plan) {
        stamp_accepted(&mut plan.outputs, &self.config.agent, delivery.received_at);
        let mut reason = None;
        let mut live = Vec::new();
        let (outgoing, settle, failed) = match self.prepare(delivery, &plan.outputs).await {
            Ok(outgoing) => {
                let (progress, durable) = self.split_live(outgoing, &plan.outputs);
                live = progress;
                (durable, plan.settle, plan.failed)
            }
            Err(Unsendable::Permanent(why, detail)) => {
                tracing::error!(reason = %why, detail, "the outcome cannot be sent; dead-lettering");
                let outgoing = delivery.unreadable(&why, &detail);
                reason = Some(why);
                (outgoing, Settle::Term, true)
            }
            Err(Unsendable::Transient(err)) => {
                tracing::error!(error = %err, "claim-check store unavailable; leaving the message for redelivery");
                return;
            }
        };
        let prepared = reason.is_none();
        match delivery.finish(&self.publisher, &outgoing, settle).await {
            Finished::Settled if prepared => {
                self.publisher.publish_live(&live).await;
                self.metrics.settled(&plan.outputs);
                self.count(failed);
            }
            Finished::Settled => {
                self.metrics
                    .ended(reason.as_ref().map_or("", DeadLetterReason::as_str));
                self.count(true);
            }
            Finished::Ended(reason) => {
                self.metrics.ended(reason.as_str());
                self.count(true);
            }
            Finished::Left => {}
        }
    }

    /// At the `lean` event level, the `handoff` events of `outgoing` go to
    /// the session's live subject, unstored, once the rest is durable:
    /// returns (live, durable).
    fn split_live(
        &self,
        outgoing: Vec<Outgoing>,
        outputs: &[Output],
    ) -> (Vec<Outgoing>, Vec<Outgoing>) {
        if self.config.events == EventLevel::Full {
            return (Vec::new(), outgoing);
        }
        let (mut live, mut durable) = (Vec::new(), Vec::new());
        for (mut message, output) in outgoing.into_iter().zip(outputs) {
            match output {
                Output::Event(event) if event.kind == EventType::Handoff => {
                    message.subject = self.config.subjects.live(event.session);
                    live.push(message);
                }
                _ => durable.push(message),
            }
        }
        (live, durable)
    }

    /// Encodes `outputs`, claim-checks the large envelopes and events, and
    /// checks that every message fits the server's `max_payload`.
    async fn prepare(
        &self,
        delivery: &Delivery<'_>,
        outputs: &[Output],
    ) -> Result<Vec<Outgoing>, Unsendable> {
        let mut outgoing = delivery.encode(outputs).map_err(|err| {
            let detail = format!("cannot encode the agent's outcome: {err}");
            Unsendable::Permanent(DeadLetterReason::Fatal, detail)
        })?;
        for (message, output) in outgoing.iter_mut().zip(outputs) {
            if matches!(output, Output::DeadLetter(_)) {
                continue; // A copy of a message the server already took.
            }
            let payload = std::mem::take(&mut message.payload);
            let whole = payload.len();
            let checked = if self.claims.needed(whole) {
                // A large context may take a while: keep the message alive.
                Box::pin(keep_alive(
                    self.pace.every,
                    delivery,
                    self.claims.check_out(payload),
                ))
                .await
            } else {
                Ok(payload)
            };
            message.payload = checked.map_err(|err| match err {
                ClaimFailure::Permanent(detail) => {
                    Unsendable::Permanent(DeadLetterReason::Fatal, detail)
                }
                ClaimFailure::Transient(err) => Unsendable::Transient(err),
            })?;
            if message.payload.len() < whole {
                self.metrics.claims("stored", whole - message.payload.len());
            }
            let size = message.size();
            if size > self.server_max_payload {
                let detail = format!(
                    "a message to {} is {size} bytes, over the server's max_payload of {} bytes, even after the claim-check",
                    message.subject, self.server_max_payload
                );
                return Err(Unsendable::Permanent(DeadLetterReason::TooLarge, detail));
            }
        }
        Ok(outgoing)
    }

    /// Dead-letters a message that is not a readable envelope.
    pub(crate) async fn unreadable(
        &self,
        delivery: &Delivery<'_>,
        reason: &DeadLetterReason,
        detail: &str,
    ) {
        tracing::warn!(subject = %delivery.message.subject, %reason, detail, "unreadable message; dead-lettering");
        let outgoing = delivery.unreadable(reason, detail);
        match delivery
            .finish(&self.publisher, &outgoing, Settle::Term)
            .await
        {
            Finished::Left => {}
            Finished::Ended(ended) => {
                self.metrics.ended(ended.as_str());
                self.count(true);
            }
            Finished::Settled => {
                self.metrics.ended(reason.as_str());
                self.count(true);
            }
        }
    }

    /// Counts a settled message.
    fn count(&self, failed: bool) {
        self.stats.processed.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
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

/// Why a plan's outputs cannot be published.
enum Unsendable {
    /// Never: the session ends with this dead-letter reason and detail.
    Permanent(DeadLetterReason, String),
    /// Not now: the message is left for redelivery.
    Transient(Error),
}

/// What the runtime takes from the agent and its consumer.
pub(crate) struct AgentPolicy {
    pub(crate) retry: RetryPolicy,
    pub(crate) timeout: Duration,
    pub(crate) ack_wait: Duration,
    /// How many messages the worker handles at once.
    pub(crate) concurrency: usize,
}
