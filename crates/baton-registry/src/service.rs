//! The registry as a NATS micro service.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream;
use async_nats::service::{self, ServiceExt};
use baton_proto::{FeedbackReply, Heartbeat, Subjects, Wire};
use bytes::Bytes;
use futures::StreamExt;
use opentelemetry::metrics::Counter;
use tokio::time::Instant;

use crate::endpoints;
use crate::learn::{Learner, LearningConfig};
use crate::outcomes;
use crate::table::{Backlog, Table};

/// The micro service name every replica registers under.
pub const SERVICE_NAME: &str = "baton-registry";

const JSON: &str = "application/json";

/// Settings of one registry replica.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RegistryConfig {
    /// Subject names.
    pub subjects: Subjects,
    /// The workers' heartbeat interval: instances that do not state theirs
    /// are dropped after three of these; backlogs are read this often.
    pub heartbeat_interval: Duration,
    /// How long a starting replica listens to heartbeats before it answers
    /// lookups, so it never answers from a half-filled table.
    pub warmup: Duration,
    /// How it learns from outcomes.
    pub learning: LearningConfig,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            subjects: Subjects::default(),
            heartbeat_interval: Duration::from_secs(2),
            warmup: Duration::from_secs(2),
            learning: LearningConfig::default(),
        }
    }
}

impl RegistryConfig {
    /// Sets the subject prefix.
    #[must_use]
    pub fn with_subjects(mut self, subjects: Subjects) -> Self {
        self.subjects = subjects;
        self
    }

    /// Sets the heartbeat interval, and the warm-up to match it.
    #[must_use]
    pub fn with_heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = interval;
        self.warmup = interval;
        self
    }

    /// Sets how it learns from outcomes.
    #[must_use]
    pub fn with_learning(mut self, learning: LearningConfig) -> Self {
        self.learning = learning;
        self
    }

    /// Sets the warm-up alone.
    #[must_use]
    pub fn with_warmup(mut self, warmup: Duration) -> Self {
        self.warmup = warmup;
        self
    }
}

/// What kept the registry from starting, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// NATS refused the heartbeats' subscription.
    Subscribe,
    /// NATS refused the micro service or one of its endpoints.
    Service,
}

baton_proto::error_type! {
    /// Why the registry could not start: a kind, what failed, and NATS's
    /// error as the cause.
    pub struct Error(ErrorKind);
}

/// One registry replica. Run as many as you like: each holds the whole table.
pub struct Registry {
    client: async_nats::Client,
    config: RegistryConfig,
}

impl Registry {
    /// A replica on `client`.
    #[must_use]
    pub fn new(client: async_nats::Client, config: RegistryConfig) -> Self {
        Self { client, config }
    }

    /// Listens to heartbeats, then answers lookups until `shutdown` resolves.
    ///
    /// # Errors
    ///
    /// Only when it cannot subscribe or register the service; bad heartbeats
    /// and bad requests are logged or answered with an error, never fatal.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), Error> {
        let Self { client, config } = self;
        tokio::pin!(shutdown);
        let beats = client
            .subscribe(config.subjects.all_heartbeats())
            .await
            .map_err(|err| {
                Error::with_source(ErrorKind::Subscribe, "cannot subscribe to heartbeats", err)
            })?;
        tracing::info!(warmup = ?config.warmup, "registry started; listening to heartbeats");
        let jetstream = jetstream::new(client.clone());
        let (outcome_tx, outcomes) = tokio::sync::mpsc::channel(1024);
        let (caught_tx, caught_up) = tokio::sync::watch::channel(false);
        let mut state = State {
            table: Table::new(config.heartbeat_interval),
            learner: Learner::new(config.learning.clone()),
            beats,
            outcomes,
        };
        let background = [
            tokio::spawn(outcomes::record(jetstream.clone(), config.subjects.clone())),
            tokio::spawn(outcomes::read(
                jetstream.clone(),
                config.subjects.clone(),
                outcome_tx,
                caught_tx,
            )),
        ];
        if !state.warm_up(config.warmup, caught_up, &mut shutdown).await {
            background.iter().for_each(tokio::task::JoinHandle::abort);
            return Ok(());
        }
        let service = client
            .service_builder()
            .description("Baton registry: best-agent lookup by capability, load, tier and outcomes")
            .start(SERVICE_NAME, env!("CARGO_PKG_VERSION"))
            .await
            .map_err(|err| {
                Error::with_source(ErrorKind::Service, "cannot register the micro service", err)
            })?;
        let endpoints = Endpoints::add(&service, &config.subjects).await?;
        tracing::info!(
            subject = %config.subjects.lookup(),
            agent_types = state.table.agent_types().count(),
            outcomes = state.learner.records(),
            learning = config.learning.enabled,
            "registry serving lookups"
        );
        let (backlog_tx, backlog_rx) = tokio::sync::mpsc::channel(1);
        let backlogs = tokio::spawn(read_backlogs(
            jetstream.clone(),
            config.subjects.tasks_stream(),
            config.heartbeat_interval,
            backlog_tx,
        ));
        state
            .serve(&config, &jetstream, endpoints, backlog_rx, &mut shutdown)
            .await;
        backlogs.abort();
        background.iter().for_each(tokio::task::JoinHandle::abort);
        if let Err(err) = service.stop().await {
            tracing::debug!(error = %err, "could not stop the service cleanly");
        }
        tracing::info!("registry stopped");
        Ok(())
    }
}

/// What one replica knows: live instances and what outcomes taught.
struct State {
    table: Table,
    learner: Learner,
    beats: async_nats::Subscriber,
    outcomes: tokio::sync::mpsc::Receiver<baton_proto::Outcome>,
}

/// The service's endpoints.
struct Endpoints {
    lookups: service::endpoint::Endpoint,
    feedbacks: service::endpoint::Endpoint,
    notebooks: service::endpoint::Endpoint,
}

impl Endpoints {
    async fn add(service: &service::Service, subjects: &Subjects) -> Result<Self, Error> {
        let endpoint = |name: &'static str, subject: String| async move {
            service
                .endpoint_builder()
                .name(name)
                .add(subject)
                .await
                .map_err(|err| {
                    Error::with_source(
                        ErrorKind::Service,
                        format!("cannot add the {name} endpoint"),
                        err,
                    )
                })
        };
        Ok(Self {
            lookups: endpoint("lookup", subjects.lookup()).await?,
            feedbacks: endpoint("feedback", subjects.feedback()).await?,
            notebooks: endpoint("notebook", subjects.notebook()).await?,
        })
    }
}

impl State {
    /// Listens for the warm-up, and until the stored outcomes are read (at
    /// most `CATCH_UP` longer); false when shut down meanwhile.
    async fn warm_up(
        &mut self,
        warmup: Duration,
        mut caught_up: tokio::sync::watch::Receiver<bool>,
        shutdown: &mut (impl Future<Output = ()> + Unpin),
    ) -> bool {
        let warm = tokio::time::sleep(warmup);
        let late = tokio::time::sleep(warmup + CATCH_UP);
        tokio::pin!(warm, late);
        let (mut warmed, mut learned) = (false, false);
        while !(warmed && learned) {
            tokio::select! {
                Some(message) = self.beats.next() => record(&mut self.table, &message),
                Some(outcome) = self.outcomes.recv() => self.learner.apply(&outcome),
                Ok(_) = caught_up.wait_for(|caught| *caught), if !learned => learned = true,
                () = &mut warm, if !warmed => warmed = true,
                () = &mut late => break,
                () = &mut *shutdown => return false,
            }
        }
        // What the reader sent and the loop has not taken yet.
        while let Ok(outcome) = self.outcomes.try_recv() {
            self.learner.apply(&outcome);
        }
        true
    }

    /// Answers requests until `shutdown`.
    async fn serve(
        &mut self,
        config: &RegistryConfig,
        jetstream: &jetstream::Context,
        mut endpoints: Endpoints,
        mut backlogs: tokio::sync::mpsc::Receiver<HashMap<String, Backlog>>,
        shutdown: &mut (impl Future<Output = ()> + Unpin),
    ) {
        let answered = opentelemetry::global::meter("baton")
            .u64_counter("baton.registry.requests")
            .with_description(
                "Requests this registry replica answered, by result (answered or bad_request)",
            )
            .build();
        let mut sweep = tokio::time::interval(config.heartbeat_interval);
        let Self {
            table,
            learner,
            beats,
            outcomes,
        } = self;
        loop {
            // Heartbeats first: a lookup is answered from the freshest table,
            // never before heartbeats that are already waiting.
            tokio::select! {
                biased;
                Some(message) = beats.next() => record(table, &message),
                Some(outcome) = outcomes.recv() => learner.apply(&outcome),
                Some(request) = endpoints.lookups.next() => {
                    let reply = endpoints::lookup(table, learner, &request.message.payload, is_json(&request));
                    answer(&request, reply, &answered).await;
                }
                Some(request) = endpoints.feedbacks.next() => {
                    take_feedback(jetstream, &config.subjects, learner, request);
                }
                Some(request) = endpoints.notebooks.next() => {
                    let reply = endpoints::notebook(table, learner, &request.message.payload, is_json(&request));
                    answer(&request, reply, &answered).await;
                }
                Some(backlog) = backlogs.recv() => table.set_backlogs(backlog),
                _ = sweep.tick() => table.expire(Instant::now()),
                () = &mut *shutdown => break,
            }
        }
    }
}

/// How much longer than the warm-up a starting replica waits to read the
/// stored outcomes before it answers anyway.
const CATCH_UP: Duration = Duration::from_secs(10);

/// Checks feedback, then stores it and answers in the background, so that
/// lookups do not wait for the store.
fn take_feedback(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    learner: &Learner,
    request: service::Request,
) {
    let json = is_json(&request);
    let checked = endpoints::feedback(&request.message.payload, json);
    let known = checked
        .as_ref()
        .is_ok_and(|outcome| learner.knows_session(outcome.session));
    let mut credited = checked
        .as_ref()
        .map(|outcome| learner.credited(outcome.session))
        .unwrap_or_default();
    let (jetstream, subjects) = (jetstream.clone(), subjects.clone());
    tokio::spawn(async move {
        let reply = async {
            let outcome = checked?;
            if !known {
                // Its end may not have reached the outcomes yet: ask the events.
                credited = endpoints::ended(&jetstream, &subjects, outcome.session).await?;
            }
            outcomes::store(&jetstream, &subjects, &outcome)
                .await
                .map_err(|err| service::error::Error {
                    status: format!("cannot store the feedback, nothing was recorded: {err}"),
                    code: 503,
                })?;
            let reply = FeedbackReply {
                id: outcome.id.to_string(),
                credited,
                extra: baton_proto::Map::new(),
            };
            endpoints::encode(&reply, json)
        };
        respond_with(&request, reply.await, json).await;
    });
}

fn record(table: &mut Table, message: &async_nats::Message) {
    match Heartbeat::from_msgpack(&message.payload) {
        Ok(beat) => {
            if !table.record(beat, Instant::now()) {
                tracing::debug!(subject = %message.subject, "heartbeat with an invalid agent or instance ignored");
            }
        }
        Err(err) => {
            tracing::debug!(subject = %message.subject, error = %err, "unreadable heartbeat ignored");
        }
    }
}

/// Whether a request says it is JSON.
fn is_json(request: &service::Request) -> bool {
    request
        .message
        .headers
        .as_ref()
        .and_then(|headers| headers.get("Content-Type"))
        .is_some_and(|value| value.as_str().eq_ignore_ascii_case(JSON))
}

/// Sends one answer, counting it.
async fn answer(
    request: &service::Request,
    reply: Result<Bytes, service::error::Error>,
    answered: &Counter<u64>,
) {
    let result = if let Err(err) = &reply {
        tracing::debug!(error = %err.status, "bad registry request");
        "bad_request"
    } else {
        "answered"
    };
    answered.add(1, &[opentelemetry::KeyValue::new("result", result)]);
    respond_with(request, reply, is_json(request)).await;
}

async fn respond_with(
    request: &service::Request,
    reply: Result<Bytes, service::error::Error>,
    json: bool,
) {
    let mut headers = HeaderMap::new();
    if json {
        headers.insert("Content-Type", JSON);
    }
    if let Err(err) = request.respond_with_headers(reply, headers).await {
        tracing::debug!(error = %err, "could not answer a registry request");
    }
}

/// Reads every agent type's consumer backlog once per `every`.
async fn read_backlogs(
    jetstream: jetstream::Context,
    stream: String,
    every: Duration,
    out: tokio::sync::mpsc::Sender<HashMap<String, Backlog>>,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let stream = match jetstream.get_stream_no_info(&stream).await {
            Ok(stream) => stream,
            Err(err) => {
                tracing::debug!(error = %err, "cannot read backlogs");
                continue;
            }
        };
        let mut backlogs = HashMap::new();
        let mut consumers = stream.consumers();
        while let Some(info) = consumers.next().await {
            match info {
                Ok(info) => {
                    if let Some(agent) = info.name.strip_prefix("agent-") {
                        backlogs.insert(
                            agent.to_owned(),
                            Backlog {
                                pending: info.num_pending,
                                ack_pending: info.num_ack_pending as u64,
                            },
                        );
                    }
                }
                Err(err) => {
                    tracing::debug!(error = %err, "cannot list consumers");
                    break;
                }
            }
        }
        if out.send(backlogs).await.is_err() {
            return;
        }
    }
}

/// What a registry replica does on NATS: it takes heartbeats, lookups,
/// feedback and notebook requests (answering them, and the NATS service
/// API's discovery and stats), reads which agent types have a consumer,
/// records outcomes from the events (through the shared durable consumer
/// `registry`), and reads `BATON_OUTCOMES` from the start.
#[must_use]
pub fn footprint(subjects: &Subjects) -> baton_proto::Footprint {
    use baton_proto::Footprint;
    let tasks = subjects.tasks_stream();
    Footprint::stream_info(&tasks)
        .publishes([
            baton_proto::footprint::api(format_args!("CONSUMER.LIST.{tasks}")),
            baton_proto::footprint::api(format_args!("CONSUMER.INFO.{tasks}.*")),
        ])
        .with(Footprint::stream_info(&subjects.events_stream()))
        // Whether a session has ended, for feedback on it.
        .publishes([
            baton_proto::footprint::api(format_args!(
                "STREAM.MSG.GET.{}",
                subjects.events_stream()
            )),
            baton_proto::footprint::api(format_args!("DIRECT.GET.{}.>", subjects.events_stream())),
        ])
        .with(Footprint::stream_admin(&subjects.outcomes_stream()))
        .with(Footprint::stream_reader(&subjects.outcomes_stream()))
        .with(Footprint::puller(
            &subjects.events_stream(),
            outcomes::CONSUMER,
        ))
        .publishes([subjects.all_outcomes()])
        .subscribes([
            format!("{}.registry.heartbeat.>", subjects.prefix()),
            subjects.lookup(),
            subjects.feedback(),
            subjects.notebook(),
            "$SRV.>".to_owned(),
        ])
        .responding()
}
