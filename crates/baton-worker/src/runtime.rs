//! What the per-message path needs, whatever the agent: the configuration,
//! the publisher, the registry, the join store and the counters. It carries
//! plans out: encode, publish, settle, count.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use baton_proto::{AgentName, DeadLetterReason, Envelope, LookupRequest};

use crate::agent::{RetryPolicy, Task};
use crate::config::{WorkerConfig, WorkerStats};
use crate::delivery::Delivery;
use crate::error::Error;
use crate::join::JoinStore;
use crate::plan::{Found, Output, Plan, Planner, Settle};
use crate::publish::Publisher;
use crate::registry::RegistryClient;

/// The shared, agent-independent state of one worker process.
pub(crate) struct Runtime {
    pub(crate) config: WorkerConfig,
    pub(crate) publisher: Publisher,
    pub(crate) registry: Option<RegistryClient>,
    pub(crate) stats: Arc<WorkerStats>,
    /// The agent's retry policy.
    pub(crate) retry: RetryPolicy,
    /// How long one run of the agent may take.
    pub(crate) timeout: Duration,
    /// How often a running agent's message gets a progress ack.
    pub(crate) progress_every: Duration,
    /// This agent type's subject, where children answer.
    reply_to: String,
    /// The delegation bucket, opened on first use.
    joins: tokio::sync::OnceCell<JoinStore>,
}

impl Runtime {
    pub(crate) fn new(
        config: WorkerConfig,
        publisher: Publisher,
        registry: Option<RegistryClient>,
        stats: Arc<WorkerStats>,
        agent: AgentPolicy,
    ) -> Self {
        let reply_to = config.subjects.agent(&config.agent);
        Self {
            config,
            publisher,
            registry,
            stats,
            retry: agent.retry,
            timeout: agent.timeout,
            progress_every: (agent.ack_wait / 3).max(Duration::from_millis(100)),
            reply_to,
            joins: tokio::sync::OnceCell::new(),
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
    pub(crate) fn task(&self, envelope: Envelope, attempt: u32) -> Task {
        Task {
            envelope,
            attempt,
            agent: self.config.agent.clone(),
            instance: self.config.instance.clone(),
        }
    }

    /// The join bucket, opened (and created if missing) on first use.
    pub(crate) async fn joins(&self) -> Result<&JoinStore, Error> {
        self.joins
            .get_or_try_init(|| async {
                let bucket = self.config.subjects.joins_bucket();
                JoinStore::open(self.publisher.jetstream(), &bucket).await
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
        let published = match delivery.encode(outputs) {
            Ok(outgoing) => self.publisher.publish_all(&outgoing).await,
            Err(err) => Err(err),
        };
        if let Err(err) = &published {
            tracing::error!(error = %err, "outputs not durable; leaving the message for redelivery");
        }
        published.is_ok()
    }

    /// Carries `plan` out: encodes its outputs, makes them durable, settles
    /// the delivery and counts it. A plan that cannot be encoded (only a
    /// free-form value msgpack cannot hold gets there) is dead-lettered
    /// as `fatal` instead.
    pub(crate) async fn execute(&self, delivery: &Delivery<'_>, plan: Plan) {
        let (outgoing, settle, failed) = match delivery.encode(&plan.outputs) {
            Ok(outgoing) => (outgoing, plan.settle, plan.failed),
            Err(err) => {
                tracing::error!(error = %err, "cannot encode the outcome; dead-lettering");
                let detail = format!("cannot encode the agent's outcome: {err}");
                let outgoing = delivery.unreadable(&DeadLetterReason::Fatal, &detail);
                (outgoing, Settle::Term, true)
            }
        };
        if delivery.finish(&self.publisher, &outgoing, settle).await {
            self.stats.processed.fetch_add(1, Ordering::Relaxed);
            if failed {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
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
        if delivery
            .finish(&self.publisher, &outgoing, Settle::Term)
            .await
        {
            self.stats.processed.fetch_add(1, Ordering::Relaxed);
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What the runtime takes from the agent and its consumer.
pub(crate) struct AgentPolicy {
    pub(crate) retry: RetryPolicy,
    pub(crate) timeout: Duration,
    pub(crate) ack_wait: Duration,
}
