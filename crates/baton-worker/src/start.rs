//! A worker's start and its life: the checks that fail a start early, the
//! streams and the consumer it provisions, what it runs beside the loop
//! (heartbeats, the cancel watch, the max-deliveries net), and the intake
//! that feeds [`handle`](super::handle::handle) until shutdown.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream;
use baton_proto::footprint::Footprint;
use baton_proto::{AgentName, Subjects, Version};
use tokio::task::JoinHandle;

use crate::config::{WorkerConfig, WorkerStats};
use crate::handle::handle;
use crate::heartbeats::spawn_heartbeats;
use crate::runtime::{AgentPolicy, Runtime};
use baton_author::Agent;
use baton_client::RegistryClient;
use baton_nats::nats::connection::{Connection, Permissions};
use baton_nats::nats::provision;
use baton_nats::nats::publish::Publisher;
use baton_nats::pipeline::advisory;
use baton_nats::pipeline::intake::{self, IntakeSettings, Source};
use baton_nats::state::rollouts::{self, Rollouts};
use baton_nats::{Error, ErrorKind};

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
        check_attempts(self.agent.as_ref(), &self.config)?;
        let publisher = Publisher::new(jetstream.clone(), self.permissions);
        check_rights(&publisher, &self.config).await?;
        let ack_wait = provision_consumer(&publisher, &self.config).await?;
        let settings = IntakeSettings {
            concurrency: self.agent.concurrency(),
            pull_expires: self.config.pull_expires,
            shutdown_grace: self.config.shutdown_grace,
        };
        let heartbeats = spawn_heartbeats(
            self.client.clone(),
            &self.config,
            settings.concurrency,
            self.stats.clone(),
        );
        let config = &self.config;
        tracing::info!(agent = %config.agent, instance = %config.instance, concurrency = settings.concurrency, ?ack_wait, "worker started");
        let policy = AgentPolicy {
            retry: self.agent.retry_policy(),
            timeout: self.agent.timeout(),
            ack_wait,
            concurrency: settings.concurrency,
        };
        let registry = config.use_registry.then(|| {
            RegistryClient::new(self.client.clone(), &config.subjects)
                .with_budget(config.lookup_budget)
                .with_memory(config.registry_memory)
        });
        let max_payload = self.client.server_info().max_payload;
        let rollouts = Rollouts::follow(
            &publisher,
            &self.config.subjects,
            self.config.streams.replicas,
        )
        .await;
        let retirement = retirement(rollouts.clone(), &self.config);
        let rt = Runtime::new(
            self.config,
            publisher,
            registry,
            self.stats,
            policy,
            max_payload,
            rollouts,
        );
        let rt = Arc::new(rt);
        let source = Source {
            client: self.client.clone(),
            jetstream,
            stream: rt.config.subjects.tasks_stream(),
            consumer: rt.config.work_consumer(),
        };
        let beside = match beside_the_loop(&self.client, &rt, &source).await {
            Ok(beside) => beside,
            Err(err) => {
                heartbeats.abort();
                return Err(err);
            }
        };
        let stop = Stop {
            shutdown,
            retirement,
        };
        serve(&rt, self.agent, source, settings, stop).await;
        heartbeats.abort();
        beside.into_iter().for_each(|task| task.abort());
        tracing::info!(agent = %rt.config.agent, "worker stopped");
        Ok(())
    }
}

/// Fails the start of a worker whose agent may retry more often than the
/// consumer delivers.
fn check_attempts<A: Agent>(agent: &A, config: &WorkerConfig) -> Result<(), Error> {
    let attempts = agent.retry_policy().max_attempts;
    if attempts < config.max_deliveries {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Config,
        format!(
            "the agent's max_attempts ({attempts}) must be below max_deliveries ({}): \
             lower the attempts or raise --max-deliveries",
            config.max_deliveries
        ),
    ))
}

/// Fails the start of a worker whose NATS user may not pull its tasks,
/// write events or dead-letter, as far as the server reports its rights.
async fn check_rights(publisher: &Publisher, config: &WorkerConfig) -> Result<(), Error> {
    let role = format!("worker {}", config.agent);
    publisher.check_rights(&needed(config), &role).await
}

/// What a worker checks at start that it may do: pull its tasks, write
/// events and dead-letter (each within its [`footprint`]).
fn needed(config: &WorkerConfig) -> [(&'static str, String); 3] {
    let subjects = &config.subjects;
    let pull = format!(
        "$JS.API.CONSUMER.MSG.NEXT.{}.{}",
        subjects.tasks_stream(),
        config.work_consumer()
    );
    [
        ("pull its agent type's tasks", pull),
        ("write session events", subjects.events(uuid::Uuid::nil())),
        ("dead-letter", subjects.dlq(&config.agent)),
    ]
}

/// Provisions the streams and the agent type's consumer, and makes the
/// events stream's duplicate window cover its redeliveries: the consumer's
/// `ack_wait`, as the server has it.
async fn provision_consumer(
    publisher: &Publisher,
    config: &WorkerConfig,
) -> Result<Duration, Error> {
    let jetstream = publisher.jetstream();
    provision::provision(publisher, &config.subjects, &config.streams).await?;
    let max_deliver = advisory::max_deliver(config.max_deliveries);
    // The rollout before the consumer that marks the type served: a sender
    // that finds it served finds it versioned too.
    if let Some(version) = config.serves_version() {
        first_version(publisher, config, version).await?;
    }
    // The agent type's own consumer marks it served, versioned or not.
    let mut consumer = provision::agent_consumer(
        jetstream,
        &config.subjects,
        &config.agent,
        config.ack_wait,
        max_deliver,
    )
    .await?;
    if config.serves_version().is_some() {
        consumer = provision::task_consumer(
            jetstream,
            &config.subjects,
            &config.work_consumer(),
            config.work_subject(),
            config.ack_wait,
            max_deliver,
        )
        .await?;
    }
    let ack_wait = consumer
        .info()
        .await
        .map_or(config.ack_wait, |info| info.config.ack_wait);
    provision::cover_redeliveries(
        publisher,
        &config.subjects,
        &config.work_consumer(),
        provision::redelivery_span(ack_wait, max_deliver).unwrap_or(ack_wait),
    )
    .await;
    Ok(ack_wait)
}

/// Makes `version` the current version of the worker's agent type when
/// the type has no rollout yet: the first version of a type to run takes
/// its new work, and a later one waits until it is rolled out.
async fn first_version(
    publisher: &Publisher,
    config: &WorkerConfig,
    version: &Version,
) -> Result<(), Error> {
    let store = rollouts::bucket(
        publisher.jetstream(),
        &config.subjects,
        config.streams.replicas,
    )
    .await?;
    let agent = config.agent.as_str();
    if config.upgrade_next_turn {
        upgrade_next_turn(&store, config, version).await?;
    }
    if let Some((rollout, _)) = rollouts::read(&store, agent).await? {
        let role = rollout.role(version.as_str());
        if role == baton_proto::VersionRole::Retired {
            tracing::warn!(agent, version = %version, current = %rollout.current, "this version is retired: nothing is sent to it; remove this worker");
        } else {
            tracing::info!(agent, version = %version, role = role.as_str(), current = %rollout.current, "this version's place in the rollout");
        }
        if let Some(plan) = &config.rollout {
            crate::gated::start(&store, config, version, plan).await?;
        }
        return Ok(());
    }
    let first = baton_proto::Rollout::first(&config.agent, version, baton_proto::now_ms());
    if rollouts::write(&store, &first, 0).await? {
        tracing::info!(agent, version = %version, "the first version of this agent type: it is current");
    }
    Ok(())
}

/// Notes in the rollout that the conversations pinned to `version` move
/// to the current version at their next turn (its spec says
/// `upgrade = "next_turn"`). A type without a rollout gets one first.
async fn upgrade_next_turn(
    store: &async_nats::jetstream::kv::Store,
    config: &WorkerConfig,
    version: &Version,
) -> Result<(), Error> {
    let agent = config.agent.as_str();
    loop {
        let (mut rollout, revision) = match rollouts::read(store, agent).await? {
            Some(found) => found,
            None => {
                let first =
                    baton_proto::Rollout::first(&config.agent, version, baton_proto::now_ms());
                (first, 0)
            }
        };
        if !rollout.upgrade(version, baton_proto::now_ms()) {
            return Ok(());
        }
        if rollouts::write(store, &rollout, revision).await? {
            return Ok(());
        }
    }
}

/// What runs beside the loop: the watches of cancels and of followers, and
/// the net for messages no worker settles.
async fn beside_the_loop(
    client: &async_nats::Client,
    rt: &Arc<Runtime>,
    source: &Source,
) -> Result<Vec<JoinHandle<()>>, Error> {
    let cancels = baton_nats::pipeline::cancel::watch(
        source.jetstream.clone(),
        rt.config.subjects.clone(),
        rt.config.streams.replicas,
        rt.cancelled.clone(),
        Duration::from_secs(5),
    )
    .await;
    let followers = baton_nats::state::followers::watch(
        source.jetstream.clone(),
        rt.config.subjects.clone(),
        rt.config.streams.replicas,
        rt.outbox.followers.clone(),
        Duration::from_secs(5),
    )
    .await;
    let net = rt.net(client, source).spawn().await;
    match net {
        Ok(net) => {
            let mut beside = vec![cancels, followers, net];
            if rt.config.serves_version().is_some() {
                // Tasks on the type's own subject go on to their versions.
                match crate::moved::spawn(rt, client, source).await {
                    Ok(moving) => beside.extend(moving),
                    Err(err) => {
                        beside.iter().for_each(JoinHandle::abort);
                        return Err(err);
                    }
                }
            }
            Ok(beside)
        }
        Err(err) => {
            cancels.abort();
            followers.abort();
            Err(err)
        }
    }
}

/// What ends a worker's pulling: the process's shutdown, or its version's
/// retirement.
struct Stop<S, R> {
    shutdown: S,
    retirement: R,
}

/// Resolves once the worker's version is retired in its type's rollout
/// (`baton retire`); never for an unversioned worker.
fn retirement(
    rollouts: Rollouts,
    config: &WorkerConfig,
) -> impl Future<Output = ()> + Send + 'static {
    let agent = config.agent.to_string();
    let version = config.serves_version().cloned();
    async move {
        let Some(version) = version else {
            return std::future::pending().await;
        };
        loop {
            let rollout = rollouts.get(&agent);
            if rollout
                .is_some_and(|r| r.role(version.as_str()) == baton_proto::VersionRole::Retired)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Feeds every message of `source` to the loop until the shutdown, or
/// until the worker's version is retired: it then takes nothing more, lets
/// what it holds finish, says so in its log and its readiness, and idles
/// until the shutdown.
async fn serve<A: Agent>(
    rt: &Arc<Runtime>,
    agent: Arc<A>,
    source: Source,
    settings: IntakeSettings,
    stop: Stop<impl Future<Output = ()> + Send, impl Future<Output = ()> + Send>,
) {
    baton_nats::health::set_serving(true);
    let retired = std::sync::atomic::AtomicBool::new(false);
    let mut shutdown = std::pin::pin!(stop.shutdown);
    let stopped = async {
        tokio::select! {
            () = &mut shutdown => {}
            () = stop.retirement => retired.store(true, Ordering::Relaxed),
        }
    };
    intake::serve(
        source,
        settings,
        baton_nats::health::draining(stopped),
        |message| {
            let rt = rt.clone();
            let agent = agent.clone();
            async move {
                rt.stats.in_flight.fetch_add(1, Ordering::Relaxed);
                // Boxed: the handler's future is large, and a task moves its future on spawn.
                Box::pin(handle(&rt, agent.as_ref(), message)).await;
                rt.stats.in_flight.fetch_sub(1, Ordering::Relaxed);
            }
        },
    )
    .await;
    if retired.load(Ordering::Relaxed) {
        let (agent, version) = (&rt.config.agent, rt.config.serves_version());
        let version = version.map(ToString::to_string).unwrap_or_default();
        tracing::warn!(%agent, %version, "this version is retired: this worker takes nothing more; remove it");
        baton_nats::health::set_retired(format!(
            "retired: version {version} of {agent} takes nothing (`baton retire`); remove this worker\n"
        ));
        shutdown.await;
    }
}

/// What a worker of `agent` does on NATS, as far as this crate's parts go
/// (an agent kind may add its own): it pulls its tasks, provisions nothing
/// but reads the streams, checks targets and ends, keeps joins, claims and
/// heartbeats, follows cancels, and publishes through its outbox to `to`.
#[must_use]
pub fn footprint(subjects: &Subjects, agent: &AgentName, to: &[AgentName]) -> Footprint {
    baton_nats::nats::provision::footprint(subjects, false)
        .with(baton_nats::pipeline::intake::footprint(
            subjects,
            &Subjects::agent_consumer(agent),
        ))
        .with(baton_nats::nats::served::footprint(subjects))
        .with(baton_nats::nats::events::footprint(subjects))
        .with(crate::outbox::footprint(subjects, agent, to))
        .with(crate::heartbeats::footprint(subjects, agent))
        .with(crate::join::store::footprint(subjects))
        .with(baton_nats::nats::claimcheck::footprint(subjects))
        .with(baton_nats::pipeline::cancel::footprint(subjects, false))
        .with(baton_nats::state::followers::watcher_footprint(subjects))
        // A conversation's turn refers to its transcript.
        .with(baton_nats::state::transcript::footprint(subjects))
        // Which version of a versioned type a session goes to.
        .with(rollouts::footprint(subjects))
}

/// What a worker of version `version` of `agent` uses beyond
/// [`footprint`]: its version's consumer, and the versions' subjects of
/// its type, where it moves the tasks of the type's own subject.
#[must_use]
pub fn version_footprint(subjects: &Subjects, agent: &AgentName, version: &Version) -> Footprint {
    baton_nats::pipeline::intake::footprint(subjects, &Subjects::version_consumer(agent, version))
        // It moves tasks on its type's own subject to their versions.
        .with(Footprint::new().publishes([format!("{}.*", subjects.agent(agent))]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_worker_checks_at_start_is_within_its_footprint() {
        let agent = AgentName::new("triage").unwrap();
        let config = WorkerConfig::new(agent.clone());
        let footprint = footprint(&config.subjects, &agent, &[]);
        for (what, subject) in needed(&config) {
            assert!(footprint.allows_publish(&subject), "{what}: {subject}");
        }
        assert!(
            !footprint.allows_publish("baton.ingress"),
            "a worker does not submit tasks"
        );
    }
}
