//! The hop journal: what an LLM agent's model calls and tool calls
//! returned within one hop, stored before the hop acts on it, so that a
//! redelivered hop replays it instead of calling again.
//!
//! Keys in the `BATON_JOURNAL` bucket are `<envelope>.<step>.model` (a
//! model answer), `<envelope>.<step>.<call>.started` (a tool call about to
//! be made) and `<envelope>.<step>.<call>.result` (its result). The
//! envelope id is the same on every delivery of a message, and a replayed
//! hop reaches the same steps, since it replays the same answers.
//!
//! A value is a MessagePack map (`{answer}`, `{text, is_error}`); one too
//! large for a message keeps its large parts in the claim-check store, as
//! an envelope does, and the journal holds the reference.
//!
//! A replayable session also indexes its answers by what was asked:
//! `<session>.asked.<request>` (the SHA-256 of the request, in hex) points
//! at the `<envelope>.<step>` that holds the answer. A replay of the session
//! looks its own requests up there, and reuses the answer (and the results
//! of the tool calls it made) when it asks exactly what was asked before.
//! A program's calls (steps, `ctx.model`, `ctx.tool`) are indexed by what
//! was asked at its place in the session ([`placed`]).

mod called;

use async_nats::jetstream::{self, kv};
use baton_proto::{JournalEntry as Entry, Subjects};
use baton_worker::AgentError;
use bytes::Bytes;
use serde_json::Value as Json;
use uuid::Uuid;

use crate::{Error, ErrorKind};
pub(crate) use called::called;

/// What a program's call, `asked` (a hex digest of the call), is indexed
/// under for replays: the digest of it at its place in the session (the
/// agent type, how many hops came before its hop, and which delegated
/// child runs it). Two hops that make the same call (a step of the same
/// name, the same model request) each keep their own result, and a replay
/// from a hop finds the hops before it recorded in time.
pub(crate) fn placed(task: &baton_worker::Task, asked: &str) -> String {
    let envelope = &task.envelope;
    let child = (envelope.parent.as_ref())
        .map(|parent| format!("{}/{}", parent.depth, parent.index.unwrap_or(0)))
        .unwrap_or_default();
    let place = format!("{}\0{}\0{child}\0{asked}", task.agent, envelope.path.len());
    baton_proto::hex(&<sha2::Sha256 as sha2::Digest>::digest(place.as_bytes()))
}

/// What the journal holds for one tool call.
#[derive(Debug)]
pub(crate) enum Recorded {
    /// Nothing: the call was never started.
    Nothing,
    /// Started, with no result: it may or may not have run. `revision`
    /// tells one start from another; `at` is when it started, unix ms.
    Started { revision: u64, at: u64 },
    /// Its result: the text for the model, and whether it was an error.
    Result(String, bool),
}

/// One deployment's hop journal; a journal without a bucket records nothing.
#[derive(Debug, Default)]
pub(crate) struct Journal {
    bucket: Option<kv::Store>,
    /// Where large values keep their large parts.
    claims: Option<baton_nats::ClaimCheck>,
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
    ) -> Result<Self, Error> {
        let bucket = baton_nats::state::Bucket::Journal
            .open(&jetstream::new(client.clone()), subjects, replicas)
            .await
            .map_err(|err| {
                Error::new(
                    ErrorKind::Nats,
                    format!("cannot open the hop journal: {err}"),
                )
            })?;
        let mut settings = baton_nats::ClaimSettings::default();
        settings.replicas = replicas;
        Ok(Self {
            bucket: Some(bucket),
            claims: Some(baton_nats::ClaimCheck::open(client, subjects, settings)),
        })
    }

    /// The recorded model answer of `step`, with where it was reused
    /// from when a replay took it from the session it replays.
    pub(crate) async fn answer(
        &self,
        envelope: Uuid,
        step: u32,
    ) -> Result<Option<Recalled>, AgentError> {
        self.recall(&format!("{envelope}.{step}")).await
    }

    /// Records the model answer of `step`; `source` names the recorded
    /// answer a replay reused (`<envelope>.<step>` of the replayed session).
    pub(crate) async fn record_answer(
        &self,
        envelope: Uuid,
        step: u32,
        answer: &Json,
        source: Option<&str>,
    ) -> Result<(), AgentError> {
        let entry = Entry {
            answer: Some(answer.to_string()),
            source: source.map(str::to_owned),
            ..Entry::default()
        };
        self.put(&format!("{envelope}.{step}.model"), &entry).await
    }

    /// Indexes the answer of `step` under what was asked (`request`, a
    /// hex digest), for replays of `session`.
    pub(crate) async fn index(
        &self,
        session: Uuid,
        request: &str,
        envelope: Uuid,
        step: u32,
    ) -> Result<(), AgentError> {
        let entry = Entry {
            source: Some(format!("{envelope}.{step}")),
            at: Some(baton_proto::now_ms()),
            ..Entry::default()
        };
        self.put(&format!("{session}.asked.{request}"), &entry)
            .await
    }

    /// The answer `session` got when it asked `request`, when it was
    /// recorded before `before` (unix ms; any time when `None`).
    pub(crate) async fn asked(
        &self,
        session: Uuid,
        request: &str,
        before: Option<u64>,
    ) -> Result<Option<Recalled>, AgentError> {
        let Some(source) = self.asked_at(session, request, before).await? else {
            return Ok(None);
        };
        let recalled = self.recall(&source).await?;
        Ok(recalled.map(|recalled| Recalled {
            source: Some(source),
            ..recalled
        }))
    }

    /// Where the answer `session` got when it asked `request` is kept (an
    /// `<envelope>.<step>`), when it was recorded before `before`.
    pub(crate) async fn asked_at(
        &self,
        session: Uuid,
        request: &str,
        before: Option<u64>,
    ) -> Result<Option<String>, AgentError> {
        let Some(index) = self.get(&format!("{session}.asked.{request}")).await? else {
            return Ok(None);
        };
        let in_time = match (before, index.at) {
            (Some(before), Some(at)) => at < before,
            (Some(_), None) => false,
            (None, _) => true,
        };
        Ok(index.source.filter(|_| in_time))
    }

    /// The label of the program's call at journal step `step` of the hop of
    /// `envelope` (its marker, or a step's start), if one was placed there.
    pub(crate) async fn label(
        &self,
        envelope: Uuid,
        step: u32,
    ) -> Result<Option<String>, AgentError> {
        for key in [
            format!("{envelope}.{step}.call"),
            format!("{envelope}.{step}.0.started"),
        ] {
            if let Some(entry) = self.get(&key).await? {
                if let Some(label) = entry.calls.into_iter().next() {
                    return Ok(Some(label));
                }
            }
        }
        Ok(None)
    }

    /// Places the program's call `label` at journal step `step`: a step's
    /// start (a step runs next), or a marker. Created, never overwritten:
    /// another writer (the same hop running twice at once) fails it as
    /// retryable.
    pub(crate) async fn place(
        &self,
        envelope: Uuid,
        step: u32,
        label: &str,
        started: bool,
    ) -> Result<(), AgentError> {
        let Some(bucket) = &self.bucket else {
            return Ok(());
        };
        let entry = Entry {
            calls: vec![label.to_owned()],
            ..Entry::default()
        };
        let bytes = rmp_serde::to_vec_named(&entry)
            .map_err(|err| AgentError::fatal(format!("cannot encode a call's label: {err}")))?;
        let key = if started {
            format!("{envelope}.{step}.0.started")
        } else {
            format!("{envelope}.{step}.call")
        };
        bucket.create(&key, bytes.into()).await.map(drop).map_err(|err| {
            AgentError::retryable(format!(
                "cannot place the program's call in the hop journal (is the same hop running twice?): {err}"
            ))
        })
    }

    /// Forgets that the step at `step` started, keeping its place as
    /// `label` (a step that raised: it runs again next time).
    pub(crate) async fn forget_start(
        &self,
        envelope: Uuid,
        step: u32,
        label: &str,
    ) -> Result<(), AgentError> {
        let Some(bucket) = &self.bucket else {
            return Ok(());
        };
        let entry = Entry {
            calls: vec![label.to_owned()],
            ..Entry::default()
        };
        self.put(&format!("{envelope}.{step}.call"), &entry).await?;
        (bucket.delete(format!("{envelope}.{step}.0.started")).await)
            .map_err(|err| AgentError::retryable(format!("cannot write the hop journal: {err}")))
    }

    /// The result the tool call `call` of the answer at `source` (an
    /// `<envelope>.<step>`) got, if it got one.
    pub(crate) async fn result_at(
        &self,
        source: &str,
        call: usize,
    ) -> Result<Option<(String, bool)>, AgentError> {
        let entry = self.get(&format!("{source}.{call}.result")).await?;
        Ok(entry.map(|entry| (entry.text.unwrap_or_default(), entry.is_error)))
    }

    async fn recall(&self, at: &str) -> Result<Option<Recalled>, AgentError> {
        let Some(entry) = self.get(&format!("{at}.model")).await? else {
            return Ok(None);
        };
        let answer = entry.answer.unwrap_or_default();
        let answer = serde_json::from_str(&answer).map_err(|err| {
            AgentError::fatal(format!("the hop journal holds an unreadable answer: {err}"))
        })?;
        Ok(Some(Recalled {
            answer,
            source: entry.source,
        }))
    }

    /// What is recorded of call `call` of `step`.
    pub(crate) async fn call(
        &self,
        envelope: Uuid,
        step: u32,
        call: usize,
    ) -> Result<Recorded, AgentError> {
        let prefix = format!("{envelope}.{step}.{call}");
        if let Some(entry) = self.get(&format!("{prefix}.result")).await? {
            return Ok(Recorded::Result(
                entry.text.unwrap_or_default(),
                entry.is_error,
            ));
        }
        let Some(bucket) = &self.bucket else {
            return Ok(Recorded::Nothing);
        };
        let started = bucket
            .entry(format!("{prefix}.started"))
            .await
            .map_err(|err| AgentError::retryable(format!("cannot read the hop journal: {err}")))?;
        Ok(match started {
            Some(entry) if entry.operation == kv::Operation::Put => Recorded::Started {
                revision: entry.revision,
                at: u64::try_from(entry.created.unix_timestamp_nanos() / 1_000_000).unwrap_or(0),
            },
            _ => Recorded::Nothing,
        })
    }

    /// A person's decision on call `call` of `step`, under `suffix`
    /// (`approved`: its digest; `failed`: their note), if there is one.
    pub(crate) async fn decision(
        &self,
        envelope: Uuid,
        step: u32,
        call: usize,
        suffix: &str,
    ) -> Result<Option<Entry>, AgentError> {
        let call = u32::try_from(call).unwrap_or(u32::MAX);
        self.get(&Entry::call_key(envelope, step, call, suffix))
            .await
    }

    /// Records that call `call` of `step` is about to be made.
    pub(crate) async fn record_start(
        &self,
        envelope: Uuid,
        step: u32,
        call: usize,
    ) -> Result<(), AgentError> {
        self.put(
            &format!("{envelope}.{step}.{call}.started"),
            &Entry::default(),
        )
        .await
    }

    /// Forgets that call `call` of `step` started: it did not run (its
    /// server refused the sign-in), so a later delivery makes it.
    pub(crate) async fn clear_start(
        &self,
        envelope: Uuid,
        step: u32,
        call: usize,
    ) -> Result<(), AgentError> {
        let Some(bucket) = &self.bucket else {
            return Ok(());
        };
        (bucket
            .delete(format!("{envelope}.{step}.{call}.started"))
            .await)
            .map_err(|err| AgentError::retryable(format!("cannot write the hop journal: {err}")))
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
        let entry = Entry {
            text: Some(text.to_owned()),
            is_error,
            ..Entry::default()
        };
        self.put(&format!("{envelope}.{step}.{call}.result"), &entry)
            .await
    }

    async fn get(&self, key: &str) -> Result<Option<Entry>, AgentError> {
        let (Some(bucket), Some(claims)) = (&self.bucket, &self.claims) else {
            return Ok(None);
        };
        let Some(stored) = bucket
            .get(key)
            .await
            .map_err(|err| AgentError::retryable(format!("cannot read the hop journal: {err}")))?
        else {
            return Ok(None);
        };
        let restored = claims.unpack(&stored).await.map_err(|err| {
            AgentError::retryable(format!("cannot restore a hop journal entry: {err}"))
        })?;
        rmp_serde::from_slice(&restored).map(Some).map_err(|err| {
            AgentError::fatal(format!("the hop journal holds an unreadable entry: {err}"))
        })
    }

    async fn put(&self, key: &str, entry: &Entry) -> Result<(), AgentError> {
        let (Some(bucket), Some(claims)) = (&self.bucket, &self.claims) else {
            return Ok(());
        };
        let bytes = rmp_serde::to_vec_named(entry).map_err(|err| {
            AgentError::fatal(format!("cannot encode a hop journal entry: {err}"))
        })?;
        // A large value keeps its large parts in the claim-check store.
        let packed = claims.pack(Bytes::from(bytes)).await.map_err(|err| {
            AgentError::retryable(format!("cannot store a large hop journal entry: {err}"))
        })?;
        bucket.put(key, packed).await.map(drop).map_err(|err| {
            AgentError::retryable(format!("cannot record in the hop journal: {err}"))
        })
    }
}

/// A recorded model answer.
#[derive(Debug)]
pub(crate) struct Recalled {
    /// The endpoint's answer.
    pub(crate) answer: Json,
    /// Where a replay took it from: `<envelope>.<step>` of the replayed
    /// session. `None` for an answer the hop's own model call got.
    pub(crate) source: Option<String>,
}

/// What the hop journal uses: its bucket.
#[must_use]
pub fn footprint(subjects: &baton_proto::Subjects) -> baton_proto::Footprint {
    baton_proto::Footprint::kv(&subjects.journal_bucket())
}

#[cfg(test)]
mod tests {
    use baton_proto::{Envelope, Hop};
    use baton_worker::Task;

    use super::placed;

    fn task(agent: &str, hops: usize, child: Option<u32>) -> Task {
        let mut envelope = Envelope::task("refund ABC-123");
        envelope.path = (0..hops)
            .map(|_| Hop::new(baton_proto::AgentName::from_static("front"), "w1", None))
            .collect();
        envelope.parent = child.map(|index| baton_proto::Parent {
            id: uuid::Uuid::new_v4(),
            agent: baton_proto::AgentName::from_static("lead"),
            depth: 1,
            index: Some(index),
            assignment: None,
            extra: baton_proto::Map::new(),
        });
        Task {
            envelope: envelope.into(),
            attempt: 1,
            agent: baton_proto::AgentName::new(agent).unwrap(),
            instance: "w1".into(),
            progress: baton_worker::Progress::default(),
            registry: None,
        }
    }

    #[test]
    fn a_call_is_placed_alike_in_a_replay_and_apart_in_another_hop_or_child() {
        let asked = "ab12";
        // Another session (a replay) at the same place: the same key.
        let here = placed(&task("coder", 1, None), asked);
        assert_eq!(here, placed(&task("coder", 1, None), asked));
        assert_eq!(here.len(), 64);
        for elsewhere in [
            task("closer", 1, None),
            task("coder", 2, None),
            task("coder", 1, Some(0)),
        ] {
            assert_ne!(here, placed(&elsewhere, asked));
        }
        assert_ne!(
            placed(&task("coder", 1, Some(0)), asked),
            placed(&task("coder", 1, Some(1)), asked)
        );
        assert_ne!(here, placed(&task("coder", 1, None), "cd34"));
    }
}
