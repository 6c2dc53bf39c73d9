//! Shared model rate limits: every worker of every agent type that calls the
//! same endpoint and model takes its turn from one schedule in the
//! `BATON_LIMITS` bucket, so a deployment keeps to what the provider allows
//! however many workers it runs.
//!
//! The schedule is a cell-rate algorithm: the entry holds the earliest time
//! the next request may go out (and, for a token limit, the next token).
//! A call reserves its slot with one compare-and-set, moving the time on by
//! one interval, then sleeps until the slot; there is no polling. A `429`
//! with `Retry-After` moves the time past the pause, so every worker backs
//! off together. Agent types that share the model's request limit take
//! turns: an agent type that called recently counts as active, and while
//! `n` types are active each gets at most `1/n` of the rate (all of it when
//! alone). A token limit alone is shared first come, first served.
//!
//! The worker keeps the message alive while a call waits for its turn; the
//! wait counts in the agent's `timeout_ms`.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::{self, kv};
use baton_proto::Subjects;
use serde::{Deserialize, Serialize};

use crate::StartError;
use crate::spec::{LimitsSpec, LlmSpec};

/// How long after its last call an agent type still counts as active.
const ACTIVE_FOR_US: u64 = 5_000_000;
/// How many times one reservation is tried against concurrent writers.
const ATTEMPTS: u32 = 64;

/// One endpoint and model's schedule, as stored (MessagePack).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Schedule {
    /// When the next request may go out, unix µs.
    next: u64,
    /// When the next token may be spent, unix µs (with a token limit).
    #[serde(default)]
    tokens: u64,
    /// Per agent type: when its next request may go out, unix µs.
    #[serde(default)]
    agents: BTreeMap<String, u64>,
    /// Until when the provider asked every caller to wait (a `429`'s
    /// `Retry-After`), unix µs.
    #[serde(default)]
    paused: u64,
}

/// The turn a call got: when it may go out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Turn {
    /// How long it has to wait.
    pub(crate) wait: Duration,
}

/// One agent type's view of a shared limit.
pub(crate) struct Limiter {
    store: kv::Store,
    key: String,
    agent: String,
    /// Microseconds between requests, with a request limit.
    request_us: Option<u64>,
    /// Microseconds per token, with a token limit.
    token_us: Option<f64>,
    /// One reservation at a time from this process: the others wait here
    /// rather than racing on the entry.
    local: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("key", &self.key)
            .field("agent", &self.agent)
            .finish_non_exhaustive()
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The entry's key for an endpoint and model: readable, and a valid key
/// whatever the URL holds.
pub(crate) fn key(base_url: &str, model: &str) -> String {
    let base_url = base_url.trim_end_matches('/');
    let cleaned = baton_proto::token_safe(&format!("{base_url}/{model}"));
    let digest = <sha2::Sha256 as sha2::Digest>::digest(format!("{base_url}\0{model}").as_bytes());
    let short = baton_proto::hex(&digest[..6]);
    format!("{}.{short}", cleaned.trim_matches('_'))
}

impl Limiter {
    /// The limiter of agent type `agent` for `spec`'s endpoint and model,
    /// opening (or creating) the bucket; `None` without `[llm.limits]`.
    ///
    /// # Errors
    ///
    /// When JetStream refuses the bucket.
    pub(crate) async fn open(
        client: &async_nats::Client,
        subjects: &Subjects,
        replicas: usize,
        spec: &LlmSpec,
        agent: &str,
    ) -> Result<Option<Self>, StartError> {
        let Some(limits) = spec.limits else {
            return Ok(None);
        };
        let config = kv::Config {
            bucket: subjects.limits_bucket(),
            description: "Baton: shared model rate limits".to_owned(),
            history: 1,
            storage: jetstream::stream::StorageType::File,
            num_replicas: replicas,
            ..Default::default()
        };
        let store = baton_worker::key_value(&jetstream::new(client.clone()), config)
            .await
            .map_err(|err| StartError::new(format!("cannot open the rate limits: {err}")))?;
        Ok(Some(Self::on(
            store,
            key(&spec.base_url, &spec.model),
            agent,
            limits,
        )))
    }

    fn on(store: kv::Store, key: String, agent: &str, limits: LimitsSpec) -> Self {
        let per_minute = |n: u32| 60_000_000 / u64::from(n.max(1));
        Self {
            store,
            key,
            agent: agent.to_owned(),
            request_us: limits.requests_per_minute.map(per_minute),
            token_us: limits
                .tokens_per_minute
                .map(|n| 60_000_000.0 / f64::from(n.max(1))),
            local: tokio::sync::Mutex::new(()),
        }
    }

    /// Reserves this call's turn, `tokens` estimated, and waits for it.
    ///
    /// A turn is reserved at most [`Limiter::horizon`] ahead, so a busy
    /// agent type cannot book the schedule far ahead of the others; past
    /// it, the caller waits and asks again. A turn that a `429` pause
    /// overtook while it waited is taken again after the pause.
    ///
    /// # Errors
    ///
    /// When the schedule cannot be read or written (a retryable failure).
    pub(crate) async fn take(&self, tokens: u64) -> Result<Turn, String> {
        let asked = now_us();
        loop {
            let at = {
                let _one = self.local.lock().await;
                loop {
                    let (granted, slot) = self.reserve(tokens).await?;
                    if granted {
                        break slot;
                    }
                    let early = slot.saturating_sub(self.horizon()).saturating_sub(now_us());
                    tokio::time::sleep(Duration::from_micros(early.max(1_000))).await;
                }
            };
            let wait = Duration::from_micros(at.saturating_sub(now_us()));
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            if self.paused_until().await? <= now_us() {
                return Ok(Turn {
                    wait: Duration::from_micros(now_us().saturating_sub(asked)),
                });
            }
        }
    }

    /// How far ahead a turn may be reserved: two requests' worth, and at
    /// least a quarter of a second.
    fn horizon(&self) -> u64 {
        self.request_us
            .map_or(0, |interval| 2 * interval)
            .max(250_000)
    }

    /// Until when the provider asked every caller to wait, unix µs.
    async fn paused_until(&self) -> Result<u64, String> {
        let entry = self
            .store
            .get(&self.key)
            .await
            .map_err(|err| format!("cannot read the rate limit {}: {err}", self.key))?;
        Ok(entry
            .and_then(|bytes| rmp_serde::from_slice::<Schedule>(&bytes).ok())
            .map_or(0, |schedule| schedule.paused))
    }

    /// Charges `tokens` more than a call reserved (its reported usage was
    /// larger than the estimate), best effort.
    pub(crate) async fn charge(&self, tokens: u64) {
        let Some(per_token) = self.token_us else {
            return;
        };
        let extra = (per_token * tokens as f64) as u64;
        let result = self
            .update(|schedule, now| {
                schedule.tokens = schedule.tokens.max(now).saturating_add(extra);
            })
            .await;
        if let Err(err) = result {
            tracing::warn!(error = %err, "cannot charge the rate limit for the tokens used");
        }
    }

    /// Pauses the shared limit for `pause` (the provider said `429` with
    /// `Retry-After`): no worker's next call goes out before it ends.
    pub(crate) async fn pause(&self, pause: Duration) {
        let until = now_us().saturating_add(u64::try_from(pause.as_micros()).unwrap_or(u64::MAX));
        let result = self
            .update(|schedule, _| {
                schedule.next = schedule.next.max(until);
                schedule.tokens = schedule.tokens.max(until);
                schedule.paused = schedule.paused.max(until);
            })
            .await;
        if let Err(err) = result {
            tracing::warn!(error = %err, "cannot pause the shared rate limit");
        }
    }

    /// Moves the schedule on by one call of `tokens` if its turn falls
    /// within the horizon; returns whether it did, and the turn, unix µs.
    /// A turn past the horizon still marks this agent type active, so the
    /// others make room for it.
    async fn reserve(&self, tokens: u64) -> Result<(bool, u64), String> {
        let (request_us, token_us, horizon) = (self.request_us, self.token_us, self.horizon());
        let agent = self.agent.clone();
        let (mut granted, mut slot) = (false, 0);
        self.update(|schedule, now| {
            schedule
                .agents
                .retain(|_, next| next.saturating_add(ACTIVE_FOR_US) > now);
            let others = schedule
                .agents
                .keys()
                .filter(|name| **name != agent)
                .count();
            let active = others as u64 + 1;
            let mine = schedule.agents.get(&agent).copied().unwrap_or(0);
            slot = now.max(schedule.next).max(mine).max(schedule.paused);
            if token_us.is_some() {
                slot = slot.max(schedule.tokens);
            }
            granted = slot <= now.saturating_add(horizon);
            if !granted {
                schedule.agents.entry(agent.clone()).or_insert(now);
                return;
            }
            match request_us {
                Some(interval) => {
                    schedule.next = slot + interval;
                    schedule
                        .agents
                        .insert(agent.clone(), slot + interval * active);
                }
                None => {
                    schedule.agents.insert(agent.clone(), slot);
                }
            }
            if let Some(per_token) = token_us {
                schedule.tokens = slot + (per_token * tokens as f64) as u64;
            }
        })
        .await?;
        Ok((granted, slot))
    }

    /// Reads the schedule, changes it with `change`, and writes it back if
    /// nobody wrote it meanwhile; tries again otherwise.
    async fn update(&self, mut change: impl FnMut(&mut Schedule, u64)) -> Result<(), String> {
        for attempt in 0..ATTEMPTS {
            let entry = self
                .store
                .entry(&self.key)
                .await
                .map_err(|err| format!("cannot read the rate limit {}: {err}", self.key))?;
            let (mut schedule, revision) = match &entry {
                Some(entry) if entry.operation == kv::Operation::Put => (
                    rmp_serde::from_slice(&entry.value).unwrap_or_default(),
                    Some(entry.revision),
                ),
                Some(entry) => (Schedule::default(), Some(entry.revision)),
                None => (Schedule::default(), None),
            };
            change(&mut schedule, now_us());
            let bytes = rmp_serde::to_vec_named(&schedule)
                .map_err(|err| format!("cannot encode the rate limit: {err}"))?;
            let written = match revision {
                Some(revision) => self
                    .store
                    .update(&self.key, bytes.into(), revision)
                    .await
                    .map(|_| ())
                    .map_err(|err| err.to_string()),
                None => self
                    .store
                    .create(&self.key, bytes.into())
                    .await
                    .map(|_| ())
                    .map_err(|err| err.to_string()),
            };
            match written {
                Ok(()) => return Ok(()),
                Err(err) => {
                    tracing::debug!(attempt, error = %err, "the rate limit changed meanwhile; again");
                    // A short random pause, growing with the attempts (to ~6 ms).
                    let jitter = fastrand::u64(0..=100u64 << attempt.min(6));
                    tokio::time::sleep(Duration::from_micros(jitter)).await;
                }
            }
        }
        Err(format!(
            "the rate limit {} stayed contended for {ATTEMPTS} attempts",
            self.key
        ))
    }
}

/// What a call of `messages` is estimated to cost in tokens before it is
/// made: about four characters per token, plus the answer's limit (or 256).
pub(crate) fn estimate(messages: &[serde_json::Value], max_tokens: Option<u32>) -> u64 {
    tokens_in(messages) + u64::from(max_tokens.unwrap_or(256))
}

/// About how many tokens `values` hold, as JSON: four characters a token.
pub(crate) fn tokens_in(values: &[serde_json::Value]) -> u64 {
    let characters: usize = values.iter().map(|v| v.to_string().len()).sum();
    (characters as u64).div_ceil(4)
}

/// What the shared limits use: their bucket.
#[must_use]
pub fn footprint(subjects: &Subjects) -> baton_proto::Footprint {
    baton_proto::Footprint::kv(&subjects.limits_bucket())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_valid_and_tell_endpoints_and_models_apart() {
        let a = key("http://127.0.0.1:8080/v1/", "gpt-4o");
        assert!(a.starts_with("http___127_0_0_1_8080_v1_gpt-4o."), "{a}");
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
            "{a}"
        );
        assert_ne!(a, key("http://127.0.0.1:8080/v1", "gpt-4o-mini"));
        assert_eq!(
            key("http://a/v1", "m"),
            key("http://a/v1/", "m"),
            "a trailing / is the same endpoint"
        );
    }

    #[test]
    fn the_estimate_counts_four_characters_a_token_and_the_answer() {
        let messages = [serde_json::json!({"role": "user", "content": "x".repeat(400)})];
        let estimate = estimate(&messages, Some(100));
        assert!((200..=230).contains(&estimate), "{estimate}");
    }
}
