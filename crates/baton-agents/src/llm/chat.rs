//! One chat completion: the HTTP request to the OpenAI-compatible
//! endpoint, streamed when the session asked for live answers (and read
//! whole when the endpoint answers with plain JSON instead), its errors,
//! and the usage it reports.

use std::time::Duration;

use baton_worker::AgentError;
use serde_json::{Value as Json, json};
use tracing::Instrument as _;

use super::LlmRunner;
use super::body::Asked;
use super::headers::Advice;
use super::stream::{self, Broken, Live};
use crate::limits::Turn;

impl LlmRunner {
    /// One chat completion, in a `chat {model}` span with the GenAI
    /// attributes: the request model, the finish reasons and the token
    /// usage the answer reports. `deadline` is the session's (unix ms);
    /// `taken`, a turn under the shared limit taken for this call already.
    pub(super) async fn complete(
        &self,
        asked: &Asked<'_>,
        model: &str,
        live: Option<Live<'_>>,
        offer: Offer,
        (deadline, taken): (Option<u64>, Option<Turn>),
    ) -> Result<Json, AgentError> {
        let span = tracing::info_span!(
            "chat",
            otel.name = %format_args!("chat {model}"),
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = "openai",
            gen_ai.request.model = %model,
            gen_ai.response.model = tracing::field::Empty,
            gen_ai.response.finish_reasons = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            gen_ai.conversation.id = baton_worker::conversation_id(),
            error.type = tracing::field::Empty,
        );
        let live = live.filter(|live| self.settings.stream && live.progress.streams());
        let answer = self
            .limited(asked, model, live, offer, (deadline, taken))
            .instrument(span.clone())
            .await;
        match &answer {
            Ok(answer) => self.record_usage(&span, answer),
            Err(err) => {
                span.record("otel.status_code", "ERROR");
                let kind = match err {
                    AgentError::Fatal(_) => "fatal",
                    _ => "retryable",
                };
                span.record("error.type", kind);
            }
        }
        answer
    }

    /// Puts the answer's model, finish reasons and usage on `span`, and
    /// counts the tokens and, with `[llm.price]`, the cost.
    fn record_usage(&self, span: &tracing::Span, answer: &Json) {
        let model = answer["model"].as_str().unwrap_or(&self.settings.model);
        span.record("gen_ai.response.model", model);
        let reasons: Vec<&str> = answer["choices"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|choice| choice["finish_reason"].as_str())
            .collect();
        span.record("gen_ai.response.finish_reasons", format!("{reasons:?}"));
        let usage = &answer["usage"];
        for (field, key, kind) in [
            ("gen_ai.usage.input_tokens", "prompt_tokens", "input"),
            ("gen_ai.usage.output_tokens", "completion_tokens", "output"),
        ] {
            if let Some(tokens) = usage[key].as_u64() {
                span.record(field, tokens);
                let labels = [
                    opentelemetry::KeyValue::new("model", model.to_owned()),
                    opentelemetry::KeyValue::new("type", kind),
                ];
                self.tokens.add(tokens, &labels);
            }
        }
        if let (Some(price), Some(input), Some(output)) = (
            &self.settings.price,
            usage["prompt_tokens"].as_u64(),
            usage["completion_tokens"].as_u64(),
        ) {
            #[allow(clippy::cast_precision_loss)] // millionths of a currency unit
            let cost = price.micros(input, output) as f64 / 1e6;
            let labels = [opentelemetry::KeyValue::new("model", model.to_owned())];
            self.cost.add(cost, &labels);
        }
    }

    /// The call, in its turn under the shared limit. A `429` cuts the
    /// shared rate; the call waits out its `Retry-After` and takes a new
    /// turn, as often as it takes: it fails on rate limits only when its
    /// next turn would come after the session's `deadline` (unix ms), with
    /// reason `rate_limited` and the provider's last word. Waiting counts in
    /// the hop's `timeout_ms`. A stream cut before the answer ended is asked
    /// again, up to [`CUT_AGAIN`] times.
    async fn limited(
        &self,
        asked: &Asked<'_>,
        model_name: &str,
        live: Option<Live<'_>>,
        offer: Offer,
        (deadline, mut taken): (Option<u64>, Option<Turn>),
    ) -> Result<Json, AgentError> {
        let (estimate, until) = self.limit_request(asked.prompt, deadline);
        let mut last_refusal: Option<String> = None;
        let mut cut = 0;
        loop {
            let turn = match taken.take() {
                Some(turn) => Some(turn),
                None => self.turn(estimate, until, last_refusal.as_deref()).await?,
            };
            let (answer, advice) = self.request(asked, model_name, live, offer).await;
            if let Some(limiter) = &self.limiter {
                limiter.hear(&advice).await;
            }
            match answer {
                Ok(answer) => {
                    if let Some(limiter) = &self.limiter {
                        let used = answer["usage"]["total_tokens"].as_u64().unwrap_or(0);
                        if used > estimate {
                            limiter.charge(used - estimate).await;
                        }
                    }
                    return Ok(answer);
                }
                Err(Failure::Refused(error)) => {
                    self.limit_metrics.refused();
                    let (Some(limiter), Some(turn)) = (&self.limiter, turn) else {
                        return Err(error);
                    };
                    limiter.refuse(turn.slot).await;
                    let after = advice.retry_after.unwrap_or_default();
                    let said = error.to_string();
                    tracing::info!(
                        ?after,
                        "the model refused a call (429): slowing the shared rate down"
                    );
                    let resume = baton_proto::now_ms()
                        .saturating_add(u64::try_from(after.as_millis()).unwrap_or(u64::MAX));
                    if deadline.is_some_and(|deadline| resume > deadline) {
                        return Err(rate_limited(
                            Some(&said),
                            "its Retry-After ends after the session's deadline",
                        ));
                    }
                    tokio::time::sleep(after).await;
                    last_refusal = Some(said);
                }
                Err(Failure::Cut(error)) if cut < CUT_AGAIN => {
                    cut += 1;
                    tracing::info!(%error, cut, "the answer's stream was cut: asking again");
                }
                Err(Failure::Cut(error) | Failure::Other(error)) => return Err(error),
            }
        }
    }

    /// The turn under the shared limit of a call whose prompt is about
    /// `prompt` tokens, in a session with `deadline` (unix ms), as
    /// [`LlmRunner::complete`] would take it.
    pub(super) async fn turn_for(
        &self,
        prompt: u64,
        deadline: Option<u64>,
    ) -> Result<Option<Turn>, AgentError> {
        let (estimate, until) = self.limit_request(prompt, deadline);
        self.turn(estimate, until, None).await
    }

    /// What a call whose prompt is about `prompt` tokens asks of the shared
    /// limit: its estimated tokens, and the latest its turn may come (unix µs), from the
    /// session's `deadline` (unix ms).
    fn limit_request(&self, prompt: u64, deadline: Option<u64>) -> (u64, u64) {
        let estimate = crate::limits::with_answer(prompt, self.settings.max_tokens);
        let until = deadline.map_or(u64::MAX, |ms| ms.saturating_mul(1000));
        (estimate, until)
    }

    /// This call's turn under the shared limit (`None` without one); a
    /// `rate_limited` failure when it would come after `until` (unix µs).
    async fn turn(
        &self,
        estimate: u64,
        until: u64,
        last_refusal: Option<&str>,
    ) -> Result<Option<Turn>, AgentError> {
        let Some(limiter) = &self.limiter else {
            return Ok(None);
        };
        let Some(turn) = limiter
            .take(estimate, until)
            .await
            .map_err(AgentError::retryable)?
        else {
            return Err(rate_limited(
                last_refusal,
                "no turn under the shared rate limit comes before the session's deadline",
            ));
        };
        self.limit_metrics.turn(turn.wait, turn.rate);
        Ok(Some(turn))
    }

    async fn request(
        &self,
        asked: &Asked<'_>,
        model: &str,
        live: Option<Live<'_>>,
        offer: Offer,
    ) -> (Result<Json, Failure>, Advice) {
        // Written once per call: the plain body, when it was written for
        // the digest of what is asked already.
        let body = match (&live, &asked.plain) {
            (None, Some(plain)) => plain.clone(),
            _ => self.written(asked.messages, live.is_some(), model, offer),
        };
        let url = format!(
            "{}/chat/completions",
            self.settings.base_url.trim_end_matches('/')
        );
        let mut request = self
            .http
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(err) => {
                let error = format!("cannot reach the model at {url}: {err}");
                return (
                    Err(Failure::Other(AgentError::retryable(error))),
                    Advice::default(),
                );
            }
        };
        let advice = Advice::of(response.headers(), std::time::SystemTime::now());
        (
            self.read(response, &url, live, advice.retry_after).await,
            advice,
        )
    }

    /// What `response` (from `url`) answered.
    async fn read(
        &self,
        response: reqwest::Response,
        url: &str,
        live: Option<Live<'_>>,
        retry_after: Option<Duration>,
    ) -> Result<Json, Failure> {
        let status = response.status();
        let streamed = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("text/event-stream"));
        if let (true, true, Some(live)) = (status.is_success(), streamed, live) {
            return stream::read(response, live)
                .await
                .map_err(|broken| match broken {
                    Broken::Cut(why) => Failure::Cut(AgentError::retryable(why)),
                    Broken::Bad(why) => Failure::Other(AgentError::retryable(why)),
                });
        }
        // A plain answer: the endpoint does not stream, or was not asked to.
        let text = response.text().await.map_err(|err| {
            Failure::Other(AgentError::retryable(format!(
                "the model's answer was cut off: {err}"
            )))
        })?;
        if status.is_success() {
            return serde_json::from_str(&text).map_err(|err| {
                Failure::Other(AgentError::retryable(format!(
                    "the model's answer is not JSON: {err}"
                )))
            });
        }
        let excerpt: String = text.chars().take(300).collect();
        let detail = format!("{url} answered {status}: {excerpt}");
        if status.as_u16() == 429 || status.is_server_error() {
            let error = match retry_after {
                Some(after) => AgentError::retry_after(detail, after),
                None => AgentError::retryable(detail),
            };
            return Err(if status.as_u16() == 429 {
                Failure::Refused(error)
            } else {
                Failure::Other(error)
            });
        }
        let hint = match status.as_u16() {
            401 | 403 => " (check the API key in [llm] api_key_env)",
            404 => " (check [llm] base_url and model)",
            _ => "",
        };
        Err(Failure::Other(AgentError::fatal(format!("{detail}{hint}"))))
    }
}

/// What a call offers the model besides the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Offer {
    /// Nothing: the model only writes (a summary).
    Nothing,
    /// The agent's tools, and `ask_user` in a conversation's turn.
    Tools {
        /// Whether `ask_user` is offered.
        ask_user: bool,
    },
}

/// How many times one call is made again within its hop after its stream
/// was cut.
const CUT_AGAIN: u32 = 2;

/// Why a request failed.
enum Failure {
    /// The endpoint refused it with `429`.
    Refused(AgentError),
    /// The answer's stream ended before the answer did.
    Cut(AgentError),
    /// Anything else.
    Other(AgentError),
}

/// The failure of a call the provider kept refusing (`said`, its last
/// refusal, if it refused one) until the session's deadline: the session
/// fails with reason `rate_limited`.
fn rate_limited(said: Option<&str>, why: &str) -> AgentError {
    let said = said.map_or_else(String::new, |said| {
        format!("; the provider last said: {said}")
    });
    AgentError::Fail(
        baton_proto::Reason::RateLimited,
        format!("the model is rate-limited and {why}{said}"),
    )
}

impl LlmRunner {
    /// The system prompt, then the session's conversation, as chat messages.
    pub(super) fn conversation(&self, task: &baton_worker::Task) -> Vec<Json> {
        self.conversation_of(&task.envelope.context.messages)
    }

    /// The system prompt, then `conversation`, as chat messages: a
    /// compaction's summary under its heading, a dropped one not at all.
    pub(super) fn conversation_of<'a>(
        &self,
        conversation: impl IntoIterator<Item = &'a baton_proto::Message>,
    ) -> Vec<Json> {
        let mut messages = Vec::new();
        if !self.settings.system_prompt.is_empty() {
            messages.push(json!({"role": "system", "content": self.settings.system_prompt}));
        }
        for message in conversation {
            if message.compaction.is_some() {
                if !message.content.is_empty() {
                    let content = format!("{}\n{}", super::bound::SUMMARY_HEADING, message.content);
                    messages.push(json!({"role": "system", "content": content}));
                }
                continue;
            }
            let role = match message.role {
                baton_proto::Role::User => "user",
                baton_proto::Role::System => "system",
                baton_proto::Role::Tool => "tool",
                _ => "assistant",
            };
            let mut entry = json!({"role": role, "content": message.content});
            if let Some(name) = message.name.as_deref().filter(|_| role != "tool") {
                entry["name"] = json!(name);
            }
            if let Some(calls) = &message.tool_calls {
                entry["tool_calls"] = serde_json::to_value(calls).unwrap_or(Json::Null);
            }
            if let Some(id) = &message.tool_call_id {
                entry["tool_call_id"] = json!(id);
            }
            messages.push(entry);
        }
        messages
    }
}
