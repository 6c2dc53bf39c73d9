//! What an interrupted turn did before it was cancelled, so the next turn's
//! model knows it: the tool calls of the turn's first hop (an LLM agent's,
//! read from its hop journal), each with its result, or with an
//! "interrupted" result when the cancel came first. Every call then has a
//! result, so the history stays valid for the model.

use std::collections::BTreeMap;

use async_nats::jetstream::stream::DirectGetErrorKind;
use baton_proto::{Conversation, JournalEntry, Message, Role, Value, derive_id};
use uuid::Uuid;

use super::Records;
use crate::error::{Error, ErrorKind};

/// The result recorded for a call the cancel cut short.
pub const INTERRUPTED: &str = "interrupted: the turn was cancelled by a newer message before \
                               this call returned; it may or may not have taken effect";

impl Records {
    /// The tool calls of turn `turn`'s first hop, from its hop journal, as
    /// messages (the model's calls, then each call's result, or
    /// [`INTERRUPTED`]); none when the hop made no call or kept no journal.
    pub(super) async fn cut_short(
        &self,
        conversation: &Conversation,
        turn: u32,
    ) -> Result<Vec<Message>, Error> {
        // The router forwards the turn's task to its first agent under this id.
        let journal = derive_id(conversation.task_id(turn), 0);
        let entries = self.journal(journal).await?;
        let mut messages = Vec::new();
        let mut steps: Vec<u32> = entries
            .keys()
            .filter_map(|key| key.strip_suffix(".model")?.parse().ok())
            .collect();
        steps.sort_unstable();
        for step in steps {
            let Some(answer) = entries[&format!("{step}.model")].answer.as_deref() else {
                continue;
            };
            let answer: serde_json::Value = serde_json::from_str(answer).unwrap_or_default();
            let said = &answer["choices"][0]["message"];
            let calls = said["tool_calls"].as_array().cloned().unwrap_or_default();
            if calls.is_empty() {
                continue;
            }
            let mut asked = Message::new(Role::Agent, said["content"].as_str().unwrap_or_default());
            asked.tool_calls = rmpv::ext::to_value(&calls)
                .ok()
                .filter(|v| *v != Value::Nil);
            messages.push(asked);
            for (index, call) in calls.iter().enumerate() {
                let result = entries
                    .get(&format!("{step}.{index}.result"))
                    .and_then(|entry| entry.text.clone())
                    .unwrap_or_else(|| INTERRUPTED.to_owned());
                let mut answered = Message::new(Role::Tool, result);
                answered.tool_call_id = call["id"].as_str().map(str::to_owned);
                answered.name = call["function"]["name"].as_str().map(str::to_owned);
                messages.push(answered);
            }
        }
        Ok(messages)
    }

    /// The entries of hop journal `journal`, by key without the journal's
    /// id (`<step>.model`, `<step>.<call>.result`, …); none without a
    /// journal bucket.
    async fn journal(&self, journal: Uuid) -> Result<BTreeMap<String, JournalEntry>, Error> {
        let bucket = self.subjects.journal_bucket();
        let jetstream = &self.jetstream;
        let Ok(stream) = jetstream.get_stream_no_info(format!("KV_{bucket}")).await else {
            return Ok(BTreeMap::new());
        };
        let prefix = format!("$KV.{bucket}.{journal}.");
        let mut entries = BTreeMap::new();
        let mut after = 0;
        loop {
            let next = stream
                .direct_get_next_for_subject(format!("{prefix}>"), Some(after + 1))
                .await;
            let message = match next {
                Ok(message) => message,
                Err(err) if err.kind() == DirectGetErrorKind::NotFound => break,
                Err(err) => {
                    return Err(Error::with_source(
                        ErrorKind::JetStream,
                        "cannot read the hop journal",
                        err,
                    ));
                }
            };
            after = message.sequence;
            let Some(key) = message.subject.strip_prefix(prefix.as_str()) else {
                continue;
            };
            let removed = message
                .headers
                .get("KV-Operation")
                .is_some_and(|op| op.as_str() != "PUT");
            if removed {
                entries.remove(key);
                continue;
            }
            let restored = (self.claims.unpack(&message.payload).await).map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "cannot read the hop journal", err)
            })?;
            if let Ok(entry) = rmp_serde::from_slice(&restored) {
                entries.insert(key.to_owned(), entry);
            }
        }
        Ok(entries)
    }
}
