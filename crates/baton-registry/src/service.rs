//! The registry as a NATS micro service.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream;
use async_nats::service::{self, ServiceExt};
use baton_proto::{Heartbeat, LookupRequest, LookupResponse, Subjects, Wire};
use bytes::Bytes;
use futures::StreamExt;
use opentelemetry::metrics::Counter;
use tokio::time::Instant;

use crate::rank::rank;
use crate::table::{Backlog, Table};

/// The micro service name every replica registers under.
pub const SERVICE_NAME: &str = "baton-registry";

const JSON: &str = "application/json";

/// Settings of one registry replica.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RegistryConfig {
    /// Subject names.
    pub subjects: Subjects,
    /// The workers' heartbeat interval: instances that do not state theirs
    /// are dropped after three of these; backlogs are read this often.
    pub heartbeat_interval: Duration,
    /// How long a starting replica listens to heartbeats before it answers
    /// lookups, so it never answers from a half-filled table.
    pub warmup: Duration,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            subjects: Subjects::default(),
            heartbeat_interval: Duration::from_secs(2),
            warmup: Duration::from_secs(2),
        }
    }
}

impl RegistryConfig {
    /// Sets the subject prefix.
    #[must_use]
    pub fn with_subjects(mut self, subjects: Subjects) -> Self {
        self.subjects = subjects;
        self
    }

    /// Sets the heartbeat interval, and the warm-up to match it.
    #[must_use]
    pub fn with_heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = interval;
        self.warmup = interval;
        self
    }

    /// Sets the warm-up alone.
    #[must_use]
    pub fn with_warmup(mut self, warmup: Duration) -> Self {
        self.warmup = warmup;
        self
    }
}

/// Why the registry could not start.
#[derive(Debug, thiserror::Error)]
#[error("{message}: {source}")]
pub struct Error {
    message: String,
    #[source]
    source: async_nats::Error,
}

impl Error {
    fn new(message: impl Into<String>, source: impl Into<async_nats::Error>) -> Self {
        Self {
            message: message.into(),
            source: source.into(),
        }
    }
}

/// One registry replica. Run as many as you like: each holds the whole table.
pub struct Registry {
    client: async_nats::Client,
    config: RegistryConfig,
}

impl Registry {
    /// A replica on `client`.
    #[must_use]
    pub fn new(client: async_nats::Client, config: RegistryConfig) -> Self {
        Self { client, config }
    }

    /// Listens to heartbeats, then answers lookups until `shutdown` resolves.
    ///
    /// # Errors
    ///
    /// Only when it cannot subscribe or register the service; bad heartbeats
    /// and bad requests are logged or answered with an error, never fatal.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), Error> {
        let Self { client, config } = self;
        tokio::pin!(shutdown);
        let mut table = Table::new(config.heartbeat_interval);
        let mut beats = client
            .subscribe(config.subjects.all_heartbeats())
            .await
            .map_err(|err| Error::new("cannot subscribe to heartbeats", err))?;
        tracing::info!(warmup = ?config.warmup, "registry started; listening to heartbeats");

        let warm = tokio::time::sleep(config.warmup);
        tokio::pin!(warm);
        loop {
            tokio::select! {
                Some(message) = beats.next() => record(&mut table, &message),
                () = &mut warm => break,
                () = &mut shutdown => return Ok(()),
            }
        }

        let service = client
            .service_builder()
            .description("Baton registry: best-agent lookup by capability, load and tier")
            .start(SERVICE_NAME, env!("CARGO_PKG_VERSION"))
            .await
            .map_err(|err| Error::new("cannot register the micro service", err))?;
        let mut lookups = service
            .endpoint_builder()
            .name("lookup")
            .add(config.subjects.lookup())
            .await
            .map_err(|err| Error::new("cannot add the lookup endpoint", err))?;
        let answered = opentelemetry::global::meter("baton")
            .u64_counter("baton.registry.requests")
            .with_description(
                "Lookups this registry replica answered, by result (answered or bad_request)",
            )
            .build();
        tracing::info!(subject = %config.subjects.lookup(), agent_types = table.agent_types().count(), "registry serving lookups");

        let (backlog_tx, mut backlog_rx) = tokio::sync::mpsc::channel(1);
        let backlogs = tokio::spawn(read_backlogs(
            jetstream::new(client.clone()),
            config.subjects.tasks_stream(),
            config.heartbeat_interval,
            backlog_tx,
        ));
        let mut sweep = tokio::time::interval(config.heartbeat_interval);
        loop {
            // Heartbeats first: a lookup is answered from the freshest table,
            // never before heartbeats that are already waiting.
            tokio::select! {
                biased;
                Some(message) = beats.next() => record(&mut table, &message),
                Some(request) = lookups.next() => answer(&mut table, &request, &answered).await,
                Some(backlog) = backlog_rx.recv() => table.set_backlogs(backlog),
                _ = sweep.tick() => table.expire(Instant::now()),
                () = &mut shutdown => break,
            }
        }
        backlogs.abort();
        if let Err(err) = service.stop().await {
            tracing::debug!(error = %err, "could not stop the service cleanly");
        }
        tracing::info!("registry stopped");
        Ok(())
    }
}

fn record(table: &mut Table, message: &async_nats::Message) {
    match Heartbeat::from_msgpack(&message.payload) {
        Ok(beat) => {
            if !table.record(beat, Instant::now()) {
                tracing::debug!(subject = %message.subject, "heartbeat with an invalid agent or instance ignored");
            }
        }
        Err(err) => {
            tracing::debug!(subject = %message.subject, error = %err, "unreadable heartbeat ignored");
        }
    }
}

/// Answers one lookup: msgpack by default, JSON when the request says it is JSON.
async fn answer(table: &mut Table, request: &service::Request, answered: &Counter<u64>) {
    let json = request
        .message
        .headers
        .as_ref()
        .and_then(|headers| headers.get("Content-Type"))
        .is_some_and(|value| value.as_str().eq_ignore_ascii_case(JSON));
    let reply = respond(table, &request.message.payload, json);
    let mut headers = HeaderMap::new();
    if json {
        headers.insert("Content-Type", JSON);
    }
    let result = if let Err(err) = &reply {
        tracing::debug!(error = %err.status, "bad lookup request");
        "bad_request"
    } else {
        "answered"
    };
    answered.add(1, &[opentelemetry::KeyValue::new("result", result)]);
    if let Err(err) = request.respond_with_headers(reply, headers).await {
        tracing::debug!(error = %err, "could not answer a lookup");
    }
}

/// The encoded answer to a lookup payload, or an error that says what is wrong.
pub(crate) fn respond(
    table: &mut Table,
    payload: &[u8],
    json: bool,
) -> Result<Bytes, service::error::Error> {
    let bad = |what: String| service::error::Error {
        status: format!("bad lookup request: {what}"),
        code: 400,
    };
    let request: LookupRequest = if json {
        serde_json::from_slice(payload)
            .map_err(|err| bad(format!("not a JSON lookup request: {err}")))?
    } else {
        LookupRequest::from_msgpack(payload).map_err(|err| bad(err.to_string()))?
    };
    let response = LookupResponse {
        candidates: rank(table.current(Instant::now()), &request),
        extra: baton_proto::Map::new(),
    };
    let encoded = if json {
        serde_json::to_vec(&response).map_err(|err| err.to_string())
    } else {
        response.to_msgpack().map_err(|err| err.to_string())
    };
    encoded
        .map(Bytes::from)
        .map_err(|err| service::error::Error {
            status: format!("cannot encode the answer: {err}"),
            code: 500,
        })
}

/// Reads every agent type's consumer backlog once per `every`.
async fn read_backlogs(
    jetstream: jetstream::Context,
    stream: String,
    every: Duration,
    out: tokio::sync::mpsc::Sender<HashMap<String, Backlog>>,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let stream = match jetstream.get_stream_no_info(&stream).await {
            Ok(stream) => stream,
            Err(err) => {
                tracing::debug!(error = %err, "cannot read backlogs");
                continue;
            }
        };
        let mut backlogs = HashMap::new();
        let mut consumers = stream.consumers();
        while let Some(info) = consumers.next().await {
            match info {
                Ok(info) => {
                    if let Some(agent) = info.name.strip_prefix("agent-") {
                        backlogs.insert(
                            agent.to_owned(),
                            Backlog {
                                pending: info.num_pending,
                                ack_pending: info.num_ack_pending as u64,
                            },
                        );
                    }
                }
                Err(err) => {
                    tracing::debug!(error = %err, "cannot list consumers");
                    break;
                }
            }
        }
        if out.send(backlogs).await.is_err() {
            return;
        }
    }
}

/// What a registry replica does on NATS: it takes heartbeats and lookups
/// (answering them, and the NATS service API's discovery and stats), and
/// reads which agent types have a consumer.
#[must_use]
pub fn footprint(subjects: &Subjects) -> baton_proto::Footprint {
    let tasks = subjects.tasks_stream();
    baton_proto::Footprint::stream_info(&tasks)
        .publishes([
            baton_proto::footprint::api(format_args!("CONSUMER.LIST.{tasks}")),
            baton_proto::footprint::api(format_args!("CONSUMER.INFO.{tasks}.*")),
        ])
        .subscribes([
            format!("{}.registry.heartbeat.>", subjects.prefix()),
            subjects.lookup(),
            "$SRV.>".to_owned(),
        ])
        .responding()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        let mut table = Table::new(Duration::from_secs(60));
        let beat = Heartbeat {
            agent: "refund".into(),
            instance: "r1".into(),
            capabilities: vec!["refunds".into()],
            domains: vec!["billing".into()],
            tier: 2,
            in_flight: 1,
            max_concurrency: 4,
            processed: 0,
            failed: 0,
            at: 0,
            interval_ms: None,
            description: None,
            extra: baton_proto::Map::new(),
        };
        table.record(beat, Instant::now());
        table
    }

    #[test]
    fn msgpack_in_msgpack_out() {
        let request = LookupRequest {
            requires: vec!["refunds".into()],
            ..LookupRequest::default()
        };
        let bytes = respond(&mut table(), &request.to_msgpack().unwrap(), false).unwrap();
        let response = LookupResponse::from_msgpack(&bytes).unwrap();
        assert_eq!(response.candidates.len(), 1);
        assert_eq!(response.candidates[0].agent, "refund");
        assert_eq!(response.candidates[0].in_flight, Some(1));
    }

    #[test]
    fn json_in_json_out() {
        let bytes = respond(
            &mut table(),
            br#"{"requires":["refunds"],"min_tier":2}"#,
            true,
        )
        .unwrap();
        let response: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(response["candidates"][0]["agent"], "refund");
        assert_eq!(response["candidates"][0]["load"], 0.25);
    }

    #[test]
    fn malformed_requests_get_an_error_that_says_what_is_wrong() {
        let err = respond(&mut table(), b"\xc1 not msgpack", false).unwrap_err();
        assert_eq!(err.code, 400);
        assert!(
            err.status.starts_with("bad lookup request: "),
            "{}",
            err.status
        );
        let err = respond(&mut table(), br#"{"requires": "refunds"}"#, true).unwrap_err();
        assert!(
            err.status.contains("not a JSON lookup request"),
            "{}",
            err.status
        );
        assert!(err.status.contains("expected a sequence"), "{}", err.status);
    }
}
