//! The hop journal: what an LLM agent's model calls and tool calls
//! returned within one hop, stored before the hop acts on it, so that a
//! redelivered hop replays it instead of calling again.
//!
//! Keys in the `BATON_JOURNAL` bucket are `<envelope>.<step>.model` (a
//! model answer), `<envelope>.<step>.<call>.started` (a tool call about to
//! be made) and `<envelope>.<step>.<call>.result` (its result). The
//! envelope id is the same on every delivery of a message, and a replayed
//! hop reaches the same steps, since it replays the same answers.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use baton_proto::Subjects;
use baton_worker::AgentError;
use bytes::Bytes;
use serde_json::Value as Json;
use uuid::Uuid;

use crate::StartError;

/// How long entries are kept: longer than any hop is redelivered.
const KEPT: Duration = Duration::from_secs(7 * 24 * 3600);

/// What the journal holds for one tool call.
#[derive(Debug)]
pub(crate) enum Recorded {
    /// Nothing: the call was never started.
    Nothing,
    /// Started, with no result: it may or may not have run.
    Started,
    /// Its result: the text for the model, and whether it was an error.
    Result(String, bool),
}

/// One deployment's hop journal; a journal without a bucket records nothing.
#[derive(Debug, Default)]
pub(crate) struct Journal {
    bucket: Option<kv::Store>,
    /// The largest value the bucket takes (the server's `max_payload`, less room for headers).
    limit: usize,
}

impl Journal {
    /// Opens the bucket, creating it with `replicas` when it is missing.
    ///
    /// # Errors
    ///
    /// When JetStream refuses the bucket.
    pub(crate) async fn open(
        client: &async_nats::Client,
        subjects: &Subjects,
        replicas: usize,
    ) -> Result<Self, StartError> {
        let config = kv::Config {
            bucket: subjects.journal_bucket(),
            description: "Baton: hop journals of LLM agents".to_owned(),
            history: 1,
            max_age: KEPT,
            storage: jetstream::stream::StorageType::File,
            num_replicas: replicas,
            ..Default::default()
        };
        let bucket = baton_worker::key_value(&jetstream::new(client.clone()), config)
            .await
            .map_err(|err| StartError::new(format!("cannot open the hop journal: {err}")))?;
        Ok(Self {
            bucket: Some(bucket),
            limit: client.server_info().max_payload.saturating_sub(4096),
        })
    }

    /// The largest tool result the journal records; a larger one is
    /// reported to the model as an error instead.
    pub(crate) fn limit(&self) -> usize {
        if self.bucket.is_some() {
            self.limit
        } else {
            usize::MAX
        }
    }

    /// The recorded model answer of `step`.
    pub(crate) async fn answer(
        &self,
        envelope: Uuid,
        step: u32,
    ) -> Result<Option<Json>, AgentError> {
        let Some(bytes) = self.get(&format!("{envelope}.{step}.model")).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|err| {
            AgentError::fatal(format!("the hop journal holds an unreadable answer: {err}"))
        })
    }

    /// Records the model answer of `step`.
    pub(crate) async fn record_answer(
        &self,
        envelope: Uuid,
        step: u32,
        answer: &Json,
    ) -> Result<(), AgentError> {
        let bytes = serde_json::to_vec(answer).unwrap_or_default();
        self.put(&format!("{envelope}.{step}.model"), bytes).await
    }

    /// What is recorded of call `call` of `step`.
    pub(crate) async fn call(
        &self,
        envelope: Uuid,
        step: u32,
        call: usize,
    ) -> Result<Recorded, AgentError> {
        let prefix = format!("{envelope}.{step}.{call}");
        if let Some(bytes) = self.get(&format!("{prefix}.result")).await? {
            let (is_error, text) = bytes
                .split_first()
                .map_or((false, &[][..]), |(flag, text)| (*flag == 1, text));
            return Ok(Recorded::Result(
                String::from_utf8_lossy(text).into_owned(),
                is_error,
            ));
        }
        Ok(match self.get(&format!("{prefix}.started")).await? {
            Some(_) => Recorded::Started,
            None => Recorded::Nothing,
        })
    }

    /// Records that call `call` of `step` is about to be made.
    pub(crate) async fn record_start(
        &self,
        envelope: Uuid,
        step: u32,
        call: usize,
    ) -> Result<(), AgentError> {
        self.put(&format!("{envelope}.{step}.{call}.started"), Vec::new())
            .await
    }

    /// Records the result of call `call` of `step`.
    pub(crate) async fn record_result(
        &self,
        envelope: Uuid,
        step: u32,
        call: usize,
        text: &str,
        is_error: bool,
    ) -> Result<(), AgentError> {
        let mut bytes = vec![u8::from(is_error)];
        bytes.extend_from_slice(text.as_bytes());
        self.put(&format!("{envelope}.{step}.{call}.result"), bytes)
            .await
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>, AgentError> {
        let Some(bucket) = &self.bucket else {
            return Ok(None);
        };
        bucket
            .get(key)
            .await
            .map_err(|err| AgentError::retryable(format!("cannot read the hop journal: {err}")))
    }

    async fn put(&self, key: &str, value: Vec<u8>) -> Result<(), AgentError> {
        let Some(bucket) = &self.bucket else {
            return Ok(());
        };
        bucket
            .put(key, value.into())
            .await
            .map(drop)
            .map_err(|err| {
                AgentError::retryable(format!("cannot record in the hop journal: {err}"))
            })
    }
}
