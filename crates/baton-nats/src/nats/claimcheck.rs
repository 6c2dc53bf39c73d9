//! The claim-check store: the large parts of envelopes and events, kept in
//! a JetStream object store bucket (`BATON_CLAIMS`) under their content
//! hash, so a context of any size travels in messages of bounded size.
//!
//! The format is [`baton_proto::check_out`] / [`baton_proto::restore`];
//! this module adds the bucket: objects are written once (an object that
//! exists is not written again), read back before an agent runs, and
//! expire with the bucket's `max_age`.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream::{self, object_store};
use baton_proto::Subjects;
use baton_proto::footprint::{Footprint, api};
use bytes::Bytes;
use tokio::io::AsyncReadExt;
use tokio::sync::OnceCell;

use crate::error::{Error, ErrorKind};

/// Settings of the claim-check.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimSettings {
    /// Payloads over this many bytes are claim-checked; `None` means half
    /// the server's `max_payload`, read from the connection.
    pub threshold: Option<usize>,
    /// The smallest text kept apart; smaller parts stay inline.
    pub min_part: usize,
    /// How long objects are kept (the bucket's `max_age`, used when the
    /// bucket is created). Sessions must end within it.
    pub max_age: Duration,
    /// The bucket's size limit in bytes (used when the bucket is created);
    /// `None` for no limit.
    pub max_bytes: Option<u64>,
    /// The largest envelope, with its claims restored, a worker accepts.
    pub max_restored: usize,
    /// Replicas of the bucket (used when it is created).
    pub replicas: usize,
}

impl Default for ClaimSettings {
    fn default() -> Self {
        Self {
            threshold: None,
            min_part: 16 * 1024,
            max_age: Duration::from_secs(7 * 24 * 3600),
            max_bytes: None,
            max_restored: 256 * 1024 * 1024,
            replicas: 1,
        }
    }
}

/// Why a payload could not be claim-checked or restored.
#[derive(Debug)]
pub enum ClaimFailure {
    /// Retrying cannot help: an object is gone or does not match, or the
    /// payload is not a map.
    Permanent(String),
    /// The store could not be reached; a later attempt may succeed.
    Transient(Error),
}

/// The claim-check bucket of one process, opened on first use. Workers and
/// [`crate::Client`] use it on their own; other stores of envelopes (the
/// human inbox) use [`ClaimCheck::pack`] and [`ClaimCheck::unpack`].
pub struct ClaimCheck {
    jetstream: jetstream::Context,
    bucket: String,
    settings: ClaimSettings,
    threshold: usize,
    store: OnceCell<object_store::ObjectStore>,
}

impl std::fmt::Debug for ClaimCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimCheck")
            .field("bucket", &self.bucket)
            .field("threshold", &self.threshold)
            .finish_non_exhaustive()
    }
}

impl ClaimCheck {
    /// The claim-check of the deployment `subjects` on `client`'s server.
    #[must_use]
    pub fn open(client: &async_nats::Client, subjects: &Subjects, settings: ClaimSettings) -> Self {
        let max_payload = client.server_info().max_payload;
        Self::new(
            jetstream::new(client.clone()),
            subjects,
            settings,
            max_payload,
        )
    }

    /// `payload` (an encoded envelope or event) in a form that fits one
    /// message: unchanged when small, else with its large parts stored.
    ///
    /// # Errors
    ///
    /// When the bucket cannot be written, or `payload` is not a map.
    pub async fn pack(&self, payload: Bytes) -> Result<Bytes, Error> {
        self.check_out(payload).await.map_err(|err| match err {
            ClaimFailure::Permanent(detail) => Error::new(ErrorKind::Encode, detail),
            ClaimFailure::Transient(err) => err,
        })
    }

    /// `payload` with its claims restored (unchanged when it has none).
    ///
    /// # Errors
    ///
    /// When an object is missing or the bucket cannot be read.
    pub async fn unpack(&self, payload: &[u8]) -> Result<Vec<u8>, Error> {
        self.check_in(payload).await.map_err(|err| match err {
            ClaimFailure::Permanent(detail) => Error::new(ErrorKind::Decode, detail),
            ClaimFailure::Transient(err) => err,
        })
    }

    /// The largest restored envelope accepted.
    #[must_use]
    pub fn restored_limit(&self) -> usize {
        self.settings.max_restored
    }

    /// The claim-check for a connection whose server accepts messages of
    /// `server_max_payload` bytes.
    pub fn new(
        jetstream: jetstream::Context,
        subjects: &Subjects,
        settings: ClaimSettings,
        server_max_payload: usize,
    ) -> Self {
        let threshold = settings
            .threshold
            .unwrap_or(server_max_payload / 2)
            .max(1024);
        Self {
            jetstream,
            bucket: subjects.claims_bucket(),
            settings,
            threshold,
            store: OnceCell::new(),
        }
    }

    /// Whether a payload of `len` bytes is claim-checked.
    pub fn needed(&self, len: usize) -> bool {
        len > self.threshold
    }

    /// The settings in use.
    pub fn settings(&self) -> &ClaimSettings {
        &self.settings
    }

    /// The largest restored envelope accepted.
    pub fn max_restored(&self) -> usize {
        self.settings.max_restored
    }

    async fn store(&self) -> Result<&object_store::ObjectStore, Error> {
        self.store
            .get_or_try_init(|| async {
                if let Ok(store) = self.jetstream.get_object_store(&self.bucket).await {
                    return Ok(store);
                }
                self.jetstream
                    .create_object_store(object_store::Config {
                        bucket: self.bucket.clone(),
                        description: Some(
                            "Baton: large parts of envelopes, by content hash".to_owned(),
                        ),
                        max_age: self.settings.max_age,
                        max_bytes: self
                            .settings
                            .max_bytes
                            .map_or(-1, |max| i64::try_from(max).unwrap_or(i64::MAX)),
                        storage: jetstream::stream::StorageType::File,
                        num_replicas: self.settings.replicas,
                        // Contexts are text: stored once, compressed.
                        compression: true,
                        ..Default::default()
                    })
                    .await
                    .map_err(|err| {
                        Error::with_source(
                            ErrorKind::JetStream,
                            format!("cannot open the claim-check bucket {}", self.bucket),
                            err,
                        )
                    })
            })
            .await
    }

    /// `payload` as it can be published: unchanged when it is small,
    /// otherwise with its large parts in the bucket.
    pub async fn check_out(&self, payload: Bytes) -> Result<Bytes, ClaimFailure> {
        if payload.len() <= self.threshold {
            return Ok(payload);
        }
        let checked =
            baton_proto::check_out(payload.to_vec(), self.threshold, self.settings.min_part)
                .map_err(|err| ClaimFailure::Permanent(crate::error::error_chain(&err)))?;
        let store = self.store().await.map_err(ClaimFailure::Transient)?;
        for (name, bytes) in &checked.objects {
            if store.info(name).await.is_ok() {
                continue; // Stored by an earlier hop.
            }
            store
                .put(name.as_str(), &mut bytes.as_slice())
                .await
                .map_err(|err| {
                    ClaimFailure::Transient(Error::with_source(
                        ErrorKind::Publish,
                        format!("cannot store claim-check object {name}"),
                        err,
                    ))
                })?;
        }
        tracing::debug!(
            from = payload.len(),
            to = checked.payload.len(),
            objects = checked.objects.len(),
            "claim-checked a payload"
        );
        Ok(Bytes::from(checked.payload))
    }

    /// `payload` with its claims restored from the bucket.
    pub async fn check_in(&self, payload: &[u8]) -> Result<Vec<u8>, ClaimFailure> {
        let claims = baton_proto::claims(payload)
            .map_err(|err| ClaimFailure::Permanent(crate::error::error_chain(&err)))?;
        if claims.is_empty() {
            return Ok(payload.to_vec());
        }
        let store = self.store().await.map_err(ClaimFailure::Transient)?;
        let mut objects = HashMap::new();
        let mut total = payload.len();
        for claim in claims {
            if objects.contains_key(&claim.object) {
                continue;
            }
            total = total.saturating_add(usize::try_from(claim.size).unwrap_or(usize::MAX));
            if total > self.settings.max_restored {
                return Err(ClaimFailure::Permanent(format!(
                    "the restored envelope would exceed {} bytes",
                    self.settings.max_restored
                )));
            }
            let bytes = self.fetch(store, &claim.object).await?;
            objects.insert(claim.object, bytes);
        }
        baton_proto::restore(payload, &objects)
            .map_err(|err| ClaimFailure::Permanent(crate::error::error_chain(&err)))
    }

    async fn fetch(
        &self,
        store: &object_store::ObjectStore,
        name: &str,
    ) -> Result<Vec<u8>, ClaimFailure> {
        let mut object = match store.get(name).await {
            Ok(object) => object,
            Err(err) if err.kind() == object_store::GetErrorKind::NotFound => {
                return Err(ClaimFailure::Permanent(format!(
                    "claim-check object {name} is not in {} (expired after its max age, or never stored)",
                    self.bucket
                )));
            }
            Err(err) => {
                return Err(ClaimFailure::Transient(Error::with_source(
                    ErrorKind::JetStream,
                    format!("cannot read claim-check object {name}"),
                    err,
                )));
            }
        };
        let mut bytes = Vec::new();
        object.read_to_end(&mut bytes).await.map_err(|err| {
            ClaimFailure::Transient(Error::with_source(
                ErrorKind::JetStream,
                format!("cannot read claim-check object {name}"),
                err,
            ))
        })?;
        Ok(bytes)
    }
}

/// What the claim-check uses: its object store, read and written.
#[must_use]
pub fn footprint(subjects: &Subjects) -> Footprint {
    Footprint::object_store(&subjects.claims_bucket())
}

/// What a client that only stores claims uses: whether an object is there
/// (its metadata, by name) and writing it, but no object's contents.
#[must_use]
pub fn write_only_footprint(subjects: &Subjects) -> Footprint {
    let bucket = subjects.claims_bucket();
    let stream = format!("OBJ_{bucket}");
    Footprint::stream_info(&stream).publishes([
        api(format_args!("STREAM.CREATE.{stream}")),
        api(format_args!("DIRECT.GET.{stream}.$O.{bucket}.M.*")),
        format!("$O.{bucket}.C.>"),
        format!("$O.{bucket}.M.>"),
    ])
}
