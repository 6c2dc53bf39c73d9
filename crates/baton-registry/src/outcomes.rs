//! The outcomes the registry learns from, on JetStream.
//!
//! - **Recording.** The replicas share one durable consumer, `registry`, on
//!   `BATON_EVENTS`. The replica that receives an event that ends a session,
//!   sends it to a person or re-opens it stores an [`Outcome`] on
//!   `baton.outcomes.<session>` (`BATON_OUTCOMES`), with an id derived from
//!   the event's, and acks the event only after the record is stored. So
//!   every producer of terminal events (workers, the router, the deadline
//!   timer, `baton inbox`, replays) is covered, each end is recorded once,
//!   and a crash between the two redelivers the event.
//! - **Reading.** Every replica reads `BATON_OUTCOMES` from the start and
//!   follows it, so each learns the same, feedback included.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, consumer, stream};
use baton_proto::{Event, Outcome, Subjects, Wire};
use futures::StreamExt;
use tokio::sync::{mpsc, watch};

/// The durable consumer of `BATON_EVENTS` the replicas share.
pub const CONSUMER: &str = "registry";

/// How long outcomes are kept.
pub const OUTCOMES_MAX_AGE: Duration = Duration::from_secs(90 * 24 * 3600);

/// How long a failed step waits before it is tried again.
const AGAIN: Duration = Duration::from_secs(2);

/// `BATON_OUTCOMES`, created if missing with as many replicas as
/// `BATON_EVENTS` (which must exist: the router or a worker creates it).
pub(crate) async fn outcomes_stream(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
) -> Result<stream::Stream, async_nats::Error> {
    let mut events = jetstream.get_stream(subjects.events_stream()).await?;
    let replicas = events.info().await?.config.num_replicas;
    let stream = jetstream
        .get_or_create_stream(stream::Config {
            name: subjects.outcomes_stream(),
            subjects: vec![subjects.all_outcomes()],
            retention: stream::RetentionPolicy::Limits,
            storage: stream::StorageType::File,
            max_age: OUTCOMES_MAX_AGE,
            num_replicas: replicas,
            ..Default::default()
        })
        .await?;
    Ok(stream)
}

/// Waits for `BATON_OUTCOMES`, trying again while the streams are missing.
async fn wait_for_stream(jetstream: &jetstream::Context, subjects: &Subjects) -> stream::Stream {
    let mut said = false;
    loop {
        match outcomes_stream(jetstream, subjects).await {
            Ok(stream) => return stream,
            Err(err) => {
                if !said {
                    tracing::info!(error = %err, "no outcomes to learn from yet; trying again every {AGAIN:?}");
                    said = true;
                }
                tokio::time::sleep(AGAIN).await;
            }
        }
    }
}

/// Stores the outcome of every event that has one, until aborted.
pub(crate) async fn record(jetstream: jetstream::Context, subjects: Subjects) {
    wait_for_stream(&jetstream, &subjects).await;
    loop {
        if let Err(err) = record_once(&jetstream, &subjects).await {
            tracing::warn!(error = %err, "recording outcomes stopped; starting again");
        }
        tokio::time::sleep(AGAIN).await;
    }
}

async fn record_once(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
) -> Result<(), async_nats::Error> {
    let events = jetstream.get_stream(subjects.events_stream()).await?;
    let consumer = events
        .get_or_create_consumer(
            CONSUMER,
            consumer::pull::Config {
                durable_name: Some(CONSUMER.to_owned()),
                description: Some("Baton registry: outcomes of sessions".to_owned()),
                deliver_policy: consumer::DeliverPolicy::All,
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_secs(30),
                max_ack_pending: 1024,
                ..Default::default()
            },
        )
        .await?;
    let mut messages = consumer.messages().await?;
    while let Some(message) = messages.next().await {
        let message = message?;
        if let Some(outcome) = Event::from_msgpack(&message.payload)
            .ok()
            .as_ref()
            .and_then(Outcome::of)
        {
            store(jetstream, subjects, &outcome).await?;
        }
        message.ack().await?;
    }
    Ok(())
}

/// Stores `outcome` once (its id is its `Nats-Msg-Id`), waiting for the
/// PubAck; creates `BATON_OUTCOMES` first when it is missing.
pub(crate) async fn store(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    outcome: &Outcome,
) -> Result<(), async_nats::Error> {
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", outcome.id.to_string().as_str());
    let payload = bytes::Bytes::from(outcome.to_msgpack()?);
    let subject = subjects.outcomes(outcome.session);
    let publish = || async {
        jetstream
            .publish_with_headers(subject.clone(), headers.clone(), payload.clone())
            .await?
            .await
    };
    if publish().await.is_err() {
        // The stream may not exist yet: the replicas make it once they
        // see the events stream, every few seconds.
        outcomes_stream(jetstream, subjects).await?;
        publish().await?;
    }
    Ok(())
}

/// Sends every stored outcome to `out`, oldest first, then each new one;
/// `caught_up` turns true once the stored ones are all sent (at once when
/// there is no outcome stream yet: nothing is stored). Reads again from
/// where it was if the reading stops.
pub(crate) async fn read(
    jetstream: jetstream::Context,
    subjects: Subjects,
    out: mpsc::Sender<Outcome>,
    caught_up: watch::Sender<bool>,
) {
    if jetstream
        .get_stream(subjects.outcomes_stream())
        .await
        .is_err()
    {
        caught_up.send_replace(true);
    }
    let stream = wait_for_stream(&jetstream, &subjects).await;
    let mut next = 1;
    loop {
        match read_from(&stream, next, &out, &caught_up).await {
            Ok(Some(seq)) => next = seq,
            Ok(None) => return,
            Err(err) => tracing::warn!(error = %err, "reading outcomes stopped; reading again"),
        }
        tokio::time::sleep(AGAIN).await;
    }
}

/// Reads outcomes from sequence `first` on, until the reading stops: the
/// next sequence to read then, or `None` when `out` is closed.
async fn read_from(
    stream: &stream::Stream,
    first: u64,
    out: &mpsc::Sender<Outcome>,
    caught_up: &watch::Sender<bool>,
) -> Result<Option<u64>, async_nats::Error> {
    // An ordered consumer starts again after a gap, from where it was.
    let consumer = stream
        .create_consumer(consumer::pull::OrderedConfig {
            deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                start_sequence: first,
            },
            ..Default::default()
        })
        .await?;
    let mut messages = consumer.messages().await?;
    if stream.cached_info().state.messages == 0 {
        caught_up.send_replace(true);
    }
    let mut next = first;
    while let Some(message) = messages.next().await {
        let message = message?;
        let info = message.info()?;
        next = info.stream_sequence + 1;
        let pending = info.pending;
        match Outcome::from_msgpack(&message.payload) {
            Ok(outcome) => {
                if out.send(outcome).await.is_err() {
                    return Ok(None);
                }
            }
            Err(err) => tracing::debug!(error = %err, "unreadable outcome ignored"),
        }
        if pending == 0 {
            caught_up.send_replace(true);
        }
    }
    Ok(Some(next))
}
