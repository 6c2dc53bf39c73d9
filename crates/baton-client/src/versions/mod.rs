//! The versions of agent types as operators see and change them: each
//! version's state in its type's rollout, its live workers, what still
//! holds it ([`Standing`]), and the rollout's changes, each made by
//! compare-and-swap ([`Versions::change`]). `baton versions`, `rollout`
//! and `retire`, and the console's versions page, read and write through
//! here, so they say the same.
//!
//! - `holding`: what still holds each version, read from every place a
//!   pinned session waits;
//! - `standing`: one type's versions as they stand.

pub mod gates;
pub(crate) mod holding;
mod standing;
mod steps;

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use baton_proto::{AgentName, LookupRequest, Rollout, Subjects, Version};
use futures::{StreamExt as _, TryStreamExt as _};

pub use holding::Holding;
pub use standing::{Gathered, Queue, Standing, VersionRow};
pub use steps::{Analysis, StepReader, StepWatch};

use baton_nats::state::rollouts;
use baton_nats::{Error, ErrorKind};

/// Reads and changes the versions of a deployment's agent types.
#[derive(Clone, Debug)]
pub struct Versions {
    jetstream: jetstream::Context,
    subjects: Subjects,
    store: kv::Store,
    registry: crate::RegistryClient,
}

impl Versions {
    /// Opens the rollouts bucket (created when missing); live workers are
    /// counted by the registry, waited for at most `registry_budget`.
    ///
    /// # Errors
    ///
    /// When the bucket cannot be opened; the message names the role whose
    /// rights it needs.
    pub async fn open(
        jetstream: jetstream::Context,
        subjects: Subjects,
        replicas: usize,
        registry_budget: Duration,
    ) -> Result<Self, Error> {
        let store = (rollouts::bucket(&jetstream, &subjects, replicas).await).map_err(|err| {
            Error::new(
                err.kind(),
                format!(
                    "cannot open the rollouts bucket ({}): reading versions needs the operator role's rights (`baton permissions operator`): {err}",
                    subjects.rollouts_bucket()
                ),
            )
        })?;
        let registry =
            crate::RegistryClient::new(jetstream.client(), &subjects).with_budget(registry_budget);
        Ok(Self {
            jetstream,
            subjects,
            store,
            registry,
        })
    }

    /// The JetStream context it reads through.
    #[must_use]
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.jetstream
    }

    /// The deployment's subjects.
    #[must_use]
    pub fn subjects(&self) -> &Subjects {
        &self.subjects
    }

    /// `agent`'s rollout and its revision, or an error that says why it
    /// has none (kind `NoRoute` for a type no worker ever served, `Config`
    /// for one whose workers name no version).
    ///
    /// # Errors
    ///
    /// As above, or when JetStream cannot be read.
    pub async fn rollout(&self, agent: &AgentName) -> Result<(Rollout, u64), Error> {
        if let Some(found) = rollouts::read(&self.store, agent.as_str()).await? {
            return Ok(found);
        }
        if baton_nats::is_served(&self.jetstream, &self.subjects, agent).await? {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "agent type {agent} has no versions yet: its workers name none. Start a worker with a version (`version = \"...\"` in its spec, or `baton worker --version V`); the first version to run becomes current"
                ),
            ));
        }
        Err(Error::new(
            ErrorKind::NoRoute,
            format!(
                "unknown agent type {agent}: no worker has ever served it (no consumer {} on the tasks stream); check the name against `baton agents`",
                Subjects::agent_consumer(agent)
            ),
        ))
    }

    /// Every versioned agent type's rollout, by agent type.
    ///
    /// # Errors
    ///
    /// When the bucket cannot be read.
    pub async fn rollouts(&self) -> Result<BTreeMap<String, Rollout>, Error> {
        let listing = |err: &dyn std::fmt::Display| {
            Error::new(
                ErrorKind::JetStream,
                format!("cannot list the rollouts: {err}"),
            )
        };
        let mut keys = match self.store.keys().await {
            Ok(keys) => keys.boxed(),
            Err(err) => return Err(listing(&err)),
        };
        let mut found = BTreeMap::new();
        while let Some(key) = keys.next().await {
            let key = key.map_err(|err| listing(&err))?;
            if let Some((rollout, _)) = rollouts::read(&self.store, &key).await? {
                found.insert(key, rollout);
            }
        }
        Ok(found)
    }

    /// What is read of `agent`'s versions, once: its consumers, its live
    /// workers, and what holds each version.
    ///
    /// # Errors
    ///
    /// When the tasks stream or a bucket that holds work cannot be read.
    pub async fn gather(&self, agent: &AgentName, rollout: &Rollout) -> Result<Gathered, Error> {
        let name = self.subjects.tasks_stream();
        let unread = |err: &dyn std::fmt::Display| {
            Error::new(
                ErrorKind::JetStream,
                format!("cannot read the consumers of {name}: {err}"),
            )
        };
        let stream = (self.jetstream.get_stream_no_info(&name).await).map_err(|e| unread(&e))?;
        let prefix = format!("{}@", Subjects::agent_consumer(agent));
        let mut queues: BTreeMap<String, Queue> = BTreeMap::new();
        let mut consumers = stream.consumers();
        while let Some(info) = consumers.try_next().await.map_err(|e| unread(&e))? {
            let queue = Queue {
                pending: info.num_pending,
                unacked: u64::try_from(info.num_ack_pending).unwrap_or(u64::MAX),
                pulling: u64::try_from(info.num_waiting).unwrap_or(u64::MAX),
            };
            if let Some(version) = info.name.strip_prefix(&prefix) {
                queues.insert(version.to_owned(), queue);
            } else if info.name == Subjects::agent_consumer(agent) {
                queues.insert(String::new(), queue);
            }
        }
        let workers = self.workers(agent).await;
        let held = self.held(agent, &rollout.upgrading).await?;
        Ok(Gathered {
            queues,
            workers,
            held,
        })
    }

    /// `agent`'s versions as they stand now.
    ///
    /// # Errors
    ///
    /// As [`Versions::rollout`] and [`Versions::gather`].
    pub async fn standing(&self, agent: &AgentName) -> Result<Standing, Error> {
        let (rollout, _) = self.rollout(agent).await?;
        let gathered = self.gather(agent, &rollout).await?;
        Ok(Standing::of(&rollout, &gathered))
    }

    /// What holds each version of `agent`; the idle conversations of the
    /// versions in `moving` are left out (they move on at their next turn).
    ///
    /// # Errors
    ///
    /// When a place that holds work cannot be read: never a count of zero.
    pub async fn held(
        &self,
        agent: &AgentName,
        moving: &[Version],
    ) -> Result<BTreeMap<String, Holding>, Error> {
        let held = holding::held(&self.jetstream, &self.subjects, agent, moving).await?;
        Ok(held
            .into_iter()
            .map(|(version, holding)| (version.into(), holding))
            .collect())
    }

    /// Changes `agent`'s rollout with `change`, by compare-and-swap: when
    /// another writer came first, `change` runs again on theirs. `change`
    /// returns whether it changed anything; the rollout as stored (or as
    /// found, when nothing changed) is returned.
    ///
    /// # Errors
    ///
    /// What `change` returns, or when the rollout cannot be read or stored.
    pub async fn change<E: From<Error>>(
        &self,
        agent: &AgentName,
        mut change: impl FnMut(&mut Rollout) -> Result<bool, E>,
    ) -> Result<Rollout, E> {
        loop {
            let (mut rollout, revision) = self.rollout(agent).await?;
            if !change(&mut rollout)? {
                return Ok(rollout);
            }
            if rollouts::write(&self.store, &rollout, revision).await? {
                return Ok(rollout);
            }
        }
    }

    /// Whether a worker of `version` of `agent` has run (its consumer
    /// exists).
    ///
    /// # Errors
    ///
    /// When JetStream cannot be read.
    pub async fn has_run(
        &self,
        agent: &AgentName,
        version: &baton_proto::Version,
    ) -> Result<bool, Error> {
        baton_nats::is_version_served(&self.jetstream, &self.subjects, agent, version).await
    }

    /// The live workers of each version of `agent`, from the registry;
    /// `None` when no registry answers.
    async fn workers(&self, agent: &AgentName) -> Option<BTreeMap<String, u32>> {
        let answer = match self.registry.lookup(&LookupRequest::default()).await {
            Ok(answer) => answer,
            Err(err) => {
                tracing::warn!(error = %err, "the registry did not answer");
                return None;
            }
        };
        let found = answer
            .candidates
            .into_iter()
            .find(|c| c.agent == agent.as_str());
        let versions = found.map(|c| c.versions).unwrap_or_default();
        Some(
            versions
                .into_iter()
                .map(|(version, n)| (version.into(), n))
                .collect(),
        )
    }
}
