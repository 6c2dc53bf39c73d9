//! What still holds each version of an agent type: the work pinned to it,
//! wherever it waits. A session that is open is always somewhere: a task
//! on the tasks stream (waiting or in flight, at any agent type), a task
//! in the inbox, a delegation waiting for its children, or, between turns,
//! a conversation's record. Each of them carries the session's pins, and
//! each is read once for every version at a time.
//!
//! What cannot be read is an error, never a count of zero: a version must
//! not be retired because a read failed.

use std::collections::BTreeMap;

use async_nats::jetstream::{self, kv};
use baton_proto::{AgentName, Conversation, Head, Subjects, Version, Wire as _};
use futures::StreamExt as _;
use serde::{Deserialize, Serialize};

use baton_nats::{Error, ErrorKind};

/// What still holds one version.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Holding {
    /// Tasks on the tasks stream pinned to it, waiting or in flight.
    pub messages: u64,
    /// Tasks in the inbox pinned to it.
    pub inbox: u64,
    /// Conversations pinned to it (only those with a running turn when
    /// its idle conversations are moving on).
    pub conversations: u64,
    /// Delegations pinned to it that wait for their children.
    pub delegations: u64,
}

impl Holding {
    /// Whether nothing holds it.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// What holds it, in words: "3 tasks on the tasks stream, 1 conversation".
    #[must_use]
    pub fn said(&self) -> String {
        let parts = [
            (
                self.messages,
                "task on the tasks stream",
                "tasks on the tasks stream",
            ),
            (self.inbox, "task in the inbox", "tasks in the inbox"),
            (self.conversations, "conversation", "conversations"),
            (
                self.delegations,
                "delegation waiting for its children",
                "delegations waiting for their children",
            ),
        ];
        let said: Vec<String> = parts
            .iter()
            .filter(|(n, _, _)| *n > 0)
            .map(|(n, one, many)| format!("{n} {}", if *n == 1 { one } else { many }))
            .collect();
        said.join(", ")
    }
}

/// An envelope's pins, read without the rest.
#[derive(Deserialize)]
struct Pins {
    #[serde(default)]
    versions: BTreeMap<AgentName, Version>,
}

/// A join's delegating envelope's pins.
#[derive(Deserialize)]
struct JoinPins {
    envelope: Pins,
}

/// What holds each version of `agent`, by version; the idle conversations
/// of the versions in `moving` are left out (they move on at their next
/// turn).
pub(super) async fn held(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    agent: &AgentName,
    moving: &[Version],
) -> Result<BTreeMap<Version, Holding>, Error> {
    let mut held: BTreeMap<Version, Holding> = BTreeMap::new();
    let mut count = |versions: &BTreeMap<AgentName, Version>,
                     field: fn(&mut Holding) -> &mut u64| {
        if let Some(version) = versions.get(agent.as_str()) {
            *field(held.entry(version.clone()).or_default()) += 1;
        }
    };
    for versions in tasks(jetstream, subjects).await? {
        count(&versions, |h| &mut h.messages);
    }
    for (key, value) in entries(jetstream, &subjects.inbox_bucket()).await? {
        // `q.<session>` keys name a question's entry.
        if !key.starts_with("q.") {
            let envelope = baton_proto::Envelope::from_msgpack(&value)
                .map_err(|err| undecoded(&format!("inbox entry {key} is not an envelope"), err))?;
            count(&envelope.versions, |h| &mut h.inbox);
        }
    }
    for (key, value) in entries(jetstream, &subjects.conversations_bucket()).await? {
        // Records are `c.<hash>`; listed turns and transcripts are not.
        if key.starts_with("c.") {
            let record: Conversation = rmp_serde::from_slice(&value)
                .map_err(|err| undecoded(&format!("{key} is not a conversation"), err))?;
            let idle_moving = record.running.is_none()
                && (record.versions.get(agent.as_str())).is_some_and(|v| moving.contains(v));
            if !idle_moving {
                count(&record.versions, |h| &mut h.conversations);
            }
        }
    }
    for (key, value) in entries(jetstream, &subjects.joins_bucket()).await? {
        let join: JoinPins = rmp_serde::from_slice(&value)
            .map_err(|err| undecoded(&format!("{key} is not a join"), err))?;
        count(&join.envelope.versions, |h| &mut h.delegations);
    }
    Ok(held)
}

fn undecoded(what: &str, err: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::with_source(ErrorKind::Decode, what, err)
}

fn unread(what: String, err: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::with_source(ErrorKind::JetStream, what, err)
}

/// The pins of every task on the tasks stream (none when it does not
/// exist); messages that are not envelopes (deadline timers) have none.
async fn tasks(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
) -> Result<Vec<BTreeMap<AgentName, Version>>, Error> {
    use jetstream::stream::LastRawMessageErrorKind as Kind;
    let name = subjects.tasks_stream();
    let Some(mut stream) = existing(jetstream, &name).await? else {
        return Ok(Vec::new());
    };
    let state = (stream.info().await)
        .map_err(|err| unread(format!("cannot read stream {name}"), err))?
        .state
        .clone();
    let mut found = Vec::new();
    if state.messages == 0 {
        return Ok(found);
    }
    for sequence in state.first_sequence..=state.last_sequence {
        match stream.get_raw_message(sequence).await {
            Ok(message) => {
                if let Ok(head) = Head::read(&message.payload, usize::MAX) {
                    found.push(head.versions);
                }
            }
            // Acknowledged since: gone from the work queue.
            Err(err) if err.kind() == Kind::NoMessageFound => {}
            Err(err) => return Err(unread(format!("cannot read {name} at {sequence}"), err)),
        }
    }
    Ok(found)
}

/// Every entry of bucket `name` (none when it does not exist).
async fn entries(
    jetstream: &jetstream::Context,
    name: &str,
) -> Result<Vec<(String, Vec<u8>)>, Error> {
    if existing(jetstream, &format!("KV_{name}")).await?.is_none() {
        return Ok(Vec::new());
    }
    let cannot = |err| unread(format!("cannot read bucket {name}"), err);
    let store = (jetstream.get_key_value(name).await).map_err(cannot)?;
    let mut keys =
        (store.keys().await).map_err(|err| unread(format!("cannot list {name}"), err))?;
    let mut found = Vec::new();
    while let Some(key) = keys.next().await {
        let key = key.map_err(|err| unread(format!("cannot list {name}"), err))?;
        let entry = (store.entry(&key).await)
            .map_err(|err| unread(format!("cannot read {name} {key}"), err))?;
        // Deleted since it was listed.
        if let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) {
            found.push((key, entry.value.to_vec()));
        }
    }
    Ok(found)
}

/// Stream `name`, or `None` when it does not exist.
pub(crate) async fn existing(
    jetstream: &jetstream::Context,
    name: &str,
) -> Result<Option<jetstream::stream::Stream>, Error> {
    match jetstream.get_stream(name).await {
        Ok(stream) => Ok(Some(stream)),
        Err(err)
            if matches!(
                err.kind(),
                jetstream::context::GetStreamErrorKind::JetStream(ref inner)
                    if inner.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
            ) =>
        {
            Ok(None)
        }
        Err(err) => Err(unread(format!("cannot read stream {name}"), err)),
    }
}
