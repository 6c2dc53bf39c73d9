//! The ingress router: moves tasks from `baton.ingress` to an agent's
//! subject ([`route`](mod@route)), watches deadlines and serves sessions.

mod route;

use baton_nats::pipeline::defaults;
use baton_nats::state::rollouts::Rollouts;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use baton_proto::footprint::Footprint;
use baton_proto::{AgentName, DEFAULT_MAX_PAYLOAD, Subjects};

use crate::deadlines;
use crate::sessions::Sessions;
use baton_client::Client;
use baton_client::RegistryClient;
use baton_nats::Error;
use baton_nats::nats::claimcheck::{ClaimCheck, ClaimSettings};
use baton_nats::nats::connection::{Connection, Permissions};
use baton_nats::nats::provision::{self, StreamSettings};
use baton_nats::nats::publish::Publisher;
use baton_nats::nats::served::Served;
use baton_nats::pipeline::advisory;
use baton_nats::pipeline::intake::{self, IntakeSettings, Source};
use route::{Ingress, route};

/// Settings of the ingress router.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RouterConfig {
    /// Subject and stream names.
    pub subjects: Subjects,
    /// Where tasks without `to` or `requires` go; `None` fails them with `no_route`.
    pub default_agent: Option<AgentName>,
    /// Where tasks go whose `requires` no live agent meets (reason `no_match`);
    /// `None` fails them with `no_route`.
    pub fallback: Option<AgentName>,
    /// Whether tasks with `requires` are routed through the registry.
    pub use_registry: bool,
    /// How long registry lookups may be retried before the fallback path is taken.
    pub lookup_budget: Duration,
    /// Largest task accepted.
    pub max_payload: usize,
    /// Tasks routed at once.
    pub concurrency: usize,
    /// Redelivery timeout of the `ingress` consumer, used when it is created.
    pub ack_wait: Duration,
    /// Stream settings, used when the streams are created.
    pub streams: StreamSettings,
    /// The deadline given to tasks that arrive without one, from the moment
    /// the router takes them; `None` leaves them without a deadline.
    pub default_deadline: Option<Duration>,
    /// The budget given to tasks that arrive without one, part by part
    /// (tokens, cost); the default leaves them without a budget.
    pub default_budget: baton_proto::Budget,
    /// How long a conversation nothing happens in is kept, from its last
    /// change (and a deleted one's marker, from the delete).
    pub conversation_ttl: Duration,
    /// How long tasks being routed may take to finish on shutdown; those
    /// still unsettled then are redelivered after `ack_wait`. The deadline
    /// timers get at most 2 seconds of it.
    pub shutdown_grace: Duration,
}

impl Default for RouterConfig {
    fn default() -> Self {
        Self {
            subjects: Subjects::default(),
            default_agent: None,
            fallback: None,
            use_registry: true,
            lookup_budget: Duration::from_secs(3),
            max_payload: DEFAULT_MAX_PAYLOAD,
            default_deadline: None,
            default_budget: baton_proto::Budget::default(),
            concurrency: 64,
            ack_wait: Duration::from_secs(30),
            streams: StreamSettings::default(),
            conversation_ttl: baton_nats::state::conversation::DEFAULT_TTL,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

impl RouterConfig {
    /// Sets the default entry agent.
    #[must_use]
    pub fn with_default_agent(mut self, agent: Option<AgentName>) -> Self {
        self.default_agent = agent;
        self
    }

    /// Sets the fallback agent for tasks whose `requires` nobody meets.
    #[must_use]
    pub fn with_fallback(mut self, agent: Option<AgentName>) -> Self {
        self.fallback = agent;
        self
    }

    /// Turns registry lookups for tasks with `requires` on or off.
    #[must_use]
    pub fn with_registry(mut self, use_registry: bool) -> Self {
        self.use_registry = use_registry;
        self
    }

    /// Sets the subject prefix.
    #[must_use]
    pub fn with_subjects(mut self, subjects: Subjects) -> Self {
        self.subjects = subjects;
        self
    }

    /// Gives tasks that arrive without a deadline this much time.
    #[must_use]
    pub fn with_default_deadline(mut self, deadline: Option<Duration>) -> Self {
        self.default_deadline = deadline;
        self
    }

    /// Gives tasks that arrive without a token or a cost budget this one.
    #[must_use]
    pub fn with_default_budget(mut self, budget: baton_proto::Budget) -> Self {
        self.default_budget = budget;
        self
    }

    /// What the router gives tasks that arrive without a deadline or a budget.
    pub(crate) fn defaults(&self) -> defaults::Defaults {
        defaults::Defaults {
            deadline: self.default_deadline,
            budget: self.default_budget,
        }
    }

    /// Sets the payload size limit.
    #[must_use]
    pub fn with_max_payload(mut self, max_payload: usize) -> Self {
        self.max_payload = max_payload;
        self
    }

    /// Sets the shutdown grace period.
    #[must_use]
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }
}

/// Name under which the router dead-letters (`baton.dlq.ingress`).
const ROUTER_NAME: &str = "ingress";

/// How many times the router's consumers deliver a message; one the router
/// never settles is then dead-lettered from the server's advisory.
const ROUTER_MAX_DELIVER: i64 = 20;

/// Pulls `baton.ingress` and forwards each task: to `to` when set; else, when
/// it has `requires`, to the registry's best agent (or the fallback with
/// `no_match`); else to the default entry agent. A task with nowhere to go
/// fails with `no_route` and is dead-lettered.
pub struct Router {
    client: async_nats::Client,
    permissions: Permissions,
    config: RouterConfig,
}

impl Router {
    /// A router on `connection` (a [`Connection`], or a plain `async_nats::Client`).
    #[must_use]
    pub fn new(connection: impl Into<Connection>, config: RouterConfig) -> Self {
        let connection = connection.into();
        Self {
            client: connection.client().clone(),
            permissions: connection.permissions().clone(),
            config,
        }
    }

    /// Serves until `shutdown` resolves.
    ///
    /// # Errors
    ///
    /// Only for start-up problems (JetStream unreachable, mismatched streams).
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), Error> {
        let jetstream = jetstream::new(self.client.clone());
        let config = Arc::new(self.config);
        let publisher = Publisher::new(jetstream.clone(), self.permissions.clone());
        provision::provision(&publisher, &config.subjects, &config.streams).await?;
        let (source, timers) = consumers(&self.client, &jetstream, &config).await?;
        // Senders past the router (a conversation's next turn) apply the same.
        defaults::publish(&jetstream, &config.subjects, &config.defaults()).await?;
        let ack_wait = config.ack_wait;
        let served = Served::new(jetstream.clone(), config.subjects.clone());
        provision::cover_redeliveries(
            &publisher,
            &config.subjects,
            Subjects::INGRESS_CONSUMER,
            provision::redelivery_span(ack_wait, ROUTER_MAX_DELIVER).unwrap_or(ack_wait),
        )
        .await;
        let settings = IntakeSettings {
            concurrency: config.concurrency,
            pull_expires: Duration::from_secs(5),
            shutdown_grace: config.shutdown_grace,
        };
        tracing::info!(default_agent = ?config.default_agent, "router started");
        let me = AgentName::new(ROUTER_NAME)?;
        let registry = config.use_registry.then(|| {
            RegistryClient::new(self.client.clone(), &config.subjects)
                .with_budget(config.lookup_budget)
        });
        let nets = nets(&self.client, &publisher, &config, &me, [&source, &timers]).await?;
        let stop = tokio_util::sync::CancellationToken::new();
        let connection = Connection::from_parts(self.client.clone(), self.permissions.clone());
        let sessions = sessions(connection.clone(), &config, stop.clone()).await?;
        let keeper = keeper(connection, &config, stop.clone()).await?;
        let replicas = config.streams.replicas;
        let gatekeeper = gatekeeper(&jetstream, &config, stop.clone()).await;
        let rollouts = Rollouts::follow(&publisher, &config.subjects, replicas).await;
        let router = Arc::new(Ingress {
            config,
            registry,
            publisher,
            me,
            served,
            rollouts,
        });
        let watch = watch_deadlines(timers, router.clone(), jetstream, stop.clone());
        let ingress = intake::serve(
            source,
            settings,
            stop.clone().cancelled_owned(),
            |message| {
                let router = router.clone();
                async move { route(&router, message).await }
            },
        );
        baton_nats::health::set_serving(true);
        let stopper = async {
            baton_nats::health::draining(shutdown).await;
            stop.cancel();
        };
        tokio::join!(ingress, watch, stopper);
        nets.iter().for_each(tokio::task::JoinHandle::abort);
        sessions.abort();
        keeper.abort();
        if let Some(gatekeeper) = gatekeeper {
            gatekeeper.abort();
        }
        Ok(())
    }
}

/// The gatekeeper, judging gated rollouts; a router that cannot open what
/// it needs (under permissions that do not grant it) routes without it.
async fn gatekeeper(
    jetstream: &jetstream::Context,
    config: &RouterConfig,
    stop: tokio_util::sync::CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    let by = format!("router-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let (subjects, replicas) = (config.subjects.clone(), config.streams.replicas);
    match crate::gatekeeper::Gatekeeper::open(jetstream.clone(), subjects, replicas, by.clone())
        .await
    {
        Ok(gatekeeper) => {
            tracing::info!(%by, "gatekeeper started: gated rollouts are judged here");
            Some(tokio::spawn(gatekeeper.keep(stop)))
        }
        Err(err) => {
            tracing::warn!(error = %err, "no gatekeeper: gated rollouts are not judged by this router");
            None
        }
    }
}

/// The session service: reads and cancels for clients that may not
/// read the events stream.
async fn sessions(
    connection: Connection,
    config: &RouterConfig,
    stop: tokio_util::sync::CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, Error> {
    let canceller = Client::new(connection.clone(), config.subjects.clone())
        .with_streams(config.streams.clone())
        .reading_the_stream();
    let claims = Arc::new(ClaimCheck::open(
        connection.client(),
        &config.subjects,
        ClaimSettings::default(),
    ));
    Sessions::new(canceller, claims).serve(stop).await
}

/// The conversations' keeper: it closes turns that ended and starts the
/// messages queued behind them.
async fn keeper(
    connection: Connection,
    config: &RouterConfig,
    stop: tokio_util::sync::CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, Error> {
    let client = Client::new(connection, config.subjects.clone())
        .with_streams(config.streams.clone())
        .reading_the_stream();
    let conversations =
        baton_client::conversation::Conversations::open(client, config.streams.replicas)
            .await
            .map_err(|err| Error::new(baton_nats::ErrorKind::JetStream, err.to_string()))?;
    Ok(tokio::spawn(crate::keeper::keep(
        conversations,
        Duration::from_millis(250),
        config.conversation_ttl,
        stop,
    )))
}

/// The router's two consumers of the tasks stream: the ingress, and the
/// deadline timers, served alongside.
async fn consumers(
    client: &async_nats::Client,
    jetstream: &jetstream::Context,
    config: &RouterConfig,
) -> Result<(Source, Source), Error> {
    let (subjects, ack_wait) = (&config.subjects, config.ack_wait);
    let mut sources = Vec::new();
    for (consumer, filter) in [
        (Subjects::INGRESS_CONSUMER, subjects.ingress()),
        (Subjects::DEADLINES_CONSUMER, subjects.deadline_timers()),
    ] {
        let source = Source::tasks(
            client,
            jetstream,
            subjects,
            consumer,
            filter,
            ack_wait,
            ROUTER_MAX_DELIVER,
        )
        .await?;
        sources.push(source);
    }
    let timers = sources
        .pop()
        .unwrap_or_else(|| unreachable!("two consumers"));
    let ingress = sources
        .pop()
        .unwrap_or_else(|| unreachable!("two consumers"));
    Ok((ingress, timers))
}

/// The max-deliveries nets of the router's consumers.
async fn nets(
    client: &async_nats::Client,
    publisher: &Publisher,
    config: &RouterConfig,
    me: &AgentName,
    sources: [&Source; 2],
) -> Result<Vec<tokio::task::JoinHandle<()>>, Error> {
    let mut nets = Vec::new();
    for source in sources {
        let net = advisory::Net {
            client: client.clone(),
            publisher: publisher.clone(),
            subjects: config.subjects.clone(),
            stream: source.stream.clone(),
            consumer: source.consumer.clone(),
            agent: me.clone(),
            metrics: None,
        };
        nets.push(net.spawn().await?);
    }
    Ok(nets)
}

/// Serves the deadline timers until `stop` is cancelled.
async fn watch_deadlines(
    timers: Source,
    router: Arc<Ingress>,
    jetstream: jetstream::Context,
    stop: tokio_util::sync::CancellationToken,
) {
    let settings = IntakeSettings {
        concurrency: 64,
        pull_expires: Duration::from_secs(5),
        shutdown_grace: router.config.shutdown_grace.min(Duration::from_secs(2)),
    };
    intake::serve(timers, settings, stop.cancelled_owned(), move |message| {
        let router = router.clone();
        let jetstream = jetstream.clone();
        async move {
            let subjects = &router.config.subjects;
            let (publisher, me) = (&router.publisher, &router.me);
            deadlines::on_timer(&jetstream, subjects, publisher, me, message).await;
        }
    })
    .await;
}

/// What the router does on NATS: it provisions the streams, pulls the
/// ingress and the deadline timers, forwards tasks to any agent type, ends
/// sessions at their deadline or when they cannot be routed, serves the
/// session service, and cancels.
#[must_use]
pub fn footprint(subjects: &Subjects) -> Footprint {
    baton_nats::nats::provision::footprint(subjects, true)
        .with(baton_nats::pipeline::intake::footprint(
            subjects,
            Subjects::INGRESS_CONSUMER,
        ))
        .with(baton_nats::pipeline::intake::footprint(
            subjects,
            Subjects::DEADLINES_CONSUMER,
        ))
        .with(baton_nats::nats::served::footprint(subjects))
        .with(baton_nats::nats::events::footprint(subjects))
        .publishes([
            format!("{}.agent.*", subjects.prefix()),
            // A versioned agent type's versions.
            format!("{}.agent.*.*", subjects.prefix()),
            format!("{}.events.*", subjects.prefix()),
            subjects.dlq(&AgentName::from_static(ROUTER_NAME)),
            subjects.lookup(),
        ])
        .with(crate::sessions::footprint(subjects))
        .with(baton_nats::nats::claimcheck::footprint(subjects))
        .with(baton_nats::pipeline::cancel::footprint(subjects, true))
        .with(baton_nats::state::conversation::footprint(subjects))
        // Its keeper removes conversations idle for their time to live.
        .with(baton_nats::state::conversation::deleting_footprint(
            subjects,
        ))
        .with(baton_nats::state::rollouts::footprint(subjects))
        .with(crate::gatekeeper::footprint(subjects))
        .noting("the router forwards tasks to any agent type, so it may publish to all of them")
}
