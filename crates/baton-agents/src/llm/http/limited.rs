//! A call in its turn under the endpoint's shared rate limit: a `429` cuts
//! the shared rate and the call waits for a new turn (failing with reason
//! `rate_limited` only past the session's deadline), and a stream cut
//! before the answer ended is asked again, up to [`CUT_AGAIN`] times.

use baton_worker::AgentError;
use serde_json::Value as Json;

use super::Endpoint;
use super::sending::Failure;
use super::stream::Live;
use crate::limits::Turn;
use crate::llm::types::request::Request;
use crate::llm::types::response::ChatResponse;

/// How many times one call is made again within its hop after its stream
/// was cut.
const CUT_AGAIN: u32 = 2;

impl Endpoint {
    /// The call, in its turn under the shared limit. A `429` cuts the
    /// shared rate; the call waits out its `Retry-After` and takes a new
    /// turn, as often as it takes: it fails on rate limits only when its
    /// next turn would come after the session's `deadline` (unix ms), with
    /// reason `rate_limited` and the provider's last word. Waiting counts in
    /// the hop's `timeout_ms`. A stream cut before the answer ended is asked
    /// again, up to [`CUT_AGAIN`] times.
    pub(super) async fn limited(
        &self,
        request: &Request<'_>,
        live: Option<Live<'_>>,
        (deadline, mut taken): (Option<u64>, Option<Turn>),
    ) -> Result<Json, AgentError> {
        let (estimate, until) = self.limit_request(request.prompt, deadline);
        let mut last_refusal: Option<String> = None;
        let mut cut = 0;
        loop {
            let turn = match taken.take() {
                Some(turn) => Some(turn),
                None => self.turn(estimate, until, last_refusal.as_deref()).await?,
            };
            let (answer, advice) = self.request(request, live).await;
            if let Some(limiter) = &self.limiter {
                limiter.hear(&advice).await;
            }
            self.limit_metrics.heard(&advice.heard());
            match answer {
                Ok(answer) => {
                    if let Some(turn) = turn {
                        turn.flight.answered();
                    }
                    if let Some(limiter) = &self.limiter {
                        let used = ChatResponse::of(&answer).usage.total_tokens;
                        let used = used.unwrap_or(0);
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
                    limiter.refuse(&turn).await;
                    // Not in flight while it waits out its Retry-After.
                    drop(turn);
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
    /// [`Endpoint::complete`] would take it.
    pub(crate) async fn turn_for(
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
            .map_err(|err| AgentError::retryable(err.to_string()))?
        else {
            return Err(rate_limited(
                last_refusal,
                "no turn under the shared rate limit comes before the session's deadline",
            ));
        };
        self.limit_metrics.turn(turn.wait, turn.rate, turn.window);
        Ok(Some(turn))
    }
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
