//! The join bucket: one key per open delegation (the delegating envelope's
//! id), updated by compare-and-swap. A join holds the delegating envelope
//! and the children's results, so a large one is claim-checked like an
//! envelope.

use baton_proto::footprint::Footprint;
use std::sync::Arc;

use async_nats::jetstream::{self, kv};
use uuid::Uuid;

use super::state::JoinState;
use baton_nats::ClaimCheck;
use baton_nats::{Error, ErrorKind};

/// The `BATON_JOINS` key-value bucket.
#[derive(Clone)]
pub(crate) struct JoinStore {
    store: kv::Store,
    claims: Arc<ClaimCheck>,
}

impl JoinStore {
    /// Opens the joins bucket of `subjects`' deployment, creating it if it
    /// is missing.
    pub(crate) async fn open(
        jetstream: &jetstream::Context,
        subjects: &baton_proto::Subjects,
        replicas: usize,
        claims: Arc<ClaimCheck>,
    ) -> Result<Self, Error> {
        let store = baton_nats::state::Bucket::Joins
            .open(jetstream, subjects, replicas)
            .await?;
        Ok(Self { store, claims })
    }

    /// The join and its revision, if it is open.
    pub(crate) async fn load(&self, id: Uuid) -> Result<Option<(JoinState, u64)>, Error> {
        let entry =
            self.store.entry(id.to_string()).await.map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "cannot read a join", err)
            })?;
        let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
            return Ok(None);
        };
        let value = self.claims.unpack(&entry.value).await?;
        let state = rmp_serde::from_slice(&value)
            .map_err(|err| Error::with_source(ErrorKind::Decode, "unreadable join state", err))?;
        Ok(Some((state, entry.revision)))
    }

    /// Creates the join; `false` if it already exists (a redelivery).
    pub(crate) async fn create(&self, id: Uuid, state: &JoinState) -> Result<bool, Error> {
        let value = self.claims.pack(encode(state)?).await?;
        match self.store.create(id.to_string(), value).await {
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
    pub(crate) async fn swap(
        &self,
        id: Uuid,
        state: &JoinState,
        revision: u64,
    ) -> Result<bool, Error> {
        let value = self.claims.pack(encode(state)?).await?;
        match self.store.update(id.to_string(), value, revision).await {
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
        .map_err(|err| Error::with_source(ErrorKind::Encode, "cannot encode a join", err))
}

/// What the join store uses: its bucket.
#[must_use]
pub(crate) fn footprint(subjects: &baton_proto::Subjects) -> Footprint {
    Footprint::kv(&subjects.joins_bucket())
}
