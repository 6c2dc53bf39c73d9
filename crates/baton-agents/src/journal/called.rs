//! A replayable session's tool calls indexed by what was called: the
//! tool's name and its arguments. `<session>.called.<digest>` points at
//! the `<envelope>.<step>.<call>` whose result the call got, so that an
//! evaluation of another version (`baton eval`) answers a call made with
//! the same arguments from the record instead of making it again.

use baton_proto::JournalEntry as Entry;
use baton_worker::AgentError;
use serde_json::Value as Json;
use uuid::Uuid;

use super::Journal;

/// What a call asked, as a hex SHA-256 digest of the tool's name and its
/// arguments with every object's keys sorted: two calls of the same tool
/// with equal arguments, however their keys were ordered, are alike.
pub(crate) fn called(tool: &str, arguments: &Json) -> String {
    let text = format!("{tool}\0{}", sorted(arguments));
    baton_proto::hex(&<sha2::Sha256 as sha2::Digest>::digest(text.as_bytes()))
}

/// `value` with every object's keys in order.
fn sorted(value: &Json) -> Json {
    match value {
        Json::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Json::Object(
                keys.into_iter()
                    .map(|key| (key.clone(), sorted(&map[key])))
                    .collect(),
            )
        }
        Json::Array(items) => Json::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

impl Journal {
    /// Indexes call `call` of `step` in the hop of `envelope`, whose
    /// result is recorded, under what it asked (`called`), for
    /// evaluations of `session`.
    pub(crate) async fn index_call(
        &self,
        session: Uuid,
        called: &str,
        (envelope, step, call): (Uuid, u32, usize),
    ) -> Result<(), AgentError> {
        let entry = Entry {
            source: Some(format!("{envelope}.{step}.{call}")),
            at: Some(baton_proto::now_ms()),
            ..Entry::default()
        };
        self.put(&format!("{session}.called.{called}"), &entry)
            .await
    }

    /// The result a call of `session` that asked `called` got, when one
    /// was recorded: its text, and whether it was an error.
    pub(crate) async fn called_result(
        &self,
        session: Uuid,
        called: &str,
    ) -> Result<Option<(String, bool)>, AgentError> {
        let Some(index) = self.get(&format!("{session}.called.{called}")).await? else {
            return Ok(None);
        };
        let Some(source) = index.source else {
            return Ok(None);
        };
        let entry = self.get(&format!("{source}.result")).await?;
        Ok(entry.map(|entry| (entry.text.unwrap_or_default(), entry.is_error)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_alike_but_for_the_order_of_their_keys_are_alike() {
        let a = serde_json::json!({"account": "A-1", "amount": {"cents": 5, "currency": "EUR"}});
        let b = serde_json::json!({"amount": {"currency": "EUR", "cents": 5}, "account": "A-1"});
        assert_eq!(called("pay", &a), called("pay", &b));
        assert_ne!(called("pay", &a), called("refund", &a));
        let c = serde_json::json!({"account": "A-1", "amount": {"cents": 6, "currency": "EUR"}});
        assert_ne!(called("pay", &a), called("pay", &c));
    }
}
