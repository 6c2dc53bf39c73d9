//! The ingress router: moves tasks from `baton.ingress` to an agent's subject.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use baton_proto::{
    AgentName, DEFAULT_MAX_PAYLOAD, DeadLetterReason, Envelope, Event, EventType, Reason, Subjects,
    Wire, derive_id,
};
use bytes::Bytes;
use tracing::Instrument;

use crate::error::Error;
use crate::intake::{self, IntakeSettings, Source};
use crate::outputs::{Emitter, settle};
use crate::plan::Settle;
use crate::provision::{self, StreamSettings};
use crate::publish::{Outgoing, Publisher};
use crate::trace;

/// Settings of the ingress router.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RouterConfig {
    /// Subject and stream names.
    pub subjects: Subjects,
    /// Where tasks without `to` go; `None` fails them with `no_route`.
    pub default_agent: Option<AgentName>,
    /// Largest task accepted.
    pub max_payload: usize,
    /// Tasks routed at once.
    pub concurrency: usize,
    /// Redelivery timeout of the `ingress` consumer, used when it is created.
    pub ack_wait: Duration,
    /// Stream settings, used when the streams are created.
    pub streams: StreamSettings,
}

impl Default for RouterConfig {
    fn default() -> Self {
        Self {
            subjects: Subjects::default(),
            default_agent: None,
            max_payload: DEFAULT_MAX_PAYLOAD,
            concurrency: 64,
            ack_wait: Duration::from_secs(30),
            streams: StreamSettings::default(),
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

    /// Sets the subject prefix.
    #[must_use]
    pub fn with_subjects(mut self, subjects: Subjects) -> Self {
        self.subjects = subjects;
        self
    }

    /// Sets the payload size limit.
    #[must_use]
    pub fn with_max_payload(mut self, max_payload: usize) -> Self {
        self.max_payload = max_payload;
        self
    }
}

/// Name under which the router dead-letters (`baton.dlq.ingress`).
const ROUTER_NAME: &str = "ingress";

/// Pulls `baton.ingress` and forwards each task: to `to` when set, else to the
/// default entry agent, else it fails with `no_route` and is dead-lettered.
pub struct Router {
    client: async_nats::Client,
    config: RouterConfig,
}

impl Router {
    /// A router on `client`.
    #[must_use]
    pub fn new(client: async_nats::Client, config: RouterConfig) -> Self {
        Self { client, config }
    }

    /// Serves until `shutdown` resolves.
    ///
    /// # Errors
    ///
    /// Only for start-up problems (JetStream unreachable, mismatched streams).
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), Error> {
        let jetstream = jetstream::new(self.client.clone());
        let config = Arc::new(self.config);
        provision::provision(&jetstream, &config.subjects, &config.streams).await?;
        let _consumer = provision::task_consumer(
            &jetstream,
            &config.subjects,
            Subjects::INGRESS_CONSUMER,
            config.subjects.ingress(),
            config.ack_wait,
        )
        .await?;
        let source = Source {
            client: self.client.clone(),
            jetstream: jetstream.clone(),
            stream: config.subjects.tasks_stream(),
            consumer: Subjects::INGRESS_CONSUMER.to_owned(),
        };
        let publisher = Publisher::new(jetstream);
        let settings = IntakeSettings {
            concurrency: config.concurrency,
            pull_expires: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(10),
        };
        tracing::info!(default_agent = ?config.default_agent, "router started");
        let me = Arc::new(AgentName::new(ROUTER_NAME)?);
        intake::serve(source, settings, shutdown, |message| {
            let config = config.clone();
            let publisher = publisher.clone();
            let me = me.clone();
            async move { route(&config, &publisher, &me, message).await }
        })
        .await;
        Ok(())
    }
}

async fn route(
    config: &RouterConfig,
    publisher: &Publisher,
    me: &AgentName,
    message: jetstream::Message,
) {
    let parent = trace::extract(message.headers.as_ref());
    let span = tracing::info_span!(
        "baton.route",
        session = tracing::field::Empty,
        envelope = tracing::field::Empty
    );
    trace::adopt(&span, &parent);
    let emitter = Emitter {
        subjects: &config.subjects,
        agent: me,
        span: &span,
        parent: &parent,
    };
    let (outgoing, settle_with) = match Envelope::from_msgpack_limited(
        &message.payload,
        config.max_payload,
    ) {
        Err(err) => {
            tracing::warn!(parent: &span, reason = %err.reason(), detail = err.detail(), "undecodable task; dead-lettering");
            (
                emitter.undecodable(&message, &err.reason(), err.detail()),
                Settle::Term,
            )
        }
        Ok(envelope) => {
            span.record("session", tracing::field::display(envelope.session));
            span.record("envelope", tracing::field::display(envelope.id));
            match target(config, &envelope) {
                Ok(agent) => {
                    let mut forwarded = envelope.clone();
                    forwarded.id = derive_id(envelope.id, 0);
                    forwarded.to = Some(agent.to_string());
                    match forwarded.to_msgpack() {
                        Ok(payload) => {
                            let mut headers = async_nats::HeaderMap::new();
                            trace::inject(&span, &parent, &mut headers);
                            let out = Outgoing {
                                subject: config.subjects.agent(&agent),
                                id: forwarded.id,
                                payload: Bytes::from(payload),
                                headers,
                            };
                            (vec![out], Settle::Ack)
                        }
                        Err(err) => {
                            let detail = format!("cannot re-encode the task: {err}");
                            (
                                emitter.undecodable(
                                    &message,
                                    &DeadLetterReason::Malformed,
                                    &detail,
                                ),
                                Settle::Term,
                            )
                        }
                    }
                }
                Err(detail) => {
                    tracing::info!(parent: &span, %detail, "no route for task");
                    (
                        no_route(&emitter, &message, &envelope, &detail),
                        Settle::Term,
                    )
                }
            }
        }
    };
    async {
        if let Err(err) = publisher.publish_all(&outgoing).await {
            tracing::error!(error = %err, "routing outputs not durable; leaving the task for redelivery");
            return;
        }
        settle(&message, settle_with).await;
    }
    .instrument(span.clone())
    .await;
}

/// The agent a task goes to, or why there is none.
fn target(config: &RouterConfig, envelope: &Envelope) -> Result<AgentName, String> {
    match &envelope.to {
        Some(to) => AgentName::new(to.as_str()).map_err(|err| format!("the task's `to` is not an agent type: {err}")),
        None => config.default_agent.clone().ok_or_else(|| {
            "the task has no `to` and the router has no default entry agent (start it with --default-agent)".to_owned()
        }),
    }
}

fn no_route(
    emitter: &Emitter<'_>,
    message: &jetstream::Message,
    envelope: &Envelope,
    detail: &str,
) -> Vec<Outgoing> {
    let mut outgoing = vec![emitter.dead_letter(
        message,
        derive_id(envelope.id, 1),
        &DeadLetterReason::NoRoute,
        detail,
    )];
    for (index, kind) in [(2, EventType::DeadLettered), (3, EventType::Failed)] {
        let mut event = Event::new(derive_id(envelope.id, index), envelope.session, kind);
        event.agent = Some(ROUTER_NAME.to_owned());
        event.envelope = Some(envelope.id);
        event.reason = Some(Reason::parse("no_route"));
        event.detail = Some(detail.to_owned());
        match emitter.event(&event) {
            Ok(out) => outgoing.push(out),
            Err(err) => tracing::warn!(error = %err, "cannot encode event"),
        }
    }
    outgoing
}
