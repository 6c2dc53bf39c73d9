//! Reading a stream from its start with an ordered consumer that goes
//! away as soon as its reader is done.

use async_nats::jetstream;

use crate::error::{Error, ErrorKind};

/// Every message of `stream` from the first (only those on `filter`, when
/// given), then new ones as they arrive, through an ordered consumer.
/// `what` names the reading in errors.
pub async fn read_from_start<I: Clone + Send + Sync + 'static>(
    stream: &jetstream::stream::Stream<I>,
    filter: Option<String>,
    what: &str,
) -> Result<(jetstream::consumer::pull::Ordered, Reading<I>), Error> {
    let config = jetstream::consumer::pull::OrderedConfig {
        filter_subject: filter.unwrap_or_default(),
        deliver_policy: jetstream::consumer::DeliverPolicy::All,
        ..Default::default()
    };
    read_with(stream, config, what).await
}

/// Every message of `stream` stored at or after `from` (unix ms), then new
/// ones as they arrive, through an ordered consumer. `what` names the
/// reading in errors.
pub async fn read_since<I: Clone + Send + Sync + 'static>(
    stream: &jetstream::stream::Stream<I>,
    from: u64,
    what: &str,
) -> Result<(jetstream::consumer::pull::Ordered, Reading<I>), Error> {
    let start = (i128::from(from).checked_mul(1_000_000))
        .and_then(|nanos| time::OffsetDateTime::from_unix_timestamp_nanos(nanos).ok())
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let config = jetstream::consumer::pull::OrderedConfig {
        deliver_policy: jetstream::consumer::DeliverPolicy::ByStartTime { start_time: start },
        ..Default::default()
    };
    read_with(stream, config, what).await
}

/// `stream` read through an ordered consumer made with `config`.
async fn read_with<I: Clone + Send + Sync + 'static>(
    stream: &jetstream::stream::Stream<I>,
    config: jetstream::consumer::pull::OrderedConfig,
    what: &str,
) -> Result<(jetstream::consumer::pull::Ordered, Reading<I>), Error> {
    let failed = |err: Box<dyn std::error::Error + Send + Sync>| {
        Error::with_source(ErrorKind::JetStream, format!("cannot {what}"), err)
    };
    let ordered = (stream.create_consumer(config).await).map_err(|err| failed(err.into()))?;
    let reading = Reading {
        stream: stream.clone(),
        consumer: ordered.cached_info().name.clone(),
        stored: ordered.cached_info().num_pending,
    };
    let messages = ordered.messages().await.map_err(|err| failed(err.into()))?;
    Ok((messages, reading))
}

/// An ordered consumer's reader: dropped, it deletes the consumer (in the
/// background, best effort) instead of leaving it to the server for the 30
/// seconds an idle ordered consumer lives. A gateway that follows a session
/// per call would otherwise keep a consumer per call of the last half
/// minute, thousands under load, until the server refuses more.
pub struct Reading<I: Clone + Send + Sync + 'static> {
    stream: jetstream::stream::Stream<I>,
    consumer: String,
    stored: u64,
}

impl<I: Clone + Send + Sync + 'static> Reading<I> {
    /// How many messages were stored for the reader when it began: none,
    /// and a reader of what is stored has nothing to wait for.
    #[must_use]
    pub fn stored(&self) -> u64 {
        self.stored
    }
}

impl<I: Clone + Send + Sync + 'static> Drop for Reading<I> {
    fn drop(&mut self) {
        let (stream, consumer) = (self.stream.clone(), std::mem::take(&mut self.consumer));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(err) = stream.delete_consumer(&consumer).await {
                    tracing::debug!(error = %err, consumer, "cannot delete a finished reader's consumer; it expires");
                }
            });
        }
    }
}
