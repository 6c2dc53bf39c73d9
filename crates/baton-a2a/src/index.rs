//! The A2A tasks this gateway (or a replica) started: a key-value bucket,
//! session id → context id, agent and start time. `GetTask` reads one,
//! `ListTasks` all of them; the sessions' states come from their events.

use async_nats::jetstream::{self, kv};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// One task's record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    /// The A2A context id the client gave, or the session id.
    pub(crate) context: String,
    /// The agent type the task was sent to; `None`: the ingress.
    pub(crate) agent: Option<String>,
    /// When it started, unix ms.
    pub(crate) at: u64,
    /// The caller that sent it, when the gateway names its callers: only
    /// they read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) caller: Option<String>,
}

/// The bucket of task records.
#[derive(Clone)]
pub(crate) struct Index {
    store: kv::Store,
}

impl Index {
    /// Opens the A2A index of `subjects`' deployment, creating it if it is
    /// missing.
    pub(crate) async fn open(
        jetstream: &jetstream::Context,
        subjects: &baton_proto::Subjects,
        replicas: usize,
    ) -> Result<Self, crate::Error> {
        let store = baton_nats::state::Bucket::A2aIndex
            .open(jetstream, subjects, replicas)
            .await?;
        Ok(Self { store })
    }

    /// Records task `session`.
    pub(crate) async fn put(&self, session: Uuid, record: &Record) -> Result<(), crate::Error> {
        let bytes = serde_json::to_vec(record)
            .map_err(|err| crate::Error::store(format!("cannot encode the task: {err}")))?;
        self.store
            .put(session.to_string(), bytes.into())
            .await
            .map_err(|err| crate::Error::store(format!("cannot record the task: {err}")))?;
        Ok(())
    }

    /// Forgets task `session` (a message that was refused, so never ran).
    pub(crate) async fn forget(&self, session: Uuid) -> Result<(), crate::Error> {
        self.store
            .purge(session.to_string())
            .await
            .map_err(|err| crate::Error::store(format!("cannot forget the task: {err}")))
    }

    /// The record of task `session`, if this gateway started it.
    pub(crate) async fn get(&self, session: Uuid) -> Result<Option<Record>, crate::Error> {
        let value = self
            .store
            .get(session.to_string())
            .await
            .map_err(|err| crate::Error::store(format!("cannot read the task: {err}")))?;
        Ok(value.and_then(|bytes| serde_json::from_slice(&bytes).ok()))
    }

    /// Every recorded task, newest first.
    pub(crate) async fn all(&self) -> Result<Vec<(Uuid, Record)>, crate::Error> {
        let failed = |err: &dyn std::fmt::Display| {
            crate::Error::store(format!("cannot list the tasks: {err}"))
        };
        let mut keys = self.store.keys().await.map_err(|e| failed(&e))?;
        let mut all = Vec::new();
        while let Some(key) = keys.next().await {
            let key = key.map_err(|e| failed(&e))?;
            let Ok(session) = key.parse::<Uuid>() else {
                continue;
            };
            if let Some(record) = self.get(session).await? {
                all.push((session, record));
            }
        }
        all.sort_by_key(|(_, record)| std::cmp::Reverse(record.at));
        Ok(all)
    }
}

/// What the gateway's task index uses (its bucket, read, written and
/// listed), and the registry's feedback endpoint.
#[must_use]
pub fn footprint(subjects: &baton_proto::Subjects) -> baton_proto::Footprint {
    let bucket = subjects.a2a_bucket();
    baton_proto::Footprint::kv(&bucket)
        .with(baton_proto::Footprint::kv_watcher(&bucket))
        .publishes([subjects.feedback()])
}
