//! Shared model rate limits: every worker of every agent type that calls the
//! same endpoint and model takes its turn from one schedule in the
//! `BATON_LIMITS` bucket, so a deployment keeps to what the provider allows
//! however many workers it runs, whether or not a limit is configured.
//!
//! The schedule ([`schedule`]) spaces requests one interval apart at the
//! rate it has learned: the configured limit, what the provider's
//! rate-limit headers say ([`heard`]), or, with neither, what `429`s teach
//! it; before anything is known it does not pace, and only a window of
//! calls may be in flight at once ([`flight`]). A call reserves its slot
//! with one compare-and-set, moving the time on by one interval, then
//! sleeps until the slot (a call the window holds back waits until a call
//! ends, here or in another process). A
//! `429` cuts the rate and moves the next slot on by one interval, so the
//! callers that would meet the same full window wait; the refused call
//! itself waits out its `Retry-After` and takes a new turn. Agent types
//! that share the model's request limit take turns: an agent type that
//! called recently counts as active, and while `n` types are active each
//! gets at most `1/n` of the rate (all of it when alone). A token limit is
//! shared first come, first served.
//!
//! The worker keeps the message alive while a call waits for its turn; the
//! wait counts in the agent's `timeout_ms`.
//!
//! Every limiter watches the bucket into memory, so a reservation starts
//! from the schedule as last seen rather than from a read: the
//! compare-and-set on its revision proves it current, and only when it
//! does not (another process wrote meanwhile) is the schedule read.

mod flight;
mod heard;
mod metrics;
mod reserve;
pub(crate) mod schedule;
mod seen;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use baton_proto::Subjects;

use crate::llm::http::headers::Advice;
use crate::spec::LlmSpec;
use crate::{Error, ErrorKind};
use flight::{Flight, Flying};
use heard::Readings;
pub(crate) use metrics::Metrics;
use schedule::{Configured, HEARD_CHANGE, Heard};
pub use schedule::{Schedule, Source};
use seen::{Entry, Seen};

/// How long after its last call an agent type still counts as active.
const ACTIVE_FOR_US: u64 = 5_000_000;
/// How many times one reservation is tried against concurrent writers.
const ATTEMPTS: u32 = 64;

/// The turn a call got; the call counts in flight while it lives.
#[derive(Debug)]
pub(crate) struct Turn {
    /// How long it waited for it.
    pub(crate) wait: Duration,
    /// When it went out, unix µs.
    pub(crate) slot: u64,
    /// The schedule's rate then, requests a second (0: not paced).
    pub(crate) rate: f64,
    /// The window of calls in flight then.
    pub(crate) window: f64,
    /// The calls sent in the second before it.
    pub(crate) sent: f64,
    /// The call in flight.
    pub(crate) flight: Flight,
}

/// What a reservation found.
enum Reserved {
    /// This slot, unix µs, at this rate and window, after this many calls
    /// sent in the second before.
    Granted(u64, f64, f64, f64),
    /// The next slot is past the horizon: ask again at this time, unix µs.
    Early(u64),
    /// The window is full: ask again when a call ends.
    Full,
    /// The next slot is past the caller's deadline.
    Late,
}

/// One agent type's view of a shared limit.
pub(crate) struct Limiter {
    /// The schedule's entry, and the copies seen of it.
    entry: Entry,
    agent: String,
    endpoint: String,
    model: String,
    configured: Configured,
    /// One reservation at a time from this process: the others wait here
    /// rather than racing on the entry.
    local: tokio::sync::Mutex<()>,
    /// What this process last wrote of the provider's headers: only a
    /// change is written.
    heard: std::sync::Mutex<Heard>,
    /// The provider's headers, as this process read them.
    readings: std::sync::Mutex<Readings>,
    /// This process's calls in flight.
    flying: Arc<Flying>,
    /// Keeps the seen copies current, and writes the calls in flight;
    /// stopped with the limiter.
    tasks: [tokio::task::JoinHandle<()>; 2],
}

impl Drop for Limiter {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("key", &self.entry.key)
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

/// `base_url` as it may be shown: without a user, password or query.
pub(crate) fn shown(base_url: &str) -> String {
    match reqwest::Url::parse(base_url) {
        Ok(mut url) => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.to_string().trim_end_matches('/').to_owned()
        }
        Err(_) => "(unreadable URL)".to_owned(),
    }
}

impl Limiter {
    /// The limiter of agent type `agent` for `spec`'s endpoint and model,
    /// opening (or creating) the bucket. Every LLM agent has one: with
    /// `[llm.limits]` it starts at the configured rate, without it learns.
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
    ) -> Result<Self, Error> {
        let store = baton_nats::state::Bucket::Limits
            .open(&jetstream::new(client.clone()), subjects, replicas)
            .await
            .map_err(|err| {
                Error::new(
                    ErrorKind::Nats,
                    format!("cannot open the rate limits: {err}"),
                )
            })?;
        let limits = spec.limits;
        let per_second = |n: u32| f64::from(n.max(1)) / 60.0;
        let seen = Seen::default();
        let watch = seen.watch(store.clone(), subjects.limits_bucket()).await;
        let entry = Entry {
            store,
            key: key(&spec.base_url, &spec.model),
            seen,
        };
        let flying = Flying::new();
        let writer = tokio::spawn(flying.clone().write(entry.clone()));
        Ok(Self {
            entry,
            tasks: [watch, writer],
            flying,
            readings: std::sync::Mutex::new(Readings::default()),
            agent: agent.to_owned(),
            endpoint: shown(&spec.base_url),
            model: spec.model.clone(),
            configured: Configured {
                rps: limits.and_then(|l| l.requests_per_minute).map(per_second),
                tps: limits.and_then(|l| l.tokens_per_minute).map(per_second),
            },
            local: tokio::sync::Mutex::new(()),
            heard: std::sync::Mutex::new(Heard::default()),
        })
    }

    /// Reserves this call's turn, `tokens` estimated, and waits for it;
    /// `None` when the turn would come after `until` (unix µs; the
    /// session's deadline), in which case nothing is reserved.
    ///
    /// A turn is reserved at most a horizon ahead (two requests' worth,
    /// at least a quarter of a second), so a busy agent type cannot book
    /// the schedule far ahead of the others; past it, the caller waits and
    /// asks again.
    ///
    /// # Errors
    ///
    /// When the schedule cannot be read or written (a retryable failure).
    pub(crate) async fn take(
        &self,
        tokens: u64,
        until: u64,
    ) -> Result<Option<Turn>, baton_nats::Error> {
        let asked = now_us();
        let (slot, rate, window, sent, flight) = {
            let _one = self.local.lock().await;
            loop {
                // Made before the reservation, so no end is missed.
                let (changed, released) = (self.entry.seen.changed(), self.flying.released());
                match self.reserve(tokens, until).await? {
                    Reserved::Granted(slot, rate, window, sent) => {
                        break (slot, rate, window, sent, self.flying.depart());
                    }
                    Reserved::Late => return Ok(None),
                    Reserved::Early(at) => {
                        let early = at.saturating_sub(now_us()).max(1_000);
                        tokio::time::sleep(Duration::from_micros(early)).await;
                    }
                    Reserved::Full => {
                        let ended = async {
                            tokio::select! { () = changed => {}, () = released => {} }
                        };
                        let _ = tokio::time::timeout(Duration::from_millis(50), ended).await;
                    }
                }
            }
        };
        let wait = Duration::from_micros(slot.saturating_sub(now_us()));
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        Ok(Some(Turn {
            wait: Duration::from_micros(now_us().saturating_sub(asked)),
            slot,
            rate,
            window,
            sent,
            flight,
        }))
    }

    /// Charges `tokens` more than a call reserved (its reported usage was
    /// larger than the estimate), best effort.
    pub(crate) async fn charge(&self, tokens: u64) {
        self.adjust(
            "cannot charge the rate limit for the tokens used",
            |schedule, now| {
                if let Some(per_token) = schedule.per_token() {
                    let extra = (per_token * tokens as f64) as u64;
                    schedule.tokens = schedule.tokens.max(now).saturating_add(extra);
                }
            },
        )
        .await;
    }

    /// The provider refused the call of `turn` with `429`:
    /// the shared rate is cut (once per burst) and the callers that would
    /// meet the same full window wait one interval more.
    pub(crate) async fn refuse(&self, turn: &Turn) {
        let (slot, sent) = (turn.slot, turn.sent);
        self.adjust("cannot slow the shared rate limit down", |schedule, now| {
            schedule.refuse((slot, sent), now);
        })
        .await;
    }

    /// What the provider's headers said (`advice`): written to the shared
    /// schedule when it changes what is known, or when nothing is left.
    pub(crate) async fn hear(&self, advice: &Advice) {
        let heard = self
            .readings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .hear(advice, now_us());
        if heard == Heard::default() {
            return;
        }
        let new = {
            let mut last = self
                .heard
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let new = heard.empty_for_us.is_some()
                || heard.from & !last.from != 0
                || changed(last.rps, heard.rps)
                || changed(last.tps, heard.tps);
            if new {
                let from = last.from | heard.from;
                *last = heard;
                last.from = from;
            }
            new
        };
        if !new {
            return;
        }
        self.adjust(
            "cannot share what the provider's rate-limit headers said",
            |schedule, now| schedule.hear(heard, now),
        )
        .await;
    }

    /// Aligns the schedule with this agent type's configuration, changes
    /// it with `change`, and writes it back, best effort: a failure is
    /// logged as `failed` (the call goes on; the next reservation reads
    /// the schedule afresh).
    async fn adjust(&self, failed: &str, mut change: impl FnMut(&mut Schedule, u64)) {
        let configured = self.configured;
        let result = self
            .entry
            .update(|schedule, now| {
                schedule.align(configured, now);
                change(schedule, now);
                schedule.align(configured, now);
            })
            .await;
        if let Err(err) = result {
            tracing::warn!(error = %err, "{failed}");
        }
    }

    /// Reserves a call of `tokens` whose turn must come before `until`
    /// (see [`reserve::reserve`]).
    async fn reserve(&self, tokens: u64, until: u64) -> Result<Reserved, baton_nats::Error> {
        let configured = self.configured;
        let (endpoint, model) = (&self.endpoint, &self.model);
        let mut reserved = Reserved::Late;
        self.entry
            .update(|schedule, now| {
                schedule.align(configured, now);
                if schedule.endpoint.is_empty() {
                    schedule.endpoint.clone_from(endpoint);
                    schedule.model.clone_from(model);
                }
                let ask = reserve::Ask {
                    agent: &self.agent,
                    process: (&self.flying.id, self.flying.count()),
                    tokens,
                    until,
                };
                reserved = reserve::reserve(schedule, &ask, now);
            })
            .await?;
        Ok(reserved)
    }
}

/// Whether a heard rate differs enough from the last one written.
fn changed(last: Option<f64>, now: Option<f64>) -> bool {
    match (last, now) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(last), Some(now)) => (now - last).abs() > last * HEARD_CHANGE,
    }
}

/// Every shared limit in the bucket, by key, for `baton doctor`: `None`
/// when the bucket does not exist yet (no LLM agent has run).
///
/// # Errors
///
/// When the bucket cannot be read.
pub async fn read_all(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
) -> Result<Option<Vec<(String, Schedule)>>, baton_nats::Error> {
    let store = match jetstream.get_key_value(subjects.limits_bucket()).await {
        Ok(store) => store,
        Err(err) if err.kind() == jetstream::context::KeyValueErrorKind::GetBucket => {
            return Ok(None);
        }
        Err(err) => return Err(unread(format!("cannot open the rate limits: {err}"))),
    };
    let mut keys = store
        .keys()
        .await
        .map_err(|err| unread(format!("cannot list the rate limits: {err}")))?;
    let mut all = Vec::new();
    while let Some(key) = futures::StreamExt::next(&mut keys).await {
        let key = key.map_err(|err| unread(format!("cannot list the rate limits: {err}")))?;
        let entry = store
            .get(&key)
            .await
            .map_err(|err| unread(format!("cannot read the rate limit {key}: {err}")))?;
        if let Some(schedule) = entry.and_then(|bytes| rmp_serde::from_slice(&bytes).ok()) {
            all.push((key, schedule));
        }
    }
    Ok(Some(all))
}

/// The shared limits could not be read: JetStream refused.
fn unread(message: String) -> baton_nats::Error {
    baton_nats::Error::new(baton_nats::ErrorKind::JetStream, message)
}

/// What a call whose prompt is about `prompt` tokens is estimated to cost
/// before it is made: the prompt, plus the answer's limit (or 256).
pub(crate) fn with_answer(prompt: u64, max_tokens: Option<u32>) -> u64 {
    prompt + u64::from(max_tokens.unwrap_or(256))
}

/// About how many tokens `values` hold, as JSON: four characters a token.
pub(crate) fn tokens_in(values: &[serde_json::Value]) -> u64 {
    let characters: usize = values.iter().map(json_len).sum();
    (characters as u64).div_ceil(4)
}

/// The length in bytes of `value` written as compact JSON (what
/// `value.to_string().len()` is), counted without writing it: a long
/// conversation is measured before every model call.
pub(crate) fn json_len(value: &serde_json::Value) -> usize {
    use serde_json::Value;
    match value {
        Value::Null => 4,
        Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Number(number) => number.to_string().len(),
        Value::String(text) => quoted_len(text),
        // `[a,b]`: the brackets, and a comma between two items.
        Value::Array(items) => {
            2 + items.len().saturating_sub(1) + items.iter().map(json_len).sum::<usize>()
        }
        // `{"k":v,…}`: the braces, a colon per entry and a comma between two.
        Value::Object(map) => {
            2 + map.len() * 2 - usize::from(!map.is_empty())
                + map
                    .iter()
                    .map(|(key, value)| quoted_len(key) + json_len(value))
                    .sum::<usize>()
        }
    }
}

/// The length of `text` as a JSON string: its quotes, and each byte that
/// is escaped as its escape: two bytes for `"`, `\\` and the controls with
/// a short form (`\n`, `\t`, …), six for the other controls (`\u00XX`).
pub(crate) fn quoted_len(text: &str) -> usize {
    let (mut escaped, mut long) = (0, 0);
    // Counted in chunks of 128 bytes, whose counts fit a byte: the
    // compiler vectorises the count, a long conversation is measured
    // before every model call.
    for chunk in text.as_bytes().chunks(128) {
        let (some, six) = chunk.iter().fold((0u8, 0u8), |(some, six), &byte| {
            let control = byte < 0x20;
            let short = matches!(byte, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d);
            (
                some + u8::from(control | (byte == b'"') | (byte == b'\\')),
                six + u8::from(control & !short),
            )
        });
        escaped += usize::from(some);
        long += usize::from(six);
    }
    text.len() + 2 + escaped + 4 * long
}

/// What the shared limits use: their bucket.
#[must_use]
pub fn footprint(subjects: &Subjects) -> baton_proto::Footprint {
    let bucket = subjects.limits_bucket();
    baton_proto::Footprint::kv(&bucket).with(baton_proto::Footprint::kv_watcher(&bucket))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_len_is_the_length_of_the_written_json() {
        let values = [
            serde_json::json!(null),
            serde_json::json!(true),
            serde_json::json!(false),
            serde_json::json!(0.699_999_988_079_071),
            serde_json::json!(-17),
            serde_json::json!(u64::MAX),
            serde_json::json!(""),
            serde_json::json!(
                "quote \" backslash \\ tab \t cr \r lf \n bell \u{7} nul \u{0} del \u{7f} é 日本 🎉 \u{8}\u{c}"
            ),
            serde_json::json!("\"\u{1}\n\\x".repeat(300)),
            serde_json::json!([]),
            serde_json::json!({}),
            serde_json::json!([1, "two", [3], {"four": 4}]),
            serde_json::json!({"role": "user", "content": "hi\n", "tool_calls": [{"id": "a", "function": {"arguments": "{\"x\":1}"}}]}),
        ];
        for value in &values {
            assert_eq!(json_len(value), value.to_string().len(), "{value}");
        }
    }

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
        let estimate = with_answer(tokens_in(&messages), Some(100));
        assert!((200..=230).contains(&estimate), "{estimate}");
    }
}
