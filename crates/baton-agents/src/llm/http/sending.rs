//! One request to the endpoint, and what its response answered: a stream
//! read as it comes (when the call follows its answer live and the
//! endpoint streams), else the plain JSON answer, or the failure the
//! status says.

use std::time::Duration;

use baton_worker::AgentError;
use serde_json::Value as Json;

use super::Endpoint;
use super::headers::Advice;
use super::stream::{self, Broken, Live};
use crate::llm::types::request::Request;

/// Why a request failed.
pub(super) enum Failure {
    /// The endpoint refused it with `429`.
    Refused(AgentError),
    /// The answer's stream ended before the answer did.
    Cut(AgentError),
    /// Anything else.
    Other(AgentError),
}

impl Endpoint {
    /// Sends `request` (streamed when it is followed `live`): its answer, and
    /// what the response's headers advise.
    pub(super) async fn request(
        &self,
        request: &Request<'_>,
        live: Option<Live<'_>>,
    ) -> (Result<Json, Failure>, Advice) {
        // Written once per call: the plain body, when it was written for
        // the digest of what is asked already.
        let body = request.body(live.is_some());
        let url = format!(
            "{}/chat/completions",
            self.settings.base_url.trim_end_matches('/')
        );
        let mut sent = self
            .http
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(key) = &self.api_key {
            sent = sent.bearer_auth(key);
        }
        let response = match sent.send().await {
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
        (read(response, &url, live, advice.retry_after).await, advice)
    }
}

/// What `response` (from `url`) answered.
async fn read(
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
