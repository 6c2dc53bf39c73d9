//! What still holds a version of an agent type: the work pinned to it,
//! wherever it waits. A session that is open is always somewhere: a task
//! on the tasks stream (waiting or in flight, at any agent type), a task
//! in the inbox, a delegation waiting for its children, or, between turns,
//! a conversation's record. Each of them carries the session's pins.

use std::collections::BTreeMap;

use async_nats::jetstream::{self, kv};
use baton_proto::{AgentName, Conversation, Head, Subjects};
use futures::StreamExt as _;
use serde::{Deserialize, Serialize};

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
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// What holds it, in words: "3 tasks, 1 conversation".
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
    versions: BTreeMap<String, String>,
}

/// A join's delegating envelope's pins.
#[derive(Deserialize)]
struct JoinPins {
    envelope: Pins,
}

/// What holds version `version` of `agent`; `moving` leaves out the
/// conversations that are idle (they move on at their next turn).
pub async fn holding(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    agent: &AgentName,
    version: &str,
    moving: bool,
) -> anyhow::Result<Holding> {
    let pinned = |versions: &BTreeMap<String, String>| {
        versions.get(agent.as_str()).is_some_and(|v| v == version)
    };
    let mut holding = Holding {
        messages: tasks(jetstream, subjects, &pinned).await?,
        ..Holding::default()
    };
    for (key, value) in entries(jetstream, &subjects.inbox_bucket()).await? {
        let envelope = baton_proto::Envelope::from_msgpack(&value);
        if !key.starts_with("q.") && envelope.is_ok_and(|e| pinned(&e.versions)) {
            holding.inbox += 1;
        }
    }
    for (key, value) in entries(jetstream, &subjects.conversations_bucket()).await? {
        let Ok(record) = rmp_serde::from_slice::<Conversation>(&value) else {
            continue;
        };
        if key.starts_with("c.")
            && pinned(&record.versions)
            && (!moving || record.running.is_some())
        {
            holding.conversations += 1;
        }
    }
    for (_, value) in entries(jetstream, &subjects.joins_bucket()).await? {
        if rmp_serde::from_slice::<JoinPins>(&value)
            .is_ok_and(|join| pinned(&join.envelope.versions))
        {
            holding.delegations += 1;
        }
    }
    Ok(holding)
}

use baton_proto::Wire as _;

/// How many tasks on the tasks stream `pinned` says are pinned.
async fn tasks(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    pinned: &dyn Fn(&BTreeMap<String, String>) -> bool,
) -> anyhow::Result<u64> {
    let Ok(mut stream) = jetstream.get_stream(subjects.tasks_stream()).await else {
        return Ok(0);
    };
    let state = stream.info().await?.state.clone();
    if state.messages == 0 {
        return Ok(0);
    }
    let mut count = 0;
    for sequence in state.first_sequence..=state.last_sequence {
        // A task acknowledged since is gone from the work queue.
        let Ok(message) = stream.get_raw_message(sequence).await else {
            continue;
        };
        if let Ok(head) = Head::read(&message.payload, usize::MAX) {
            count += u64::from(pinned(&head.versions));
        }
    }
    Ok(count)
}

/// Every entry of bucket `name` (none when it does not exist).
async fn entries(
    jetstream: &jetstream::Context,
    name: &str,
) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let Ok(store) = jetstream.get_key_value(name).await else {
        return Ok(Vec::new());
    };
    let mut keys = store.keys().await?;
    let mut found = Vec::new();
    while let Some(key) = keys.next().await {
        let key = key?;
        if let Ok(Some(entry)) = store.entry(&key).await {
            if entry.operation == kv::Operation::Put {
                found.push((key, entry.value.to_vec()));
            }
        }
    }
    Ok(found)
}
