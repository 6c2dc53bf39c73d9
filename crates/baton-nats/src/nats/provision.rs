//! Streams and consumers of PROTOCOL.md, created if missing and checked if present.

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::jetstream::context::CreateStreamErrorKind;
use async_nats::jetstream::stream::ConsumerErrorKind;
use async_nats::jetstream::{self, consumer, stream};
use backon::{ExponentialBuilder, Retryable};
use baton_proto::footprint::Footprint;
use baton_proto::{AgentName, Subjects};

use crate::error::{Error, ErrorKind};
use crate::nats::publish::Publisher;

/// Settings of the three streams, used when they are created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSettings {
    /// How long session events are kept (`BATON_EVENTS` max age).
    pub events_max_age: Duration,
    /// How long JetStream remembers message ids to drop duplicates.
    pub duplicate_window: Duration,
    /// Replicas of each stream (1 on a single server, 3 in a cluster).
    pub replicas: usize,
}

impl Default for StreamSettings {
    fn default() -> Self {
        Self {
            events_max_age: Duration::from_secs(7 * 24 * 3600),
            // Covers a worker's redeliveries with the default settings:
            // ack_wait 30 s × max_deliver 21 (`cover_redeliveries`).
            duplicate_window: Duration::from_secs(30 * 21),
            replicas: 1,
        }
    }
}

/// Creates `BATON_TASKS`, `BATON_EVENTS` and `BATON_DLQ` if they are missing.
///
/// Safe to call from every process at start-up, concurrently.
///
/// # Errors
///
/// [`ErrorKind::Mismatch`] when a stream exists with another retention or
/// other subjects; [`ErrorKind::Forbidden`] when a stream is missing and this
/// user may not create it; [`ErrorKind::JetStream`] when JetStream cannot be
/// reached.
pub async fn provision(
    publisher: &Publisher,
    subjects: &Subjects,
    settings: &StreamSettings,
) -> Result<(), Error> {
    provision_tasks(publisher, subjects, settings).await?;
    let base = base_config(settings);
    ensure_stream(
        publisher,
        stream::Config {
            name: subjects.events_stream(),
            subjects: vec![subjects.all_events()],
            retention: stream::RetentionPolicy::Limits,
            max_age: settings.events_max_age,
            compression: Some(stream::Compression::S2),
            ..base.clone()
        },
    )
    .await?;
    ensure_stream(
        publisher,
        stream::Config {
            name: subjects.dlq_stream(),
            subjects: vec![subjects.all_dlq()],
            retention: stream::RetentionPolicy::Limits,
            compression: Some(stream::Compression::S2),
            ..base
        },
    )
    .await?;
    Ok(())
}

/// Creates `BATON_TASKS` if it is missing: all a client that sends tasks
/// and reads sessions through the router needs.
///
/// # Errors
///
/// As [`provision`].
pub async fn provision_tasks(
    publisher: &Publisher,
    subjects: &Subjects,
    settings: &StreamSettings,
) -> Result<(), Error> {
    ensure_stream(
        publisher,
        stream::Config {
            name: subjects.tasks_stream(),
            subjects: vec![subjects.ingress(), subjects.all_agents()],
            retention: stream::RetentionPolicy::WorkQueue,
            ..base_config(settings)
        },
    )
    .await?;
    Ok(())
}

fn base_config(settings: &StreamSettings) -> stream::Config {
    stream::Config {
        storage: stream::StorageType::File,
        num_replicas: settings.replicas,
        duplicate_window: settings.duplicate_window,
        ..Default::default()
    }
}

async fn ensure_stream(
    publisher: &Publisher,
    wanted: stream::Config,
) -> Result<stream::Stream, Error> {
    let jetstream = publisher.jetstream();
    let name = wanted.name.clone();
    // A cluster creating a replicated stream (or several processes creating
    // it at once) may answer after the request's timeout: ask again.
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(2))
        .with_max_times(5);
    let create = || jetstream.get_or_create_stream(wanted.clone());
    let since = std::time::Instant::now();
    let creation = create
        .retry(backoff)
        .when(answered_late)
        .notify(|err, delay| tracing::info!(stream = %name, error = %err, ?delay, "stream not ready; asking again"));
    // A user that may read a stream but not create it sees its request
    // refused, not answered: say so at once instead of timing out.
    let create_subject = format!("$JS.API.STREAM.CREATE.{name}");
    let created = tokio::select! {
        created = creation => created,
        () = publisher.refused(&create_subject, since) => return Err(Error::new(
            ErrorKind::Forbidden,
            format!(
                "stream {name} does not exist, and this NATS user may not create it (publish to {create_subject}): \
                 start a process whose user may, such as `baton router`, first, or grant it (`baton permissions router` \
                 prints that block)"
            ),
        )),
    };
    let stream = created.map_err(|err| {
        Error::with_source(
            ErrorKind::JetStream,
            format!(
                "cannot get or create stream {name} with {} replica(s): check that JetStream is enabled \
                 (nats-server -js), that this NATS user may use the JetStream API for it (`baton permissions` \
                 prints what each role needs), and that --replicas does not exceed the cluster's JetStream nodes",
                wanted.num_replicas
            ),
            err,
        )
    })?;
    // The info the answer carried: asking again right after a cluster
    // created the stream may reach a node that does not know it yet.
    let info = stream.cached_info().clone();
    ensure_replicas(jetstream, &info, wanted.num_replicas).await?;
    let have: BTreeSet<_> = info.config.subjects.iter().collect();
    let want: BTreeSet<_> = wanted.subjects.iter().collect();
    if info.config.retention != wanted.retention || have != want {
        return Err(Error::new(
            ErrorKind::Mismatch,
            format!(
                "stream {name} exists with retention {:?} and subjects {:?}, but Baton needs retention {:?} and \
                 subjects {:?}: remove it (`nats stream rm {name}`, its messages are lost) or choose another --prefix",
                info.config.retention, info.config.subjects, wanted.retention, wanted.subjects
            ),
        ));
    }
    Ok(stream)
}

/// Whether a stream request failed only because the cluster answered late
/// or had no JetStream leader for a moment.
fn answered_late(err: &async_nats::jetstream::context::CreateStreamError) -> bool {
    matches!(
        err.kind(),
        CreateStreamErrorKind::TimedOut | CreateStreamErrorKind::JetStreamUnavailable
    )
}

/// Retries for a cluster that moves a stream or a consumer to new peers.
fn cluster_backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(3))
        .with_max_times(6)
}

/// Raises a stream's replicas to `want` in place; more than `want` stay.
async fn ensure_replicas(
    jetstream: &jetstream::Context,
    info: &stream::Info,
    want: usize,
) -> Result<(), Error> {
    let (name, have) = (&info.config.name, info.config.num_replicas);
    if have < want {
        // Raising the count in place works on a cluster with enough nodes.
        let raised = stream::Config {
            num_replicas: want,
            ..info.config.clone()
        };
        // Moving a stream to new peers can outlast a request's timeout, and
        // several processes may ask at once: look again before asking again.
        let raise = || async {
            if let Ok(stream) = jetstream.get_stream(name).await {
                if stream.cached_info().config.num_replicas >= want {
                    return Ok(());
                }
            }
            jetstream.update_stream(&raised).await.map(drop)
        };
        let raised_now = raise
            .retry(cluster_backoff())
            .when(answered_late)
            .notify(|err, delay| tracing::info!(stream = %name, error = %err, ?delay, "raising the stream's replicas; asking again"))
            .await;
        raised_now.map_err(|err| {
            Error::with_source(
                ErrorKind::Mismatch,
                format!(
                    "stream {name} has {have} replica(s) and --replicas asks for {want}, but the server \
                     refused to raise it: run a cluster of at least {want} JetStream nodes, or lower --replicas (BATON_REPLICAS)"
                ),
                err,
            )
        })?;
        tracing::info!(stream = %name, from = have, to = want, "raised the stream's replicas");
    } else if have > want {
        tracing::warn!(stream = %name, have, want, "the stream has more replicas than --replicas asks for; keeping them (set BATON_REPLICAS to match)");
    }
    Ok(())
}

/// How long after its first delivery a message may still be redelivered:
/// `ack_wait × max_deliver` (unbounded for a consumer without a limit).
#[must_use]
pub fn redelivery_span(ack_wait: Duration, max_deliver: i64) -> Option<Duration> {
    let deliveries = u32::try_from(max_deliver).ok().filter(|n| *n > 0)?;
    Some(ack_wait.saturating_mul(deliveries))
}

/// Raises the duplicate window of the streams a consumer's redeliveries
/// publish to (tasks, events, dead letters) to `span`, its `ack_wait ×
/// max_deliver`: a message redelivered that late publishes its successor
/// and events again under the same ids, and only a window that still holds
/// them drops the copies. Never lowers a window; a refusal is logged (and
/// `baton doctor` reports it), not fatal.
pub async fn cover_redeliveries(
    publisher: &Publisher,
    subjects: &Subjects,
    consumer: &str,
    span: Duration,
) {
    let jetstream = publisher.jetstream();
    for name in [
        subjects.tasks_stream(),
        subjects.events_stream(),
        subjects.dlq_stream(),
    ] {
        let stream = match jetstream.get_stream(&name).await {
            Ok(stream) => stream,
            Err(err) => {
                tracing::warn!(stream = %name, error = %err, "cannot read the stream's duplicate window");
                continue;
            }
        };
        let config = &stream.cached_info().config;
        if config.duplicate_window >= span {
            continue;
        }
        if !publisher
            .may_publish(&format!("$JS.API.STREAM.UPDATE.{name}"))
            .await
        {
            // Least privilege: workers do not reconfigure streams.
            tracing::warn!(
                stream = %name, consumer, have = ?config.duplicate_window, want = ?span,
                "the stream's duplicate window is shorter than this consumer's redeliveries (ack_wait × max_deliver), \
                 and this user may not widen it: a message redelivered after it may be handed off twice \
                 (lower --ack-wait-secs or --max-deliveries, or have the provisioning user widen it; `baton doctor` reports it)"
            );
            continue;
        }
        let widened = stream::Config {
            duplicate_window: span,
            ..config.clone()
        };
        let widen = || jetstream.update_stream(&widened);
        match widen.retry(cluster_backoff()).when(answered_late).await {
            Ok(_) => tracing::info!(
                stream = %name, consumer, from = ?config.duplicate_window, to = ?span,
                "widened the stream's duplicate window to cover every redelivery (ack_wait × max_deliver)"
            ),
            Err(err) => tracing::warn!(
                stream = %name, consumer, want = ?span, error = %err,
                "cannot widen the stream's duplicate window: a message redelivered after it may be handed off twice \
                 (`baton doctor` reports it; lower --ack-wait-secs or --max-deliveries, or let this user update the stream)"
            ),
        }
    }
}

/// The durable pull consumer `name` on the tasks stream, filtered to `filter`.
pub async fn task_consumer(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    name: &str,
    filter: String,
    ack_wait: Duration,
    max_deliver: i64,
) -> Result<consumer::PullConsumer, Error> {
    let stream_name = subjects.tasks_stream();
    let stream = jetstream.get_stream(&stream_name).await.map_err(|err| {
        Error::with_source(
            ErrorKind::JetStream,
            format!("cannot open stream {stream_name}"),
            err,
        )
    })?;
    let wanted = consumer::pull::Config {
        durable_name: Some(name.to_owned()),
        filter_subject: filter.clone(),
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait,
        // Deliveries are counted by the worker, which dead-letters the last
        // one; a message whose last delivery fails too is caught from the
        // server's advisory (`pipeline/advisory.rs`).
        max_deliver,
        ..Default::default()
    };
    // A clustered stream that is moving to new peers refuses new consumers
    // for a moment ("insufficient resources"), and may answer late.
    let create = || stream.get_or_create_consumer(name, wanted.clone());
    let mut consumer: consumer::PullConsumer = create
        .retry(cluster_backoff())
        .when(|err| match err.kind() {
            ConsumerErrorKind::TimedOut => true,
            ConsumerErrorKind::JetStream(err) => err.code() == 503,
            _ => false,
        })
        .notify(|err, delay| tracing::info!(consumer = name, error = %err, ?delay, "consumer not ready; asking again"))
        .await
        .map_err(|err| {
            Error::with_source(
                ErrorKind::JetStream,
                format!("cannot get or create consumer {name} on {stream_name} (filter {filter})"),
                err,
            )
        })?;
    let info = consumer.info().await.map_err(|err| {
        Error::with_source(
            ErrorKind::JetStream,
            format!("cannot read consumer {name}"),
            err,
        )
    })?;
    if info.config.filter_subject != filter {
        return Err(Error::new(
            ErrorKind::Mismatch,
            format!(
                "consumer {name} on {stream_name} filters {:?}, but Baton needs {filter:?}: remove it \
                 (`nats consumer rm {stream_name} {name}`) and start the worker again",
                info.config.filter_subject
            ),
        ));
    }
    if info.config.max_deliver != max_deliver {
        consumer = raise_max_deliver(&stream, info.config.clone(), max_deliver).await?;
    }
    Ok(consumer)
}

/// Consumer `config` of `stream`, updated to `max_deliver`: consumers made
/// by earlier versions had no limit, and a pool restarted with another
/// `--max-deliveries` moves it.
async fn raise_max_deliver(
    stream: &jetstream::stream::Stream,
    config: consumer::Config,
    max_deliver: i64,
) -> Result<consumer::PullConsumer, Error> {
    let name = config.durable_name.clone().unwrap_or_default();
    let stream_name = stream.cached_info().config.name.clone();
    tracing::info!(
        consumer = %name,
        from = config.max_deliver,
        to = max_deliver,
        "updating the consumer's max_deliver"
    );
    let updated = consumer::Config {
        max_deliver,
        ..config
    };
    let cannot = |err: Box<dyn std::error::Error + Send + Sync>| {
        Error::with_source(
            ErrorKind::JetStream,
            format!("cannot update consumer {name} on {stream_name} to max_deliver {max_deliver}"),
            err,
        )
    };
    stream
        .update_consumer(updated)
        .await
        .map_err(|err| cannot(err.into()))?;
    stream.get_consumer(&name).await.map_err(cannot)
}

/// The shared consumer of agent type `agent`.
pub async fn agent_consumer(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    agent: &AgentName,
    ack_wait: Duration,
    max_deliver: i64,
) -> Result<consumer::PullConsumer, Error> {
    task_consumer(
        jetstream,
        subjects,
        &Subjects::agent_consumer(agent),
        subjects.agent(agent),
        ack_wait,
        max_deliver,
    )
    .await
}

/// Opens the key-value bucket `config` names, creating it with `config` when
/// it is missing (an existing bucket keeps its own settings).
///
/// # Errors
///
/// When JetStream cannot be reached, or refuses to create the bucket.
pub async fn key_value(
    jetstream: &jetstream::Context,
    config: jetstream::kv::Config,
) -> Result<jetstream::kv::Store, Error> {
    if let Ok(store) = jetstream.get_key_value(&config.bucket).await {
        return Ok(store);
    }
    let bucket = config.bucket.clone();
    jetstream.create_key_value(config).await.map_err(|err| {
        Error::with_source(
            ErrorKind::JetStream,
            format!("cannot open the bucket {bucket}"),
            err,
        )
    })
}

/// Removes every key of bucket `bucket` matching `keys` (a subject
/// pattern such as `t.ab12.>`) with one purge of its stream, which, unlike
/// a key's purge, leaves no marker behind. The error says what failed.
pub(crate) async fn purge_keys(
    jetstream: &jetstream::Context,
    bucket: &str,
    keys: &str,
) -> Result<(), Error> {
    let failed = |err: &dyn std::fmt::Display| {
        Error::new(
            ErrorKind::JetStream,
            format!("cannot remove {keys} from {bucket}: {err}"),
        )
    };
    let stream = jetstream
        .get_stream_no_info(format!("KV_{bucket}"))
        .await
        .map_err(|err| failed(&err))?;
    stream
        .purge()
        .filter(format!("$KV.{bucket}.{keys}"))
        .await
        .map_err(|err| failed(&err))?;
    Ok(())
}

/// What provisioning uses: the info of the protocol's three streams, and
/// with `create` their creation and raised settings.
#[must_use]
pub fn footprint(subjects: &Subjects, create: bool) -> Footprint {
    [
        subjects.tasks_stream(),
        subjects.events_stream(),
        subjects.dlq_stream(),
    ]
    .iter()
    .fold(Footprint::new(), |footprint, stream| {
        footprint.with(if create {
            Footprint::stream_admin(stream)
        } else {
            Footprint::stream_info(stream)
        })
    })
}
