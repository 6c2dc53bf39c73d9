//! Publishing tasks and following their sessions from outside; [`follow`]
//! reads a session's events.

mod after;
mod direct;
pub(crate) mod follow;
pub(crate) mod reading;
pub(crate) mod relaying;
pub(crate) mod replay;

use std::pin::Pin;

use async_nats::jetstream;
use baton_proto::footprint::Footprint;
use baton_proto::{AgentName, Envelope, Event, Subjects, Version, Wire};
use bytes::Bytes;
use futures::Stream;
use tokio::sync::OnceCell;
use uuid::Uuid;

pub use crate::client::after::Seen;
pub use crate::client::reading::Cancel;
use baton_nats::nats::claimcheck::{ClaimCheck, ClaimSettings};
use baton_nats::nats::connection::{Connection, Permissions};
use baton_nats::nats::provision::{self, StreamSettings};
use baton_nats::nats::publish::{Class, Outgoing, Publisher};
use baton_nats::nats::served::Served;
use baton_nats::nats::trace;
use baton_nats::pipeline::address::{Sending, addressed};
use baton_nats::pipeline::defaults::Known;
use baton_nats::state::rollouts::Rollouts;
use baton_nats::{Error, ErrorKind};

/// A session's events: first those stored, then live ones.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<Event, Error>> + Send>>;

/// Publishes tasks and follows sessions.
///
/// A client whose NATS user may read the events stream (as the server
/// reports the user's rights; any user when it does not say) reads sessions
/// from it. Any other user, such as one under the generated `client`
/// permissions, reads and cancels through the router's session service,
/// one session per request: a router must then be running.
#[derive(Debug, Clone)]
pub struct Client {
    jetstream: jetstream::Context,
    subjects: Subjects,
    publisher: Publisher,
    streams: StreamSettings,
    provisioned: std::sync::Arc<OnceCell<()>>,
    claims: std::sync::Arc<ClaimCheck>,
    served: std::sync::Arc<Served>,
    defaults: std::sync::Arc<Known>,
    permissions: Permissions,
    reads: std::sync::Arc<OnceCell<Reads>>,
    /// The agent types' rollouts, followed from the first task sent
    /// straight to an agent type.
    rollouts: std::sync::Arc<OnceCell<Rollouts>>,
}

/// Where a client reads sessions from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reads {
    /// The events stream itself: its user may read every session.
    Stream,
    /// The router's session service, one session per request: its user
    /// may not read the events stream (the generated `client` block).
    Router,
}

impl Client {
    /// A client on `connection` (a [`Connection`], or a plain
    /// `async_nats::Client`) using `subjects`.
    #[must_use]
    pub fn new(connection: impl Into<Connection>, subjects: Subjects) -> Self {
        let connection = connection.into();
        let max_payload = connection.client().server_info().max_payload;
        let jetstream = jetstream::new(connection.client().clone());
        let (jetstream_for_served, subjects_for_served) = (jetstream.clone(), subjects.clone());
        let claims = ClaimCheck::new(
            jetstream.clone(),
            &subjects,
            ClaimSettings::default(),
            max_payload,
        );
        Self {
            publisher: Publisher::new(jetstream.clone(), connection.permissions().clone()),
            jetstream,
            subjects,
            streams: StreamSettings::default(),
            provisioned: std::sync::Arc::default(),
            claims: std::sync::Arc::new(claims),
            served: std::sync::Arc::new(Served::new(
                jetstream_for_served.clone(),
                subjects_for_served.clone(),
            )),
            defaults: std::sync::Arc::new(Known::new(jetstream_for_served, subjects_for_served)),
            permissions: connection.permissions().clone(),
            reads: std::sync::Arc::default(),
            rollouts: std::sync::Arc::default(),
        }
    }

    /// Creates missing streams, and the claim-check bucket, with `streams`
    /// (replicas, retention).
    #[must_use]
    pub fn with_streams(mut self, streams: StreamSettings) -> Self {
        let mut claims = self.claims.settings().clone();
        claims.replicas = streams.replicas;
        self.streams = streams;
        self.with_claims(claims)
    }

    /// Uses `settings` for the claim-check of large tasks and events.
    #[must_use]
    pub fn with_claims(mut self, settings: ClaimSettings) -> Self {
        let max_payload = self.jetstream.client().server_info().max_payload;
        self.claims = std::sync::Arc::new(ClaimCheck::new(
            self.jetstream.clone(),
            &self.subjects,
            settings,
            max_payload,
        ));
        self
    }

    /// Reads sessions from the events stream, whatever the server says of
    /// this user's rights: the router's own client, which serves the reads
    /// of the others.
    #[must_use]
    pub fn reading_the_stream(self) -> Self {
        let reads = OnceCell::new_with(Some(Reads::Stream));
        Self {
            reads: std::sync::Arc::new(reads),
            ..self
        }
    }

    /// The subject names in use.
    #[must_use]
    pub fn subjects(&self) -> &Subjects {
        &self.subjects
    }

    pub(crate) fn publisher(&self) -> &Publisher {
        &self.publisher
    }

    /// The JetStream context in use.
    #[must_use]
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.jetstream
    }

    /// The claim-check store large parts are read from.
    pub(crate) fn claims(&self) -> &std::sync::Arc<ClaimCheck> {
        &self.claims
    }

    /// Creates Baton's streams where they are missing (once per client).
    ///
    /// # Errors
    ///
    /// When JetStream cannot be reached, or refuses to create a stream.
    pub async fn ensure_streams(&self) -> Result<(), Error> {
        let reads = self.reads().await;
        self.provisioned
            .get_or_try_init(|| async {
                match reads {
                    Reads::Stream => {
                        provision::provision(&self.publisher, &self.subjects, &self.streams).await
                    }
                    // It sends tasks; the router reads sessions for it.
                    Reads::Router => {
                        provision::provision_tasks(&self.publisher, &self.subjects, &self.streams)
                            .await
                    }
                }
            })
            .await
            .map(|_| ())
    }

    /// Where this client reads sessions: the events stream when its NATS
    /// user may read it (as the server reports), else the router.
    async fn reads(&self) -> Reads {
        *self
            .reads
            .get_or_init(|| async {
                let probe = format!(
                    "$JS.API.CONSUMER.CREATE.{}.probe.{}",
                    self.subjects.events_stream(),
                    self.subjects.events(Uuid::nil())
                );
                if self
                    .permissions
                    .allows(&self.jetstream.client(), &probe)
                    .await
                {
                    Reads::Stream
                } else {
                    Reads::Router
                }
            })
            .await
    }

    /// Publishes a task to `baton.ingress` and waits until it is durable.
    ///
    /// # Errors
    ///
    /// When the streams cannot be provisioned or the publish is not acknowledged.
    pub async fn submit(&self, envelope: &Envelope) -> Result<(), Error> {
        self.publish(self.subjects.ingress(), envelope).await
    }

    /// Publishes a task straight to agent type `agent`, bypassing the router.
    ///
    /// # Errors
    ///
    /// As [`Client::submit`].
    /// [`ErrorKind::NoRoute`] when no worker serves `agent` (its consumer
    /// does not exist); a pool that is only down still takes the task.
    pub async fn submit_to(&self, agent: &AgentName, envelope: &Envelope) -> Result<(), Error> {
        self.ensure_streams().await?;
        self.check_served(agent).await?;
        let mut envelope = envelope.clone();
        let rollouts = self.rollouts().await;
        let sent = addressed(
            (rollouts, &self.subjects),
            Sending::Direct,
            agent,
            &mut envelope,
        );
        self.publish(sent.subject, &envelope).await?;
        self.watch_deadline(sent.timer, envelope.session).await;
        Ok(())
    }

    /// Moves `envelope`'s pins to versions whose conversations move on
    /// (`baton retire --upgrade-conversations`, or a spec's `upgrade =
    /// "next_turn"`) to the current version, unless they are current: a
    /// conversation's next turn, at a turn boundary.
    pub(crate) async fn unpin_upgrading(&self, envelope: &mut Envelope) {
        if envelope.versions.is_empty() {
            return;
        }
        let rollouts = self.rollouts().await;
        let session = envelope.session;
        for (agent, version) in &mut envelope.versions {
            let Some(rollout) = rollouts.get(agent) else {
                continue;
            };
            if rollout.upgrading.contains(version) && rollout.current != *version {
                tracing::info!(%agent, from = %version, to = %rollout.current, %session, "the conversation moves on to the current version");
                version.clone_from(&rollout.current);
            }
        }
    }

    /// The agent types' rollouts, followed from the first use.
    pub(crate) async fn rollouts(&self) -> &Rollouts {
        self.rollouts
            .get_or_init(|| {
                Rollouts::follow(&self.publisher, &self.subjects, self.streams.replicas)
            })
            .await
    }

    /// Whether work pinned to `version` of `agent` will be taken: a worker
    /// of that version has run (its consumer holds what is sent to it) and
    /// the version is not retired.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NoRoute`] naming the fix when it will not be;
    /// [`ErrorKind::JetStream`] when the server cannot be asked.
    pub async fn check_version(&self, agent: &AgentName, version: &Version) -> Result<(), Error> {
        let no_route = |why: String| Error::new(ErrorKind::NoRoute, why);
        if !baton_nats::nats::served::is_version_served(
            self.jetstream(),
            &self.subjects,
            agent,
            version,
        )
        .await?
        {
            return Err(no_route(format!(
                "no worker of version {version} of agent type {agent} has run (there is no consumer {} on the tasks stream): start one first (`baton worker --version {version}`, or `version = \"{version}\"` in its spec)",
                Subjects::version_consumer(agent, version)
            )));
        }
        let rollout = self.rollouts().await.get(agent.as_str());
        if rollout.is_some_and(|r| r.retired.iter().any(|v| v == version.as_str())) {
            return Err(no_route(format!(
                "version {version} of agent type {agent} is retired: its workers take nothing (`baton versions {agent}` lists the others)"
            )));
        }
        Ok(())
    }

    /// Starts the deadline watch of `session`'s task, sent past the router
    /// (which would have started it), with the `timer` its addressing gave.
    /// The task is durable already: a missing timer only leaves a queued
    /// task to be failed by the worker that takes it.
    pub(crate) async fn watch_deadline(&self, timer: Option<Outgoing>, session: Uuid) {
        if let Some(timer) = timer {
            if let Err(err) = self.publisher.publish_one(&timer).await {
                tracing::warn!(error = %err, %session, "the deadline watch did not start");
            }
        }
    }

    /// Whether `agent` has workers, as an error that names the agent type.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NoRoute`] when no worker serves it, or when the server
    /// cannot be asked.
    pub async fn check_served(&self, agent: &AgentName) -> Result<(), Error> {
        if self.served.ask(agent).await? {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::NoRoute,
                baton_nats::nats::served::unserved(agent),
            ))
        }
    }

    /// Cancels `session`: records the cancel, which every worker follows
    /// (dropping the session's messages and stopping a running agent), and
    /// ends the session with a `failed` event, reason `cancelled`. Returns
    /// that event; or, for a session that had ended already, its last event
    /// (`Err` is never used for that).
    ///
    /// # Errors
    ///
    /// When the cancel or the event cannot be made durable.
    pub async fn cancel(&self, session: Uuid, detail: &str) -> Result<Cancel, Error> {
        if self.reads().await == Reads::Router {
            return crate::client::reading::cancel(
                &self.jetstream.client(),
                &self.subjects,
                session,
                detail,
            )
            .await;
        }
        self.ensure_streams().await?;
        let last = baton_nats::state::session::last_event(&self.jetstream, &self.subjects, session)
            .await?;
        if let Some(last) = last.filter(|event| event.kind.is_terminal()) {
            return Ok(Cancel::Ended(last));
        }
        let bucket = baton_nats::pipeline::cancel::bucket(
            &self.jetstream,
            &self.subjects,
            self.streams.replicas,
        )
        .await?;
        bucket
            .put(session.to_string(), Bytes::from(detail.to_owned()))
            .await
            .map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "cannot record the cancel", err)
            })?;
        let last = baton_nats::state::session::last_event(&self.jetstream, &self.subjects, session)
            .await?;
        let event = baton_nats::pipeline::cancel::cancelled_event(session, detail, last.as_ref());
        let payload = event.to_msgpack().map_err(|err| {
            Error::with_source(ErrorKind::Config, "cannot encode the cancel event", err)
        })?;
        let outgoing = Outgoing {
            class: Class::Ending(self.subjects.events_stream()),
            subject: self.subjects.events(session),
            id: event.id,
            payload: Bytes::from(payload),
            headers: Default::default(),
        };
        match self.publisher.publish_ending(&[&outgoing]).await? {
            baton_nats::nats::publish::Ended::Now => Ok(Cancel::Cancelled(event)),
            // It ended meanwhile, by another path: that end stands.
            baton_nats::nats::publish::Ended::Before => {
                let last = baton_nats::state::session::last_event(
                    &self.jetstream,
                    &self.subjects,
                    session,
                )
                .await?;
                Ok(last.map_or(Cancel::Cancelled(event), Cancel::Ended))
            }
        }
    }

    async fn publish(&self, subject: String, envelope: &Envelope) -> Result<(), Error> {
        if let Some(detail) = envelope.deadline_out_of_range(baton_proto::now_ms()) {
            return Err(Error::new(ErrorKind::Config, detail));
        }
        self.ensure_streams().await?;
        let payload = envelope
            .to_msgpack()
            .map_err(|err| Error::with_source(ErrorKind::Config, "cannot encode the task", err))?;
        let payload = self.claims.pack(Bytes::from(payload)).await?;
        let span = tracing::info_span!("baton.submit", session = %envelope.session, envelope = %envelope.id);
        let mut headers = async_nats::HeaderMap::new();
        // A new session is a new trace, whether or not this process exports spans.
        trace::inject(&span, &trace::root(), &mut headers);
        let outgoing = Outgoing {
            class: Class::Plain,
            subject,
            id: envelope.id,
            payload,
            headers: headers.into(),
        };
        if let Some(subject) = self
            .publisher
            .forbidden(std::slice::from_ref(&outgoing))
            .await
        {
            return Err(baton_nats::nats::publish::forbidden(subject));
        }
        self.publisher.publish_one(&outgoing).await
    }
}

/// What a client under its own role does on NATS: it submits tasks (to the
/// ingress, or to an agent type it checks is served), asks the registry,
/// gives feedback and reads notebooks through the registry, reads and
/// cancels sessions through the router, and stores large tasks'
/// claims without reading any. Reading the events stream itself is
/// [`follow::footprint`], an operator's.
#[must_use]
pub fn footprint(subjects: &Subjects) -> Footprint {
    // Only the tasks stream: the router reads sessions for a client, one
    // session per request, since JetStream's read calls (a consumer's
    // filter, a stream's subject list, a get by sequence) accept a wildcard
    // or a number where the session would go.
    Footprint::stream_info(&subjects.tasks_stream())
        .publishes([
            subjects.ingress(),
            subjects.lookup(),
            // `baton feedback` and `baton notebook` (the registry checks them).
            subjects.feedback(),
            subjects.notebook(),
            // `baton watch`, `send --wait`, `cancel`, the MCP gateway.
            subjects.session_read_any(),
            subjects.session_cancel_any(),
        ])
        .with(baton_nats::nats::served::footprint(subjects))
        .with(baton_nats::nats::claimcheck::write_only_footprint(subjects))
        .noting(
            "every client user given this block may subscribe to its inbox prefix, where the router's \
             answers (a session's events) arrive: give each client user its own --inbox-prefix, and \
             generate its block with the same prefix",
        )
}
