//! The baseline sides of the bench: a raw JetStream relay, plain or making
//! a Baton hop's durable writes by hand.

use std::sync::Arc;

use async_nats::jetstream::{self, AckKind, consumer, stream};
use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::context::measure;
use super::{BenchArgs, Figures, Recorder, figures, now_ns};

/// The raw relay. With `events` > 0 it also does a Baton hop's durable
/// work: that many events per hop (1: Baton's `full` level, which folds a
/// quick hop's `accepted` into its `handoff`; 2: both stored on their own).
pub(super) async fn raw_relay(
    client: &async_nats::Client,
    args: &BenchArgs,
    payload_len: usize,
    events: usize,
    round: usize,
) -> anyhow::Result<Figures> {
    let js = jetstream::new(client.clone());
    let same_writes = events > 0;
    // Streams of their own for each round, so each round counts its own writes.
    let name = match events {
        0 => format!("benchrawr{round}"),
        n => format!("benchsame{n}r{round}"),
    };
    let name = name.as_str();
    let stream_name = name.to_ascii_uppercase();
    let subjects: Vec<String> = (0..args.hops).map(|i| format!("{name}.stage{i}")).collect();
    raw_streams(&js, name, same_writes).await?;
    let recorder = Arc::new(Recorder::new(args.concurrency));
    let stop = CancellationToken::new();
    let mut stages = tokio::task::JoinSet::new();
    for (index, subject) in subjects.iter().enumerate() {
        let stream = js.get_stream(&stream_name).await?;
        let consumer: consumer::PullConsumer = stream
            .get_or_create_consumer(
                &format!("stage{index}"),
                consumer::pull::Config {
                    durable_name: Some(format!("stage{index}")),
                    filter_subject: subject.clone(),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ..Default::default()
                },
            )
            .await?;
        let stage = RawStage {
            js: js.clone(),
            recorder: recorder.clone(),
            next: subjects.get(index + 1).cloned(),
            // An encoded Baton event is about this size.
            event: Bytes::from(vec![b'e'; 220]),
            events,
            name: name.to_owned(),
        };
        stages.spawn(stage.run(consumer, args.concurrency, stop.clone()));
    }
    let payload = Bytes::from(vec![b'x'; payload_len]);
    let first = subjects[0].clone();
    let measured = measure(&recorder, args, || {
        let (js, first, payload) = (js.clone(), first.clone(), payload.clone());
        async move {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Bench-Sent", now_ns().to_string().as_str());
            if same_writes {
                headers.insert("Bench-Task", uuid::Uuid::new_v4().to_string().as_str());
                headers.insert("Nats-Msg-Id", uuid::Uuid::new_v4().to_string().as_str());
            }
            js.publish_with_headers(first, headers, payload)
                .await?
                .await?;
            Ok(())
        }
    })
    .await?;
    stop.cancel();
    while let Some(result) = stages.join_next().await {
        result??;
    }
    let mut figures = figures(&recorder, args.tasks, args.hops, &measured);
    let stored = if same_writes {
        super::side::stored(&js, &format!("{stream_name}_EVENTS")).await?
    } else {
        0
    };
    figures.writes_per_hop = super::writes_per_hop(args, stored);
    Ok(figures)
}

/// The work-queue stream of a raw relay (and, for "same writes", its events
/// stream).
async fn raw_streams(js: &jetstream::Context, name: &str, same_writes: bool) -> anyhow::Result<()> {
    let stream_name = name.to_ascii_uppercase();
    js.get_or_create_stream(stream::Config {
        name: stream_name.clone(),
        subjects: vec![format!("{name}.>")],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        // As long as Baton's, where the relay sets message ids.
        duplicate_window: std::time::Duration::from_secs(if same_writes { 630 } else { 120 }),
        ..Default::default()
    })
    .await?;
    if same_writes {
        js.get_or_create_stream(stream::Config {
            name: format!("{stream_name}_EVENTS"),
            subjects: vec![format!("{name}events.>")],
            duplicate_window: std::time::Duration::from_secs(630),
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await?;
    }
    Ok(())
}

/// One stage of a raw relay: pulls its subject and passes each message on.
#[derive(Clone)]
struct RawStage {
    js: jetstream::Context,
    recorder: Arc<Recorder>,
    next: Option<String>,
    event: Bytes,
    /// Events per hop (0: the plain relay).
    events: usize,
    /// The relay's subject prefix.
    name: String,
}

impl RawStage {
    async fn run(
        self,
        consumer: consumer::PullConsumer,
        concurrency: usize,
        stop: CancellationToken,
    ) -> anyhow::Result<()> {
        let permits = Arc::new(Semaphore::new(concurrency));
        let mut messages = consumer
            .stream()
            .max_messages_per_batch(concurrency)
            .messages()
            .await?;
        loop {
            let message = tokio::select! {
                message = messages.next() => match message {
                    Some(Ok(message)) => message,
                    Some(Err(err)) => {
                        tracing::warn!(error = %err, "raw relay pull error");
                        continue;
                    }
                    None => break,
                },
                () = stop.cancelled() => break,
            };
            let permit = permits.clone().acquire_owned().await?;
            let stage = self.clone();
            tokio::spawn(async move {
                stage.hop(message).await;
                drop(permit);
            });
        }
        Ok(())
    }

    async fn hop(self, message: jetstream::Message) {
        let sent = message
            .headers
            .as_ref()
            .and_then(|h| h.get("Bench-Sent"))
            .and_then(|v| v.as_str().parse().ok());
        if let Some(sent) = sent {
            self.recorder.hop(sent);
        }
        if self.events > 0 {
            same_writes_hop(&self, &message).await;
            return;
        }
        match self.next {
            Some(next) => {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("Bench-Sent", now_ns().to_string().as_str());
                if let Ok(ack) = self
                    .js
                    .publish_with_headers(next, headers, message.payload.clone())
                    .await
                {
                    let _ = ack.await;
                }
            }
            None => self.recorder.finish(),
        }
        let _ = message.ack_with(AckKind::Ack).await;
    }
}

/// One hop of the "same writes" relay: with two events per hop, an
/// accepted event sent at once; then a handoff event and the next message
/// (or a completed event), each with a message id, all PubAcks awaited,
/// then an ack, plain as Baton's default.
async fn same_writes_hop(stage: &RawStage, message: &jetstream::Message) {
    let task = message
        .headers
        .as_ref()
        .and_then(|h| h.get("Bench-Task"))
        .map_or_else(|| "unknown".to_owned(), |v| v.as_str().to_owned());
    let events_subject = format!("{}events.{task}", stage.name);
    let publish = |subject: String, payload: Bytes, headers: async_nats::HeaderMap| {
        let js = stage.js.clone();
        async move {
            let mut headers = headers;
            headers.insert("Nats-Msg-Id", uuid::Uuid::new_v4().to_string().as_str());
            js.publish_with_headers(subject, headers, payload).await
        }
    };
    let event = || stage.event.clone();
    let mut acks = Vec::new();
    if stage.events > 1 {
        acks.push(
            publish(
                events_subject.clone(),
                event(),
                async_nats::HeaderMap::new(),
            )
            .await,
        );
    }
    acks.push(publish(events_subject, event(), async_nats::HeaderMap::new()).await);
    match &stage.next {
        Some(next) => {
            let mut headers = message.headers.clone().unwrap_or_default();
            headers.insert("Bench-Sent", now_ns().to_string().as_str());
            acks.push(publish(next.clone(), message.payload.clone(), headers).await);
        }
        None => stage.recorder.finish(),
    }
    for ack in acks.into_iter().flatten() {
        let _ = ack.await;
    }
    let _ = message.ack().await;
}
