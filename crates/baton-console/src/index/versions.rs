//! Which agent types are versioned (those with a rollout, followed from
//! the rollouts bucket), and the versions a session's agents ran at.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use async_nats::jetstream::{self, kv};
use baton_proto::{Event, Hop};
use futures::StreamExt;

use super::label;

/// The versions a session's versioned agents ran at, as its events name
/// them: each agent type's latest, and each worker instance's (an instance
/// runs one version, so a hop's version is its instance's even where a
/// replay moved the agent type to another version later).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Versions {
    by_agent: BTreeMap<String, String>,
    by_instance: BTreeMap<(String, String), String>,
}

impl Versions {
    /// Takes the versions `event` names: the ones the session was pinned
    /// to (on a terminal event, all a console learns of a session stored
    /// before it started), and its reporter's when that agent type is
    /// versioned. A worker of a spec that names no version labels its
    /// events with a hash of the file, which is no version work can be
    /// pinned to or `--as` can name: that agent stays a plain type.
    pub fn take(&mut self, event: &Event, versioned: &Versioned) {
        for (agent, version) in &event.versions {
            self.by_agent.insert(agent.to_string(), version.to_string());
        }
        let reported = event.agent.as_ref().zip(event.version.as_ref());
        if let Some((agent, version)) = reported.filter(|(agent, _)| {
            versioned.contains(agent) || self.by_agent.contains_key(agent.as_str())
        }) {
            self.by_agent.insert(agent.to_string(), version.to_string());
            if let Some(instance) = &event.instance {
                let key = (agent.to_string(), instance.clone());
                self.by_instance.insert(key, version.to_string());
            }
        }
    }

    /// The version that wrote `event`, if its agent type is versioned (see
    /// [`Versions::take`]).
    #[must_use]
    pub fn of_event<'a>(&'a self, event: &'a Event) -> Option<&'a str> {
        let agent = event.agent.as_deref()?;
        let known = self.of(agent)?;
        Some(event.version.as_deref().unwrap_or(known))
    }

    /// `event`'s agent as `TYPE@VERSION` (see [`Versions::of_event`]).
    #[must_use]
    pub fn event_label(&self, event: &Event) -> String {
        let agent = event.agent.as_deref().unwrap_or_default();
        label(agent, self.of_event(event))
    }

    /// The version versioned agent type `agent` ran at last.
    #[must_use]
    pub fn of(&self, agent: &str) -> Option<&str> {
        self.by_agent.get(agent).map(String::as_str)
    }

    /// The version that ran `hop`: its instance's, else its agent type's.
    #[must_use]
    pub fn of_hop(&self, hop: &Hop) -> Option<&str> {
        let key = (hop.agent.to_string(), hop.instance.clone());
        self.by_instance
            .get(&key)
            .map(String::as_str)
            .or_else(|| self.of(&hop.agent))
    }

    /// Agent type → version, for what names agents without instances (a
    /// context's messages and trace).
    #[must_use]
    pub fn by_agent(&self) -> &BTreeMap<String, String> {
        &self.by_agent
    }

    /// `agent` as `TYPE@VERSION` when a version of it ran, else `TYPE`.
    #[must_use]
    pub fn label(&self, agent: &str) -> String {
        label(agent, self.of(agent))
    }

    /// `hop`'s agent as `TYPE@VERSION` (see [`Versions::of_hop`]).
    #[must_use]
    pub fn hop_label(&self, hop: &Hop) -> String {
        label(&hop.agent, self.of_hop(hop))
    }
}

/// The agent types that are versioned: those with a rollout, in the
/// rollouts bucket, followed while the index lives ([`follow`]).
#[derive(Debug, Clone, Default)]
pub struct Versioned(Arc<RwLock<BTreeSet<String>>>);

impl Versioned {
    /// A fixed set of versioned agent types.
    #[must_use]
    pub fn of<'a>(agents: impl IntoIterator<Item = &'a str>) -> Self {
        let set = agents.into_iter().map(str::to_owned).collect();
        Self(Arc::new(RwLock::new(set)))
    }

    /// Whether `agent` has a rollout.
    #[must_use]
    pub fn contains(&self, agent: &str) -> bool {
        let set = self.0.read().unwrap_or_else(|e| e.into_inner());
        set.contains(agent)
    }

    fn take(&self, entry: &kv::Entry) {
        let mut set = self.0.write().unwrap_or_else(|e| e.into_inner());
        if entry.operation == kv::Operation::Put {
            set.insert(entry.key.clone());
        } else {
            set.remove(&entry.key);
        }
    }
}

/// Keeps `versioned` up to date from the rollouts bucket (a key per
/// versioned agent type), from its stored keys on; says `ready` once
/// they are read. The bucket is made by the first versioned worker, so
/// until it exists no agent type is versioned and the console looks again
/// now and then.
pub(super) async fn follow_rollouts(
    jetstream: jetstream::Context,
    bucket: String,
    versioned: Versioned,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    loop {
        match read_rollouts(&jetstream, &bucket, &versioned, &mut ready).await {
            Ok(()) => tracing::debug!(%bucket, "the rollouts' watch ended; watching again"),
            Err(err) => tracing::debug!(%bucket, error = %err, "cannot watch the rollouts now"),
        }
        // Nothing to wait for: labels go by the sessions' pins meanwhile.
        ready.take().map(|ready| ready.send(()));
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    }
}

async fn read_rollouts(
    jetstream: &jetstream::Context,
    bucket: &str,
    versioned: &Versioned,
    ready: &mut Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let store = jetstream.get_key_value(bucket).await?;
    let mut entries = store.watch_with_history(">").await?;
    if store.status().await?.values() == 0 {
        ready.take().map(|ready| ready.send(()));
    }
    while let Some(entry) = entries.next().await {
        let entry = entry?;
        versioned.take(&entry);
        if entry.delta == 0 {
            ready.take().map(|ready| ready.send(()));
        }
    }
    Ok(())
}
