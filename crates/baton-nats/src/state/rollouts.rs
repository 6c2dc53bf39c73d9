//! Each agent type's rollout of versions ([`Rollout`]), in the bucket
//! `BATON_ROLLOUTS` (a key per agent type), followed into memory by every
//! process that sends work: a change reaches them as the server pushes it,
//! in milliseconds. The record is changed only by compare-and-swap.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use baton_proto::{AgentName, Rollout, Subjects, Version};

use crate::error::{Error, ErrorKind};
use crate::nats::watched::{Seen, follow_in_background, watch};
use crate::state::Bucket;

/// How long a process waits at start for the stored rollouts.
const READY_WITHIN: Duration = Duration::from_secs(2);

/// The rollouts of a deployment, as last seen.
#[derive(Clone, Default)]
pub struct Rollouts {
    known: Arc<RwLock<HashMap<String, Rollout>>>,
    /// The watch, which stops when the last copy is dropped.
    watch: Option<Arc<Watch>>,
}

struct Watch(tokio::task::JoinHandle<()>);

impl Drop for Watch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl std::fmt::Debug for Rollouts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rollouts").finish_non_exhaustive()
    }
}

impl Rollouts {
    /// Follows the bucket (created when missing) into memory; returns once
    /// the stored rollouts are read, or after a moment, reading on. When
    /// the bucket cannot be opened now (the server does not answer) it
    /// returns at once, knowing no rollout, and keeps trying in the
    /// background. A user whose permissions do not grant the bucket (as
    /// the server reports them) does not follow it at all.
    pub async fn follow(
        publisher: &crate::nats::publish::Publisher,
        subjects: &Subjects,
        replicas: usize,
    ) -> Self {
        let bucket = subjects.rollouts_bucket();
        if !publisher
            .may_publish(&format!("$JS.API.STREAM.INFO.KV_{bucket}"))
            .await
        {
            tracing::debug!(%bucket, "this user may not read the rollouts: sending as if no agent type were versioned");
            return Self::default();
        }
        let jetstream = publisher.jetstream();
        let known: Arc<RwLock<HashMap<String, Rollout>>> = Arc::default();
        let open = {
            let (jetstream, subjects) = (jetstream.clone(), subjects.clone());
            move || {
                let (jetstream, subjects) = (jetstream.clone(), subjects.clone());
                async move { Bucket::Rollouts.open(&jetstream, &subjects, replicas).await }
            }
        };
        let seen = {
            let known = known.clone();
            move |seen: Seen<'_>| remember(&known, seen)
        };
        let ready_within = match open().await {
            Ok(_) => READY_WITHIN,
            Err(err) => {
                tracing::debug!(error = %err, "the rollouts cannot be read now; sending as if no agent type were versioned, and trying again");
                Duration::ZERO
            }
        };
        let what = "rollouts of versions";
        let task = if ready_within.is_zero() {
            follow_in_background(what, bucket, open, seen).0
        } else {
            watch(what, bucket, open, seen, ready_within).await
        };
        Self {
            known,
            watch: Some(Arc::new(Watch(task))),
        }
    }

    /// The rollout of `agent`, if it is versioned.
    #[must_use]
    pub fn get(&self, agent: &str) -> Option<Rollout> {
        let known = self.known.read().unwrap_or_else(|e| e.into_inner());
        known.get(agent).cloned()
    }

    /// Whether `agent` is versioned (has a rollout).
    #[must_use]
    pub fn is_versioned(&self, agent: &AgentName) -> bool {
        let known = self.known.read().unwrap_or_else(|e| e.into_inner());
        known.contains_key(agent.as_str())
    }

    /// The version a session or conversation with id `sticky` starts on at
    /// `agent`, when `agent` is versioned.
    #[must_use]
    pub fn choose(&self, agent: &AgentName, sticky: &str) -> Option<Version> {
        let known = self.known.read().unwrap_or_else(|e| e.into_inner());
        let chosen = known.get(agent.as_str())?.choose(sticky);
        // As read from the bucket: checked before it names a subject.
        Version::new(chosen.as_str()).ok()
    }

    /// Whether the watch is running (false for [`Rollouts::default`]).
    #[must_use]
    pub fn is_followed(&self) -> bool {
        self.watch.is_some()
    }
}

/// What the rollouts use: their bucket, read, watched and written (and
/// created when missing).
#[must_use]
pub fn footprint(subjects: &Subjects) -> baton_proto::footprint::Footprint {
    let bucket = subjects.rollouts_bucket();
    // Written too: a worker makes its version the first, a spec's
    // `upgrade = "next_turn"` is noted, operators roll out and retire.
    baton_proto::footprint::Footprint::kv(&bucket)
        .with(baton_proto::footprint::Footprint::kv_watcher(&bucket))
}

/// What the watch saw, kept in `known`. A lost watch keeps what it knew:
/// sending by the last rollout seen beats sending as if there were none.
fn remember(known: &RwLock<HashMap<String, Rollout>>, seen: Seen<'_>) {
    let Seen::Entry(entry) = seen else {
        return;
    };
    let mut known = known.write().unwrap_or_else(|e| e.into_inner());
    match entry.operation {
        kv::Operation::Put => match rmp_serde::from_slice(&entry.value) {
            Ok(rollout) => {
                known.insert(entry.key.clone(), rollout);
            }
            Err(err) => {
                tracing::warn!(key = %entry.key, error = %err, "a rollout that cannot be read is ignored");
            }
        },
        kv::Operation::Delete | kv::Operation::Purge => {
            known.remove(&entry.key);
        }
    }
}

/// The bucket, opened (created when missing).
///
/// # Errors
///
/// When JetStream refuses the bucket.
pub async fn bucket(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    replicas: usize,
) -> Result<kv::Store, Error> {
    Bucket::Rollouts.open(jetstream, subjects, replicas).await
}

/// `agent`'s rollout and its revision, if it has one.
///
/// # Errors
///
/// When the bucket cannot be read, or holds something else there.
pub async fn read(store: &kv::Store, agent: &str) -> Result<Option<(Rollout, u64)>, Error> {
    let entry = store.entry(agent).await.map_err(|err| {
        Error::with_source(
            ErrorKind::JetStream,
            format!("cannot read the rollout of {agent}"),
            err,
        )
    })?;
    let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
        return Ok(None);
    };
    let rollout = rmp_serde::from_slice(&entry.value).map_err(|err| {
        Error::with_source(
            ErrorKind::Decode,
            format!("the rollout of {agent} cannot be read"),
            err,
        )
    })?;
    Ok(Some((rollout, entry.revision)))
}

/// Stores `rollout` over `revision` (0: creates it); `false` when another
/// writer came first.
///
/// # Errors
///
/// When JetStream refuses the write for another reason.
pub async fn write(store: &kv::Store, rollout: &Rollout, revision: u64) -> Result<bool, Error> {
    let bytes = rmp_serde::to_vec_named(rollout)
        .map_err(|err| Error::with_source(ErrorKind::Encode, "cannot encode a rollout", err))?;
    let key = rollout.agent.as_str();
    let failed = |err: &dyn std::fmt::Display| {
        Error::new(
            ErrorKind::JetStream,
            format!("cannot store the rollout of {key}: {err}"),
        )
    };
    if revision == 0 {
        return match store.create(key, bytes.into()).await {
            Ok(_) => Ok(true),
            Err(err) if err.kind() == kv::CreateErrorKind::AlreadyExists => Ok(false),
            Err(err) => Err(failed(&err)),
        };
    }
    match store.update(key, bytes.into(), revision).await {
        Ok(_) => Ok(true),
        Err(err) if err.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(false),
        Err(err) => Err(failed(&err)),
    }
}
