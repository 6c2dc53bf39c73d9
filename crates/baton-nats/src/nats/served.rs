//! Which agent types have workers. An agent type is served when its durable
//! consumer `agent-<A>` exists on the tasks stream: its first worker creates
//! it, and it outlives the workers. So a pool that is briefly down is still
//! served (its tasks wait), while a typo or a type nobody deployed is not,
//! and a handoff to it fails at once with `no_route`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, context::ConsumerInfoErrorKind};
use baton_proto::footprint::{Footprint, api};
use baton_proto::{AgentName, Subjects};

use crate::error::{Error, ErrorKind};

/// How long a positive answer is trusted.
const KNOWN_FOR: Duration = Duration::from_secs(60);

/// Whether `agent` has a durable consumer on the tasks stream.
///
/// # Errors
///
/// When the server cannot be asked (not when the answer is no).
pub async fn is_served(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    agent: &AgentName,
) -> Result<bool, Error> {
    has_consumer(jetstream, subjects, &Subjects::agent_consumer(agent))
        .await
        .map_err(|err| {
            Error::with_source(
                ErrorKind::JetStream,
                format!("cannot tell whether agent type {agent} has workers"),
                err,
            )
        })
}

/// Whether a worker of `version` of `agent` has run: its durable consumer
/// `agent-<A>@<V>` exists on the tasks stream (it outlives the workers, and
/// holds what is sent to the version until one pulls it).
///
/// # Errors
///
/// When the server cannot be asked (not when the answer is no).
pub async fn is_version_served(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    agent: &AgentName,
    version: &baton_proto::Version,
) -> Result<bool, Error> {
    let consumer = Subjects::version_consumer(agent, version);
    has_consumer(jetstream, subjects, &consumer)
        .await
        .map_err(|err| {
            Error::with_source(
                ErrorKind::JetStream,
                format!("cannot tell whether version {version} of agent type {agent} has workers"),
                err,
            )
        })
}

/// Whether the tasks stream has a consumer named `consumer`.
async fn has_consumer(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    consumer: &str,
) -> Result<bool, Box<dyn std::error::Error + Send + Sync>> {
    let stream = jetstream
        .get_stream_no_info(subjects.tasks_stream())
        .await?;
    match stream.consumer_info(consumer).await {
        Ok(_) => Ok(true),
        Err(err)
            if matches!(
                err.kind(),
                ConsumerInfoErrorKind::NotFound | ConsumerInfoErrorKind::StreamNotFound
            ) =>
        {
            Ok(false)
        }
        Err(err) => Err(err.into()),
    }
}

/// The message for a target no worker serves.
pub fn unserved(agent: &AgentName) -> String {
    format!(
        "no worker serves agent type \"{agent}\" (there is no consumer {} on the tasks stream): check the name, or start `baton worker {agent}`",
        Subjects::agent_consumer(agent)
    )
}

/// [`is_served`] with positive answers remembered for a minute, so the
/// check costs a round trip only for agent types not seen lately.
#[derive(Debug)]
pub struct Served {
    jetstream: jetstream::Context,
    subjects: Subjects,
    known: Mutex<HashMap<AgentName, Instant>>,
}

impl Served {
    pub fn new(jetstream: jetstream::Context, subjects: Subjects) -> Self {
        Self {
            jetstream,
            subjects,
            known: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `agent` is served, remembering a yes for a minute.
    pub async fn ask(&self, agent: &AgentName) -> Result<bool, Error> {
        let now = Instant::now();
        if let Ok(known) = self.known.lock() {
            if known
                .get(agent)
                .is_some_and(|at| now.duration_since(*at) < KNOWN_FOR)
            {
                return Ok(true);
            }
        }
        let served = Box::pin(is_served(&self.jetstream, &self.subjects, agent)).await?;
        if served {
            if let Ok(mut known) = self.known.lock() {
                known.insert(agent.clone(), now);
            }
        }
        Ok(served)
    }

    /// `Err(why)` when `agent` is known not to be served. When the server
    /// cannot be asked, the target is given the benefit of the doubt.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NoRoute`] when no worker serves `agent`.
    pub async fn check(&self, agent: &AgentName) -> Result<(), Error> {
        match self.ask(agent).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::new(ErrorKind::NoRoute, unserved(agent))),
            Err(err) => {
                tracing::warn!(error = %err, "assuming the target is served");
                Ok(())
            }
        }
    }
}

/// What the check uses: the info of any consumer of the tasks stream.
#[must_use]
pub fn footprint(subjects: &Subjects) -> Footprint {
    Footprint::new().publishes([api(format_args!(
        "CONSUMER.INFO.{}.*",
        subjects.tasks_stream()
    ))])
}
