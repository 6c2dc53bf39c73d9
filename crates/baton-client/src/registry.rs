//! The runtime's side of the registry: heartbeats out, lookups in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_nats::client::RequestErrorKind;
use backon::{ExponentialBuilder, Retryable};

use baton_proto::{
    AgentName, FeedbackReply, FeedbackRequest, LookupRequest, LookupResponse, Notebook,
    NotebookRequest, Subjects, Wire,
};

use baton_nats::{Error, ErrorKind};

/// Asks the registry service for the best agent (`baton.registry.lookup`).
///
/// A lookup that gets no answer (no registry replica running, or none
/// answering in time) is retried with backoff until the retry budget is
/// spent; then it fails with [`ErrorKind::Registry`], so a caller never hangs.
///
/// During an outage the client answers from memory: the registry's last
/// answer to the same request, if it is at most
/// [`RegistryClient::with_memory`] old. After one lookup went unanswered,
/// the registry counts as down for a few seconds, and lookups in that time
/// do not wait for it: they answer from memory or fail at once, so a
/// registry outage does not hold a worker's slots.
#[derive(Debug, Clone)]
pub struct RegistryClient {
    client: async_nats::Client,
    subject: String,
    feedback: String,
    notebook: String,
    timeout: Duration,
    budget: Duration,
    memory: Arc<Memory>,
    metrics: Arc<LookupMetrics>,
}

/// Lookups by where their answer came from, and how long they took.
#[derive(Debug)]
struct LookupMetrics {
    lookups: opentelemetry::metrics::Counter<u64>,
    latency: opentelemetry::metrics::Histogram<f64>,
}

impl LookupMetrics {
    fn new() -> Self {
        let meter = baton_nats::meter::meter();
        Self {
            lookups: meter
                .u64_counter("baton.registry.lookups")
                .with_description("Registry lookups, by result: answered, remembered (answered from memory during an outage), unanswered or refused")
                .build(),
            latency: meter
                .f64_histogram("baton.registry.lookup.duration")
                .with_unit("s")
                .with_description("How long a registry lookup took, retries included")
                .with_boundaries(baton_nats::meter::SECONDS.to_vec())
                .build(),
        }
    }
}

/// The registry's recent answers, and whether it is down.
#[derive(Debug)]
struct Memory {
    /// How old an answer may be and still be used; zero keeps none.
    max_age: Duration,
    /// Answers by encoded request.
    answers: Mutex<HashMap<Vec<u8>, (Instant, LookupResponse)>>,
    /// Until when lookups do not wait for the registry.
    down_until: Mutex<Option<Instant>>,
}

/// How many distinct requests are remembered.
const REMEMBERED: usize = 4096;

/// How long the registry counts as down after a lookup went unanswered.
const DOWN_FOR: Duration = Duration::from_secs(5);

impl Memory {
    fn new(max_age: Duration) -> Self {
        Self {
            max_age,
            answers: Mutex::default(),
            down_until: Mutex::default(),
        }
    }

    fn remember(&self, key: &[u8], answer: &LookupResponse) {
        if self.max_age.is_zero() {
            return;
        }
        let mut answers = self.answers.lock().unwrap_or_else(PoisonError::into_inner);
        if answers.len() >= REMEMBERED {
            let max_age = self.max_age;
            answers.retain(|_, (at, _)| at.elapsed() <= max_age);
            if answers.len() >= REMEMBERED {
                answers.clear();
            }
        }
        answers.insert(key.to_vec(), (Instant::now(), answer.clone()));
    }

    /// The remembered answer to `key` and its age, if it is young enough.
    fn recall(&self, key: &[u8]) -> Option<(LookupResponse, Duration)> {
        let answers = self.answers.lock().unwrap_or_else(PoisonError::into_inner);
        let (at, answer) = answers.get(key)?;
        let age = at.elapsed();
        (age <= self.max_age).then(|| (answer.clone(), age))
    }

    fn is_down(&self) -> bool {
        let down = self
            .down_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        down.is_some_and(|until| Instant::now() < until)
    }

    fn mark(&self, down: bool) {
        let mut until = self
            .down_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *until = down.then(|| Instant::now() + DOWN_FOR);
    }
}

impl RegistryClient {
    /// A client of the registry under `subjects`, with a 3 s retry budget.
    #[must_use]
    pub fn new(client: async_nats::Client, subjects: &Subjects) -> Self {
        Self {
            client,
            subject: subjects.lookup(),
            feedback: subjects.feedback(),
            notebook: subjects.notebook(),
            timeout: Duration::from_millis(500),
            budget: Duration::from_secs(3),
            memory: Arc::new(Memory::new(Duration::from_secs(30))),
            metrics: Arc::new(LookupMetrics::new()),
        }
    }

    /// Answers from the registry's last answer to the same request, at most
    /// `max_age` old, while the registry is unreachable (30 s by default;
    /// zero turns this off).
    #[must_use]
    pub fn with_memory(mut self, max_age: Duration) -> Self {
        self.memory = Arc::new(Memory::new(max_age));
        self
    }

    /// Sets how long retries may go on in all before a lookup gives up.
    #[must_use]
    pub fn with_budget(mut self, budget: Duration) -> Self {
        self.budget = budget;
        self
    }

    /// The candidates for `request`, best first: the registry's answer, or,
    /// while it is unreachable, its last answer to the same request if that
    /// is young enough.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Registry`] when no replica answered within the budget
    /// (or the registry counts as down) and nothing young enough is
    /// remembered, or when the registry refused the request (the error says
    /// why).
    pub async fn lookup(&self, request: &LookupRequest) -> Result<LookupResponse, Error> {
        let started = Instant::now();
        let (answer, how) = self.answer(request).await;
        let how = opentelemetry::KeyValue::new("result", how);
        self.metrics.lookups.add(1, std::slice::from_ref(&how));
        self.metrics
            .latency
            .record(started.elapsed().as_secs_f64(), &[how]);
        answer
    }

    /// The answer to `request`, and where it came from: `answered`,
    /// `remembered`, `unanswered` or `refused`.
    async fn answer(
        &self,
        request: &LookupRequest,
    ) -> (Result<LookupResponse, Error>, &'static str) {
        let payload = match request.to_msgpack() {
            Ok(payload) => payload,
            Err(err) => {
                let err = Error::with_source(ErrorKind::Registry, "cannot encode the lookup", err);
                return (Err(err), "refused");
            }
        };
        // Remembered by the kind of work, whatever the task's text.
        let kind = LookupRequest {
            query: None,
            features: Vec::new(),
            ..request.clone()
        };
        let key = kind.to_msgpack().unwrap_or_else(|_| payload.clone());
        if self.memory.is_down() {
            let why = "the registry did not answer moments ago".to_owned();
            return self.remembered(&key, why);
        }
        let answer = self.ask(bytes::Bytes::from(payload)).await;
        match &answer {
            Ok(response) => {
                self.memory.mark(false);
                self.memory.remember(&key, response);
                (answer, "answered")
            }
            Err(err) if err.kind() == ErrorKind::Timeout => {
                self.memory.mark(true);
                self.remembered(&key, err.to_string())
            }
            Err(_) => (answer, "refused"),
        }
    }

    /// The remembered answer to `payload`, or the error `why`.
    fn remembered(
        &self,
        payload: &[u8],
        why: String,
    ) -> (Result<LookupResponse, Error>, &'static str) {
        match self.memory.recall(payload) {
            Some((answer, age)) => {
                tracing::info!(
                    ?age,
                    "the registry is unreachable; routing from its last answer"
                );
                (Ok(answer), "remembered")
            }
            None => (Err(Error::new(ErrorKind::Registry, why)), "unanswered"),
        }
    }

    /// One lookup over the network, retried within the budget.
    async fn ask(&self, payload: bytes::Bytes) -> Result<LookupResponse, Error> {
        let reply = self.call(&self.subject, payload, "lookup").await?;
        LookupResponse::from_msgpack(&reply).map_err(|err| {
            Error::with_source(
                ErrorKind::Registry,
                "the registry's answer is not a lookup response",
                err,
            )
        })
    }

    /// Stores feedback on a session; the answer names the agents it is
    /// credited to.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Registry`] with the registry's reason when it refused
    /// the feedback (an unknown session, a score out of range), or
    /// [`ErrorKind::Timeout`] when no replica answered.
    pub async fn feedback(&self, request: &FeedbackRequest) -> Result<FeedbackReply, Error> {
        self.exchange(&self.feedback, request, "feedback").await
    }

    /// The notebook of agent type `agent`.
    ///
    /// # Errors
    ///
    /// As [`feedback`](Self::feedback); an unknown agent type is refused.
    pub async fn notebook(&self, agent: &AgentName) -> Result<Notebook, Error> {
        let request = NotebookRequest {
            agent: agent.clone(),
            extra: baton_proto::Map::new(),
        };
        self.exchange(&self.notebook, &request, "notebook request")
            .await
    }

    async fn exchange<Q: Wire, A: Wire>(
        &self,
        subject: &str,
        request: &Q,
        what: &str,
    ) -> Result<A, Error> {
        let payload = request.to_msgpack().map_err(|err| {
            Error::with_source(
                ErrorKind::Registry,
                format!("cannot encode the {what}"),
                err,
            )
        })?;
        let reply = self.call(subject, payload.into(), what).await?;
        A::from_msgpack(&reply).map_err(|err| {
            Error::with_source(
                ErrorKind::Registry,
                format!("the registry's answer to the {what} is unreadable"),
                err,
            )
        })
    }

    /// One request to the registry, retried within the budget while no
    /// replica answers; the answer's payload, or the registry's refusal.
    async fn call(
        &self,
        subject: &str,
        payload: bytes::Bytes,
        what: &str,
    ) -> Result<bytes::Bytes, Error> {
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
            self.client.send_request(subject.to_owned(), request).await
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
                tracing::debug!(error = %err, ?delay, "registry request unanswered; retrying");
            })
            .await
            .map_err(|err| {
                // `Timeout`: no replica answered (see `lookup`).
                Error::with_source(
                    ErrorKind::Timeout,
                    format!(
                        "the registry did not answer on {subject} within {:?}",
                        self.budget
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
                format!("the registry refused the {what}: {status}"),
            ));
        }
        Ok(reply.payload)
    }
}

impl baton_author::Lookups for RegistryClient {
    fn lookup<'a>(
        &'a self,
        request: &'a LookupRequest,
    ) -> std::pin::Pin<
        Box<dyn Future<Output = Result<LookupResponse, baton_author::Error>> + Send + 'a>,
    > {
        Box::pin(async move {
            RegistryClient::lookup(self, request)
                .await
                .map_err(baton_author::Error::lookup)
        })
    }
}

impl RegistryClient {
    /// The best agent type for `request`, or why there is none: nothing
    /// fits, or no registry answered within the budget.
    ///
    /// # Errors
    ///
    /// The lookup's error when no registry answered, [`ErrorKind::NoRoute`]
    /// when nothing fits, [`ErrorKind::Registry`] when the registry
    /// proposed an invalid agent type.
    pub async fn best(&self, request: &LookupRequest) -> Result<AgentName, Error> {
        let response = self.lookup(request).await.inspect_err(|err| {
            tracing::warn!(error = %err, "registry lookup failed; taking the fallback path");
        })?;
        let Some(best) = response.candidates.first() else {
            let mut want = format!("capabilities [{}]", request.requires.join(", "));
            if !request.domains.is_empty() {
                want.push_str(&format!(", a domain of [{}]", request.domains.join(", ")));
            }
            if let Some(tier) = request.min_tier {
                want.push_str(&format!(", tier >= {tier}"));
            }
            return Err(Error::new(
                ErrorKind::NoRoute,
                format!(
                    "no live agent offers {want} outside the path [{}]",
                    request.exclude.join(", ")
                ),
            ));
        };
        AgentName::new(best.agent.as_str()).map_err(|err| {
            Error::new(
                ErrorKind::Registry,
                format!("the registry proposed an invalid agent type: {err}"),
            )
        })
    }
}
