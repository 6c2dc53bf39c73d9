//! The runtime's side of the registry: heartbeats out, lookups in.

use std::sync::Arc;
use std::time::Duration;

use async_nats::client::RequestErrorKind;
use backon::{ExponentialBuilder, Retryable};
use baton_proto::{AgentName, Heartbeat, LookupRequest, LookupResponse, Subjects, Wire, now_ms};

use crate::config::{WorkerConfig, WorkerStats};
use crate::error::{Error, ErrorKind};

/// Asks the registry service for the best agent (`baton.registry.lookup`).
///
/// A lookup that gets no answer (no registry replica running, or none
/// answering in time) is retried with backoff until the retry budget is
/// spent; then it fails with [`ErrorKind::Registry`], so a caller never hangs.
#[derive(Debug, Clone)]
pub struct RegistryClient {
    client: async_nats::Client,
    subject: String,
    timeout: Duration,
    budget: Duration,
}

impl RegistryClient {
    /// A client of the registry under `subjects`, with a 3 s retry budget.
    #[must_use]
    pub fn new(client: async_nats::Client, subjects: &Subjects) -> Self {
        Self {
            client,
            subject: subjects.lookup(),
            timeout: Duration::from_millis(500),
            budget: Duration::from_secs(3),
        }
    }

    /// Sets how long retries may go on in all before a lookup gives up.
    #[must_use]
    pub fn with_budget(mut self, budget: Duration) -> Self {
        self.budget = budget;
        self
    }

    /// The candidates for `request`, best first.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Registry`] when no replica answered within the budget, or
    /// when the registry refused the request (the error says why).
    pub async fn lookup(&self, request: &LookupRequest) -> Result<LookupResponse, Error> {
        let payload = request.to_msgpack().map_err(|err| {
            Error::with_source(ErrorKind::Registry, "cannot encode the lookup", err)
        })?;
        let payload = bytes::Bytes::from(payload);
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(50))
            .with_max_delay(Duration::from_millis(500))
            .with_total_delay(Some(self.budget))
            .without_max_times()
            .with_jitter();
        let attempt = || async {
            let request = async_nats::Request::new()
                .payload(payload.clone())
                .timeout(Some(self.timeout));
            self.client
                .send_request(self.subject.clone(), request)
                .await
        };
        let reply = attempt
            .retry(backoff)
            .when(|err| {
                matches!(
                    err.kind(),
                    RequestErrorKind::NoResponders | RequestErrorKind::TimedOut
                )
            })
            .notify(|err, delay| {
                tracing::debug!(error = %err, ?delay, "registry lookup unanswered; retrying");
            })
            .await
            .map_err(|err| {
                Error::with_source(
                    ErrorKind::Registry,
                    format!(
                        "the registry did not answer on {} within {:?}",
                        self.subject, self.budget
                    ),
                    err,
                )
            })?;
        if let Some(status) = reply
            .headers
            .as_ref()
            .and_then(|headers| headers.get("Nats-Service-Error"))
        {
            return Err(Error::new(
                ErrorKind::Registry,
                format!("the registry refused the lookup: {status}"),
            ));
        }
        LookupResponse::from_msgpack(&reply.payload).map_err(|err| {
            Error::with_source(
                ErrorKind::Registry,
                "the registry's answer is not a lookup response",
                err,
            )
        })
    }
}

impl RegistryClient {
    /// The best agent type for `request`, or why there is none: nothing
    /// fits, or no registry answered within the budget.
    pub(crate) async fn best(&self, request: &LookupRequest) -> Result<AgentName, String> {
        let response = self.lookup(request).await.map_err(|err| {
            tracing::warn!(error = %err, "registry lookup failed; taking the fallback path");
            err.to_string()
        })?;
        let Some(best) = response.candidates.first() else {
            let mut want = format!("capabilities [{}]", request.requires.join(", "));
            if !request.domains.is_empty() {
                want.push_str(&format!(", a domain of [{}]", request.domains.join(", ")));
            }
            if let Some(tier) = request.min_tier {
                want.push_str(&format!(", tier >= {tier}"));
            }
            return Err(format!(
                "no live agent offers {want} outside the path [{}]",
                request.exclude.join(", ")
            ));
        };
        AgentName::new(best.agent.as_str())
            .map_err(|err| format!("the registry proposed an invalid agent type: {err}"))
    }
}

/// Publishes the worker's heartbeat every interval until aborted.
pub(crate) fn spawn_heartbeats(
    client: async_nats::Client,
    config: &WorkerConfig,
    max_concurrency: usize,
    stats: Arc<WorkerStats>,
) -> tokio::task::JoinHandle<()> {
    let interval = config.heartbeat_interval.max(Duration::from_millis(10));
    let subject = config.subjects.heartbeat(&config.agent, &config.instance);
    let profile = &config.profile;
    let mut beat = Heartbeat {
        agent: config.agent.to_string(),
        instance: config.instance.clone(),
        capabilities: profile.capabilities.clone(),
        domains: profile.domains.clone(),
        tier: profile.tier,
        in_flight: 0,
        max_concurrency: u32::try_from(max_concurrency).unwrap_or(u32::MAX),
        processed: 0,
        failed: 0,
        at: 0,
        interval_ms: Some(u64::try_from(interval.as_millis()).unwrap_or(u64::MAX)),
        extra: baton_proto::Map::new(),
    };
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            beat.in_flight = u32::try_from(stats.in_flight()).unwrap_or(u32::MAX);
            beat.processed = stats.processed();
            beat.failed = stats.failed();
            beat.at = now_ms();
            match beat.to_msgpack() {
                Ok(payload) => {
                    if let Err(err) = client.publish(subject.clone(), payload.into()).await {
                        tracing::debug!(error = %err, "could not send a heartbeat");
                    }
                }
                Err(err) => tracing::warn!(error = %err, "cannot encode a heartbeat"),
            }
        }
    })
}
