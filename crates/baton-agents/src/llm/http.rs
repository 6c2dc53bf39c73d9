//! The HTTP client of a model call, above the types and below the answer:
//! one chat completion from the OpenAI-compatible endpoint, in a `chat
//! {model}` span with the GenAI attributes, its tokens and cost counted.
//!
//! - [`Endpoint`]: the HTTP client, the API key, the endpoint's shared rate
//!   limit and the usage meters;
//! - `limited`: a call in its turn under the shared limit, and what a
//!   refusal (`429`) or a cut stream does;
//! - `sending`: the request, and what its response answered;
//! - `stream`: a streamed answer read as it comes;
//! - `headers`: what the response's headers say of the provider's limits.

use std::sync::Arc;
use std::time::Duration;

use baton_worker::AgentError;
use opentelemetry::metrics::Counter;
use serde_json::Value as Json;
use tracing::Instrument as _;

use super::types::request::Request;
use super::types::response::ChatResponse;
use crate::limits::{Limiter, Metrics, Turn};
use crate::spec::LlmSpec;
use crate::{Error, ErrorKind};

pub(crate) mod headers;
mod limited;
mod sending;
pub(crate) mod stream;

use stream::Live;

/// The model's endpoint, as the agent calls it.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    settings: Arc<LlmSpec>,
    http: reqwest::Client,
    api_key: Option<String>,
    /// The endpoint's shared rate limit (none only for a runner built
    /// without NATS, in unit tests).
    limiter: Option<Arc<Limiter>>,
    /// The limit's rate, waits and refusals on the metrics endpoint.
    limit_metrics: Metrics,
    /// Tokens in and out, by model (`baton.llm.tokens`).
    tokens: Counter<u64>,
    /// What the calls cost by `[llm.price]`, by model (`baton.llm.cost`).
    cost: Counter<f64>,
}

impl Endpoint {
    /// The endpoint of `settings`.
    ///
    /// # Errors
    ///
    /// When `api_key_env` names a variable that is not set, or the HTTP
    /// client cannot be built.
    pub(crate) fn new(settings: Arc<LlmSpec>) -> Result<Self, Error> {
        let api_key = match &settings.api_key_env {
            Some(var) => Some(std::env::var(var).map_err(|_| {
                Error::new(
                    ErrorKind::Config,
                    format!(
                        "[llm] api_key_env names {var}, which is not set: export {var}=<your key>"
                    ),
                )
            })?),
            None => None,
        };
        let http = crate::http()
            .timeout(Duration::from_millis(settings.request_timeout_ms))
            .build()
            .map_err(|err| {
                Error::new(
                    ErrorKind::Http,
                    format!("cannot build the HTTP client: {err}"),
                )
            })?;
        Ok(Self {
            limit_metrics: Metrics::new(&settings.base_url, &settings.model),
            settings,
            http,
            api_key,
            limiter: None,
            tokens: baton_nats::meter::meter()
                .u64_counter("baton.llm.tokens")
                .with_description("Tokens the model read (type input) and wrote (type output), by model, from its usage report")
                .build(),
            cost: baton_nats::meter::meter()
                .f64_counter("baton.llm.cost")
                .with_description("What the model calls cost by the spec's [llm.price], by model, from their usage reports")
                .build(),
        })
    }

    /// Takes turns from the endpoint's shared rate limit.
    pub(crate) fn limit(&mut self, limiter: Limiter) {
        self.limiter = Some(Arc::new(limiter));
    }

    /// Whether a call that follows its answer live is streamed.
    fn streams<'a>(&self, live: Option<Live<'a>>) -> Option<Live<'a>> {
        live.filter(|live| self.settings.stream && live.progress.streams())
    }

    /// One chat completion, in a `chat {model}` span with the GenAI
    /// attributes: the request model, the finish reasons and the token
    /// usage the answer reports. `deadline` is the session's (unix ms);
    /// `taken`, a turn under the shared limit taken for this call already.
    pub(crate) async fn complete(
        &self,
        request: &Request<'_>,
        live: Option<Live<'_>>,
        (deadline, taken): (Option<u64>, Option<Turn>),
    ) -> Result<Json, AgentError> {
        let model = request.model;
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
        let live = self.streams(live);
        let answer = self
            .limited(request, live, (deadline, taken))
            .instrument(span.clone())
            .await;
        match &answer {
            Ok(answer) => self.record_usage(&span, &ChatResponse::of(answer)),
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
    fn record_usage(&self, span: &tracing::Span, answer: &ChatResponse) {
        let model = answer.model.as_deref().unwrap_or(&self.settings.model);
        span.record("gen_ai.response.model", model);
        let reasons: Vec<&str> = answer
            .choices
            .iter()
            .filter_map(|choice| choice.finish_reason.as_deref())
            .collect();
        span.record("gen_ai.response.finish_reasons", format!("{reasons:?}"));
        let usage = answer.usage;
        for (field, tokens, kind) in [
            ("gen_ai.usage.input_tokens", usage.prompt_tokens, "input"),
            (
                "gen_ai.usage.output_tokens",
                usage.completion_tokens,
                "output",
            ),
        ] {
            if let Some(tokens) = tokens {
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
            usage.prompt_tokens,
            usage.completion_tokens,
        ) {
            #[allow(clippy::cast_precision_loss)] // millionths of a currency unit
            let cost = price.micros(input, output) as f64 / 1e6;
            let labels = [opentelemetry::KeyValue::new("model", model.to_owned())];
            self.cost.add(cost, &labels);
        }
    }
}
