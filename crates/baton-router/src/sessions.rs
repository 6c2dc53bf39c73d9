//! The router's session service: reads and cancels one session at a time
//! for clients that may not read the events stream themselves.
//!
//! NATS permissions cannot keep a JetStream read within one session: a
//! consumer's filter, a stream's subject list and a message get by sequence
//! all accept a wildcard or a number where the session id would go. So the
//! generated `client` block grants no JetStream reads of sessions, and a
//! client asks here instead, naming the session in the subject:
//!
//! - `baton.session.read.<session>`: the session's stored events after a
//!   sequence, claim-checked parts restored; with `wait_ms`, it waits for
//!   the next one (stored, or live progress) — a long poll;
//! - `baton.session.cancel.<session>`: a cancel, as [`Client::cancel`] does it.
//!
//! A subject whose last token is not a session id is refused, so a client
//! reads only the sessions whose ids it knows. Every router serves these in
//! one queue group; any of them answers.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, stream::RawMessageErrorKind};
use baton_proto::footprint::Footprint;
use baton_proto::{
    CancelReply, CancelRequest, Event, EventPart, MAX_READ_WAIT_MS, ReadEvent, ReadReply,
    ReadRequest, Subjects, Wire,
};
use futures::StreamExt;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use baton_client::{Cancel, Client};
use baton_nats::nats::claimcheck::{ClaimCheck, ClaimFailure};
use baton_nats::state::followers::{Following, Scope};

/// The queue group every router answers session requests in.
const QUEUE: &str = "baton-router";
/// Requests handled at once; more wait for a turn.
const CONCURRENCY: usize = 1024;
/// The most events in one reply.
const MAX_EVENTS: usize = 256;
/// Room left in a reply for its framing.
const REPLY_MARGIN: usize = 4096;

/// A session's stored and live events, as they come, and its follow.
type Watch = (async_nats::Subscriber, async_nats::Subscriber, Following);

/// The session service of one router.
pub(crate) struct Sessions {
    client: async_nats::Client,
    jetstream: jetstream::Context,
    subjects: Subjects,
    claims: Arc<ClaimCheck>,
    /// Cancels, made as a client with the router's own rights.
    canceller: Client,
    /// The most bytes of events in one reply.
    budget: usize,
}

impl Sessions {
    pub(crate) fn new(canceller: Client, claims: Arc<ClaimCheck>) -> Self {
        let jetstream = canceller.jetstream().clone();
        let client = jetstream.client();
        let budget = client
            .server_info()
            .max_payload
            .saturating_sub(REPLY_MARGIN)
            .max(1024);
        Self {
            subjects: canceller.subjects().clone(),
            client,
            jetstream,
            claims,
            canceller,
            budget,
        }
    }

    /// Subscribes, then answers requests until `stop` is cancelled.
    ///
    /// # Errors
    ///
    /// When the subscription is refused.
    pub(crate) async fn serve(
        self,
        stop: CancellationToken,
    ) -> Result<tokio::task::JoinHandle<()>, baton_nats::Error> {
        let mut requests = self
            .client
            .queue_subscribe(self.subjects.all_session_requests(), QUEUE.to_owned())
            .await
            .map_err(|err| {
                baton_nats::Error::with_source(
                    baton_nats::ErrorKind::Connect,
                    format!(
                        "cannot serve session reads on {}",
                        self.subjects.all_session_requests()
                    ),
                    err,
                )
            })?;
        let this = Arc::new(self);
        let turns = Arc::new(Semaphore::new(CONCURRENCY));
        Ok(tokio::spawn(async move {
            loop {
                let request = tokio::select! {
                    () = stop.cancelled() => break,
                    request = requests.next() => match request {
                        Some(request) => request,
                        None => break,
                    },
                };
                let Ok(turn) = turns.clone().acquire_owned().await else {
                    break;
                };
                let this = this.clone();
                tokio::spawn(async move {
                    this.answer(request).await;
                    drop(turn);
                });
            }
        }))
    }

    async fn answer(&self, request: async_nats::Message) {
        let Some(reply_to) = request.reply.clone() else {
            return;
        };
        let prefix = format!("{}.session.", self.subjects.prefix());
        let rest = request.subject.strip_prefix(&prefix).unwrap_or_default();
        let (op, session) = rest.split_once('.').unwrap_or((rest, ""));
        let session = match Uuid::parse_str(session) {
            Ok(session) => session,
            Err(_) => {
                let error = format!(
                    "{} does not end in a session id: a request names one session",
                    request.subject
                );
                return self.send(reply_to, refusal(op, error)).await;
            }
        };
        let payload = match op {
            "read" => match ReadRequest::from_msgpack(&request.payload) {
                Ok(read) if read.live_ms > 0 => {
                    return self.relay(session, reply_to, read.live_ms).await;
                }
                Ok(read) => self.read(session, &read).await.to_msgpack(),
                Err(err) => refusal(op, format!("not a read request: {err}")),
            },
            "cancel" => match CancelRequest::from_msgpack(&request.payload) {
                Ok(cancel) => self.cancel(session, &cancel.detail).await.to_msgpack(),
                Err(err) => refusal(op, format!("not a cancel request: {err}")),
            },
            _ => refusal(op, format!("unknown session request {op}")),
        };
        self.send(reply_to, payload).await;
    }

    async fn send(
        &self,
        reply_to: async_nats::Subject,
        payload: Result<Vec<u8>, baton_proto::Error>,
    ) {
        match payload {
            Ok(payload) => {
                if let Err(err) = self.client.publish(reply_to, payload.into()).await {
                    tracing::warn!(error = %err, "cannot answer a session request");
                }
            }
            Err(err) => tracing::warn!(error = %err, "cannot encode a session reply"),
        }
    }

    async fn cancel(&self, session: Uuid, detail: &str) -> CancelReply {
        match self.canceller.cancel(session, detail).await {
            Ok(Cancel::Cancelled(event)) => CancelReply {
                event: Some(event),
                ..CancelReply::default()
            },
            Ok(Cancel::Ended(event)) => CancelReply {
                event: Some(event),
                ended_before: true,
                ..CancelReply::default()
            },
            Err(err) => CancelReply {
                error: Some(err.to_string()),
                ..CancelReply::default()
            },
        }
    }

    /// The events of `session` after `request.after`; when there are none
    /// and the request may wait, the next ones to come.
    async fn read(&self, session: Uuid, request: &ReadRequest) -> ReadReply {
        let wait = Duration::from_millis(request.wait_ms.min(MAX_READ_WAIT_MS));
        // Subscribe before reading what is stored, so nothing falls between.
        let watch = if wait.is_zero() {
            None
        } else {
            match self.watch(session).await {
                Ok(watch) => Some(watch),
                Err(err) => return failed(err),
            }
        };
        let reply = self.stored(session, request).await;
        let Some((mut stored, mut live, _following)) = watch else {
            return reply;
        };
        if !reply.events.is_empty() || reply.part.is_some() || reply.error.is_some() {
            return reply;
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => reply,
            Some(_) = stored.next() => self.stored_soon(session, request).await,
            Some(message) = live.next() => match Event::from_msgpack(&message.payload) {
                Ok(event) => ReadReply {
                    events: vec![ReadEvent { seq: 0, more: false, event }],
                    ..ReadReply::default()
                },
                Err(_) => ReadReply::default(),
            },
        }
    }

    /// Relays the live events of `session` to `reply_to` for `ms` (at most
    /// [`MAX_READ_WAIT_MS`]): a first reply once it listens, one reply per
    /// event, and a last one that says it has ended.
    async fn relay(&self, session: Uuid, reply_to: async_nats::Subject, ms: u64) {
        let live = |events: Vec<ReadEvent>, live_end: bool| ReadReply {
            events,
            live: true,
            live_end,
            ..ReadReply::default()
        };
        let mut subscription = match self.client.subscribe(self.subjects.live(session)).await {
            Ok(subscription) => subscription,
            Err(err) => return self.send(reply_to, failed(err).to_msgpack()).await,
        };
        let _following = self.following(session).await;
        self.send(reply_to.clone(), live(Vec::new(), false).to_msgpack())
            .await;
        let until = tokio::time::Instant::now() + Duration::from_millis(ms.min(MAX_READ_WAIT_MS));
        while let Ok(Some(message)) = tokio::time::timeout_at(until, subscription.next()).await {
            let Ok(event) = Event::from_msgpack(&message.payload) else {
                continue;
            };
            let read = ReadEvent {
                seq: 0,
                more: false,
                event,
            };
            self.send(reply_to.clone(), live(vec![read], false).to_msgpack())
                .await;
        }
        self.send(reply_to, live(Vec::new(), true).to_msgpack())
            .await;
    }

    /// The stored and live events of `session` as they come, the live ones
    /// followed (see [`baton_nats::state::followers`]) while the watch is kept.
    async fn watch(&self, session: Uuid) -> Result<Watch, async_nats::SubscribeError> {
        let stored = self.client.subscribe(self.subjects.events(session)).await?;
        let live = self.client.subscribe(self.subjects.live(session)).await?;
        let following = self.following(session).await;
        Ok((stored, live, following))
    }

    /// Says that this router follows `session`'s live events.
    async fn following(&self, session: Uuid) -> Following {
        let scope = Scope::Session(session);
        baton_nats::state::followers::follow(&self.client, &self.subjects, scope).await
    }

    /// The stored events after an event was published: the stream may
    /// store it a moment after subscribers see it (a cluster replicates
    /// first), so look again a few times.
    async fn stored_soon(&self, session: Uuid, request: &ReadRequest) -> ReadReply {
        let mut delay = Duration::from_millis(5);
        for _ in 0..8 {
            let reply = self.stored(session, request).await;
            if !reply.events.is_empty() || reply.part.is_some() || reply.error.is_some() {
                return reply;
            }
            tokio::time::sleep(delay).await;
            delay *= 2;
        }
        ReadReply::default()
    }

    /// The stored events after `request.after`, as many as fit one reply.
    async fn stored(&self, session: Uuid, request: &ReadRequest) -> ReadReply {
        let name = self.subjects.events_stream();
        let stream = match self.jetstream.get_stream_no_info(&name).await {
            Ok(stream) => stream,
            Err(err) => return failed(format!("cannot open stream {name}: {err}")),
        };
        let subject = self.subjects.events(session);
        let mut reply = ReadReply::default();
        let mut size = 0;
        let mut next = request.after.saturating_add(1);
        loop {
            let message = match stream
                .raw_message_builder()
                .sequence(next)
                .next_by_subject(subject.clone())
                .send()
                .await
            {
                Ok(message) => message,
                Err(err) if err.kind() == RawMessageErrorKind::NoMessageFound => break,
                Err(err) => return failed(format!("cannot read stream {name}: {err}")),
            };
            if let Some(last) = reply.events.last_mut() {
                last.more = true;
            }
            if reply.events.len() == MAX_EVENTS {
                break;
            }
            let seq = message.sequence;
            next = seq.saturating_add(1);
            let bytes = match self.claims.check_in(&message.payload).await {
                Ok(bytes) => bytes,
                Err(ClaimFailure::Permanent(detail)) => {
                    tracing::warn!(seq, %detail, "skipping an event whose claims cannot be restored");
                    continue;
                }
                Err(ClaimFailure::Transient(err)) => return failed(err),
            };
            // An event that keeps a text once is sent whole (an older
            // reader could not put it back), so it is counted whole.
            let decoded = Event::from_msgpack_limited(&bytes, self.claims.max_restored());
            let len = decoded.as_ref().map_or(bytes.len(), |event| {
                event.to_msgpack().map_or(bytes.len(), |whole| whole.len())
            });
            if reply.events.is_empty() && (request.offset > 0 || len > self.budget) {
                let more = self.stored_after(&stream, &subject, next).await;
                return part(seq, more, request.offset, &bytes, self.budget);
            }
            if size + len > self.budget {
                break;
            }
            match decoded {
                Ok(event) => {
                    size += len;
                    reply.events.push(ReadEvent {
                        seq,
                        more: false,
                        event,
                    });
                }
                Err(err) => tracing::warn!(seq, error = %err, "skipping an unreadable event"),
            }
        }
        reply
    }

    async fn stored_after(
        &self,
        stream: &jetstream::stream::Stream<()>,
        subject: &str,
        from: u64,
    ) -> bool {
        stream
            .raw_message_builder()
            .sequence(from)
            .next_by_subject(subject.to_owned())
            .send()
            .await
            .is_ok()
    }
}

/// One part of an event too large for one reply, from `offset`.
fn part(seq: u64, more: bool, offset: u64, bytes: &[u8], budget: usize) -> ReadReply {
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    let end = start.saturating_add(budget).min(bytes.len());
    ReadReply {
        part: Some(EventPart {
            seq,
            more,
            offset: start as u64,
            total: bytes.len() as u64,
            bytes: bytes[start..end].to_vec(),
        }),
        ..ReadReply::default()
    }
}

fn failed(error: impl ToString) -> ReadReply {
    ReadReply {
        error: Some(error.to_string()),
        ..ReadReply::default()
    }
}

/// The answer to a request that is refused before it is read.
fn refusal(op: &str, error: String) -> Result<Vec<u8>, baton_proto::Error> {
    if op == "cancel" {
        CancelReply {
            error: Some(error),
            ..CancelReply::default()
        }
        .to_msgpack()
    } else {
        failed(error).to_msgpack()
    }
}

/// What the session service uses: the requests of every session, and the
/// session events it waits for, stored and live.
#[must_use]
pub(crate) fn footprint(subjects: &Subjects) -> Footprint {
    Footprint::new()
        .subscribes([
            subjects.all_session_requests(),
            format!("{}.events.*", subjects.prefix()),
            subjects.all_live(),
        ])
        .with(baton_nats::state::followers::follower_footprint(subjects))
        // A live relay answers one request with many replies.
        .relaying()
}
