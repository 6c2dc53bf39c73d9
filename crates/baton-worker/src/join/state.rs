//! The join's state and its key-value bucket.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use baton_proto::Envelope;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::delegate::{ChildResult, DelegateMode, Results};
use crate::error::{Error, ErrorKind};

/// One child as the join remembers it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct JoinChild {
    pub(super) agent: String,
    pub(super) input: String,
    pub(super) tag: Option<String>,
    /// Messages kept: `None` for all.
    pub(super) keep: Option<usize>,
    /// A chain's recovery step stands in for this step.
    pub(super) recover_for: Option<usize>,
}

/// A recorded result and the message that recorded it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Slot {
    pub(super) result: ChildResult,
    pub(super) by: Uuid,
}

/// A delegation in progress.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct JoinState {
    /// The delegating envelope with the agent's update applied.
    pub(super) envelope: Envelope,
    pub(super) mode: DelegateMode,
    pub(super) children: Vec<JoinChild>,
    pub(super) slots: Vec<Option<Slot>>,
    /// Children sent so far (serial and chain send one at a time).
    pub(super) started: usize,
    pub(super) deadline: Option<u64>,
    /// Depth of the children.
    pub(super) depth: u32,
    /// The message that completed the join; only it runs the continuation.
    pub(super) fired_by: Option<Uuid>,
    /// Continuation calls so far (async mode calls it per result).
    pub(super) reports: u32,
}

impl JoinState {
    /// The children that are steps of their own (not recovery steps).
    pub(super) fn main(&self) -> usize {
        self.children
            .iter()
            .filter(|c| c.recover_for.is_none())
            .count()
    }

    pub(super) fn results(&self, latest: Option<u32>) -> Results {
        let main = self.main();
        Results {
            mode: self.mode.clone(),
            results: self.slots[..main]
                .iter()
                .flatten()
                .map(|slot| slot.result.clone())
                .collect(),
            total: main,
            latest,
        }
    }

    pub(super) fn all_in(&self) -> bool {
        self.slots[..self.main()].iter().all(Option::is_some)
    }
}

/// The join bucket.
#[derive(Clone)]
pub(crate) struct Joins {
    store: kv::Store,
}

impl Joins {
    /// Opens `bucket`, creating it if it is missing.
    pub(crate) async fn open(jetstream: &jetstream::Context, bucket: &str) -> Result<Self, Error> {
        let store = match jetstream.get_key_value(bucket).await {
            Ok(store) => store,
            Err(_) => jetstream
                .create_key_value(kv::Config {
                    bucket: bucket.to_owned(),
                    description: "Baton: delegations waiting for their children".to_owned(),
                    history: 1,
                    max_age: Duration::from_secs(7 * 24 * 3600),
                    storage: jetstream::stream::StorageType::File,
                    ..Default::default()
                })
                .await
                .map_err(|err| {
                    Error::with_source(
                        ErrorKind::JetStream,
                        format!("cannot open the join bucket {bucket}"),
                        err,
                    )
                })?,
        };
        Ok(Self { store })
    }

    pub(super) async fn load(&self, id: Uuid) -> Result<Option<(JoinState, u64)>, Error> {
        let entry =
            self.store.entry(id.to_string()).await.map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "cannot read a join", err)
            })?;
        let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
            return Ok(None);
        };
        let state = rmp_serde::from_slice(&entry.value)
            .map_err(|err| Error::with_source(ErrorKind::Decode, "unreadable join state", err))?;
        Ok(Some((state, entry.revision)))
    }

    /// Creates the join; `false` if it already exists (a redelivery).
    pub(super) async fn create(&self, id: Uuid, state: &JoinState) -> Result<bool, Error> {
        match self.store.create(id.to_string(), encode(state)?).await {
            Ok(_) => Ok(true),
            Err(err) if err.kind() == kv::CreateErrorKind::AlreadyExists => Ok(false),
            Err(err) => Err(Error::with_source(
                ErrorKind::JetStream,
                "cannot create a join",
                err,
            )),
        }
    }

    /// Compare-and-swap; `false` when someone else changed the join first.
    pub(super) async fn swap(
        &self,
        id: Uuid,
        state: &JoinState,
        revision: u64,
    ) -> Result<bool, Error> {
        match self
            .store
            .update(id.to_string(), encode(state)?, revision)
            .await
        {
            Ok(_) => Ok(true),
            Err(err) if err.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(false),
            Err(err) => Err(Error::with_source(
                ErrorKind::JetStream,
                "cannot update a join",
                err,
            )),
        }
    }
}

fn encode(state: &JoinState) -> Result<bytes::Bytes, Error> {
    rmp_serde::to_vec_named(state)
        .map(bytes::Bytes::from)
        .map_err(|err| Error::with_source(ErrorKind::Decode, "cannot encode a join", err))
}
