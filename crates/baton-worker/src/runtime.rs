//! What the per-message path needs, whatever the agent: the configuration,
//! the outbox, the registry, the join store and the counters.

use std::sync::Arc;
use std::time::Duration;

use baton_proto::{AgentName, Envelope, LookupRequest};

use crate::config::{WorkerConfig, WorkerStats};
use crate::decide::{Lookup, Planner};
use crate::join::store::JoinStore;
use crate::metrics::Metrics;
use crate::outbox::{Outbox, Parts};
use crate::reporter::Reporter;
use crate::run::Pace;
use baton_author::{RetryPolicy, Task};
use baton_client::RegistryClient;
use baton_nats::ClaimCheck;
use baton_nats::Error;
use baton_nats::nats::publish::Publisher;
use baton_nats::nats::served::Served;
use baton_nats::pipeline::delivery::Delivery;

/// The shared, agent-independent state of one worker process.
pub(crate) struct Runtime {
    pub(crate) config: WorkerConfig,
    /// Where every message of the worker leaves (step 6).
    pub(crate) outbox: Arc<Outbox>,
    /// Shared with every task, for a team's coordinator (one allocation,
    /// not one per message).
    pub(crate) registry: Option<Arc<RegistryClient>>,
    pub(crate) stats: Arc<WorkerStats>,
    /// The agent's retry policy.
    pub(crate) retry: RetryPolicy,
    /// How long a run may take, and how often it acks progress.
    pub(crate) pace: Pace,
    /// This worker's subject (its version's, when it serves one): where
    /// children answer.
    reply_to: String,
    /// The delegation bucket, opened on first use.
    joins: tokio::sync::OnceCell<JoinStore>,
    /// The claim-check bucket.
    pub(crate) claims: Arc<ClaimCheck>,
    /// Conversations' transcripts, which turns' contexts refer to.
    pub(crate) transcripts: baton_nats::state::transcript::Transcripts,
    /// Which agent types have workers.
    pub(crate) served: Served,
    /// What it counts for the process's metrics.
    pub(crate) metrics: Arc<Metrics>,
    /// The sessions cancelled, as far as this process knows.
    pub(crate) cancelled: Arc<baton_nats::pipeline::cancel::Cancelled>,
    /// Where the agent's hops report what they do.
    reporter: Arc<Reporter>,
}

impl Runtime {
    /// The net that dead-letters what the server stops delivering from
    /// `source`'s consumer, counted in this worker's metrics.
    pub(crate) fn net(
        &self,
        client: &async_nats::Client,
        source: &baton_nats::pipeline::intake::Source,
    ) -> baton_nats::pipeline::advisory::Net {
        baton_nats::pipeline::advisory::Net {
            client: client.clone(),
            publisher: self.outbox.publisher.clone(),
            subjects: self.config.subjects.clone(),
            stream: source.stream.clone(),
            consumer: source.consumer.clone(),
            agent: self.config.agent.clone(),
            metrics: Some(self.metrics.clone()),
        }
    }

    pub(crate) fn new(
        config: WorkerConfig,
        publisher: Publisher,
        registry: Option<RegistryClient>,
        stats: Arc<WorkerStats>,
        agent: AgentPolicy,
        server_max_payload: usize,
        rollouts: baton_nats::state::rollouts::Rollouts,
    ) -> Self {
        let metrics = Arc::new(Metrics::new(
            config.agent.as_str(),
            &stats,
            agent.concurrency,
        ));
        let jetstream = publisher.jetstream().clone();
        let claims = Arc::new(ClaimCheck::new(
            jetstream.clone(),
            &config.subjects,
            config.claims.clone(),
            server_max_payload,
        ));
        let pace = Pace {
            timeout: agent.timeout,
            every: (agent.ack_wait / 3).max(Duration::from_millis(100)),
        };
        let transcripts =
            baton_nats::state::transcript::Transcripts::new(jetstream.clone(), &config.subjects);
        let outbox = Arc::new(Outbox::new(Parts {
            transcripts: transcripts.clone(),
            publisher,
            subjects: config.subjects.clone(),
            level: config.events,
            compact: config.compact_events,
            live: config.live,
            agent: config.agent.clone(),
            claims: claims.clone(),
            server_max_payload,
            progress_every: pace.every,
            metrics: metrics.clone(),
            stats: stats.clone(),
            rollouts,
        }));
        let reporter = Arc::new(Reporter {
            outbox: outbox.clone(),
            agent: config.agent.clone(),
            instance: config.instance.clone(),
            version: config.version.clone(),
            // Steps fold where `accepted` does, into stored compact events.
            fold_steps: (config.events == crate::config::EventLevel::Full && config.compact_events)
                .then_some(config.accepted_after)
                .filter(|within| !within.is_zero()),
        });
        Self {
            reply_to: config.work_subject(),
            served: Served::new(jetstream, config.subjects.clone()),
            config,
            outbox,
            registry: registry.map(Arc::new),
            stats,
            retry: agent.retry,
            pace,
            joins: tokio::sync::OnceCell::new(),
            claims,
            transcripts,
            metrics,
            cancelled: Arc::default(),
            reporter,
        }
    }

    /// The JetStream context of the worker's connection.
    pub(crate) fn jetstream(&self) -> &async_nats::jetstream::Context {
        self.outbox.publisher.jetstream()
    }

    /// The planner of this worker.
    pub(crate) fn planner(&self) -> Planner<'_> {
        Planner {
            agent: &self.config.agent,
            instance: &self.config.instance,
            version: self.config.version.as_ref(),
            fallback: self.config.fallback.as_ref(),
            retry: self.retry,
            tier: self.config.profile.tier,
            reply_to: &self.reply_to,
            hand_back: self.config.hand_back,
        }
    }

    /// `delivery`'s `envelope`, as this worker's agent gets it: its trace
    /// context goes to what the hop reports, and a root task's first report
    /// stored checks its session.
    pub(crate) fn task(
        &self,
        envelope: baton_author::Shared<Envelope>,
        delivery: &Delivery<'_>,
    ) -> Task {
        let opening = delivery.opening().cloned();
        self.task_of(envelope, delivery.attempt, delivery.headers(), opening)
    }

    /// A delivery of `envelope` to this worker's agent.
    /// `headers` carry the hop's trace context to what it reports; a root
    /// task's `opening` checks its session with the first report it stores.
    pub(crate) fn task_of(
        &self,
        envelope: baton_author::Shared<Envelope>,
        attempt: u32,
        headers: async_nats::HeaderMap,
        opening: Option<Arc<baton_nats::pipeline::opening::Opening>>,
    ) -> Task {
        let progress = self.reporter.progress(&envelope, headers, opening);
        Task {
            envelope,
            attempt,
            agent: self.config.agent.clone(),
            instance: self.config.instance.clone(),
            progress,
            registry: self
                .registry
                .clone()
                .map(|registry| registry as Arc<dyn baton_author::Lookups>),
        }
    }

    /// The join bucket, opened (and created if missing) on first use.
    pub(crate) async fn joins(&self) -> Result<&JoinStore, Error> {
        self.joins
            .get_or_try_init(|| async {
                let subjects = &self.config.subjects;
                let replicas = self.config.streams.replicas;
                let claims = self.claims.clone();
                JoinStore::open(self.jetstream(), subjects, replicas, claims).await
            })
            .await
    }

    /// The registry's best agent for `request`, or why there is none;
    /// `None` when this worker does not use the registry.
    pub(crate) async fn lookup(&self, request: &LookupRequest) -> Lookup {
        match self.registry.as_ref() {
            Some(registry) => registry.best(request).await.into(),
            None => Lookup::NotAsked,
        }
    }

    /// The best agent for `request`, or why there is none.
    pub(crate) async fn best(&self, request: &LookupRequest) -> Result<AgentName, Error> {
        match self.registry.as_ref() {
            Some(registry) => registry.best(request).await,
            None => Err(Error::new(
                baton_nats::ErrorKind::Config,
                "capability targets need the registry, and this worker does not use it",
            )),
        }
    }
}

/// What the runtime takes from the agent and its consumer.
pub(crate) struct AgentPolicy {
    pub(crate) retry: RetryPolicy,
    pub(crate) timeout: Duration,
    pub(crate) ack_wait: Duration,
    /// How many messages the worker handles at once.
    pub(crate) concurrency: usize,
}
