//! A client's side of the router's session service (`baton-router`'s `sessions.rs`):
//! reading and cancelling one session by request, for a NATS user that may
//! not read the events stream.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt as _;

use baton_proto::{CancelReply, CancelRequest, Event, ReadReply, ReadRequest, Subjects, Wire};
use uuid::Uuid;

use baton_nats::{Error, ErrorKind};

/// Events with how many of the session's events are stored after each.
pub(crate) type TrackedEvents =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<(Event, u64), Error>> + Send>>;

/// What [`Client::cancel`](crate::Client::cancel) did.
#[derive(Debug, Clone)]
pub enum Cancel {
    /// The session is cancelled; its `failed` event, reason `cancelled`.
    Cancelled(Event),
    /// The session had ended already; its terminal event.
    Ended(Event),
}

/// How long one read waits for the next event before asking again.
const WAIT: Duration = Duration::from_secs(10);
/// How long an answer may take beyond the wait.
const ANSWER: Duration = Duration::from_secs(10);

/// The events of `session`, each with 1 when more are stored after it (0
/// for the last stored one). With `follow`, it then waits for more, and
/// never ends on its own; without, it ends after the last stored event.
pub(crate) fn events(
    client: &async_nats::Client,
    subjects: &Subjects,
    session: Uuid,
    follow: bool,
) -> TrackedEvents {
    paged(client, subjects, session, follow, None)
}

/// The events of `session`, stored then live, as [`events`] follows them,
/// with every live event relayed by the router (a read returns one live
/// event at most, so pieces of an answer written between two reads would
/// be missed). Each event comes once.
pub(crate) async fn followed(
    client: &async_nats::Client,
    subjects: &Subjects,
    session: Uuid,
) -> TrackedEvents {
    let relaying = Arc::new(AtomicBool::new(false));
    let live = crate::client::relaying::live(client, subjects, session, relaying.clone()).await;
    let live = futures::stream::unfold(live, |mut live| async move {
        let event = live.recv().await?;
        // A live event is never the stored end: it counts as one more to come.
        Some((Ok((event, 1)), live))
    });
    let stored = paged(client, subjects, session, true, Some(relaying));
    let mut seen = HashSet::new();
    Box::pin(futures::stream::select(stored, live).filter(move |item| {
        let first = match item {
            Ok((event, _)) => seen.insert(event.id),
            Err(_) => true,
        };
        std::future::ready(first)
    }))
}

fn paged(
    client: &async_nats::Client,
    subjects: &Subjects,
    session: Uuid,
    follow: bool,
    relaying: Option<Arc<AtomicBool>>,
) -> TrackedEvents {
    let state = Paging {
        client: client.clone(),
        subject: subjects.session_read(session),
        follow,
        after: 0,
        part: Vec::new(),
        ready: VecDeque::new(),
        done: false,
        answered: false,
        failures: 0,
        relaying,
    };
    Box::pin(futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(item) = state.ready.pop_front() {
                return Some((item, state));
            }
            if state.done {
                return None;
            }
            state.page().await;
        }
    }))
}

/// Where a reading of one session is.
struct Paging {
    client: async_nats::Client,
    subject: String,
    follow: bool,
    /// The stream sequence of the last stored event read.
    after: u64,
    /// The bytes so far of an event that comes in parts.
    part: Vec<u8>,
    ready: VecDeque<Result<(Event, u64), Error>>,
    done: bool,
    /// Whether the router answered once: a follower then rides out a
    /// router's restart instead of ending.
    answered: bool,
    /// Requests in a row that got no answer.
    failures: u32,
    /// True while a relay brings the live events: the ones reads return
    /// are left to it.
    relaying: Option<Arc<AtomicBool>>,
}

/// Requests in a row without an answer that a follower rides out.
const RIDE_OUT: u32 = 5;

impl Paging {
    /// Asks for the next page, and queues what it brings.
    async fn page(&mut self) {
        let wait = if self.follow { WAIT } else { Duration::ZERO };
        let request = ReadRequest {
            after: self.after,
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            offset: self.part.len() as u64,
            ..ReadRequest::default()
        };
        let reply: ReadReply = match ask(&self.client, &self.subject, &request, wait + ANSWER).await
        {
            Ok(reply) => reply,
            Err(err) => {
                let unanswered = matches!(err.kind(), ErrorKind::NoRoute | ErrorKind::Timeout);
                self.failures += 1;
                if self.follow && self.answered && unanswered && self.failures < RIDE_OUT {
                    tracing::info!(error = %err, "the router did not answer; asking again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    return;
                }
                return self.fail(err);
            }
        };
        self.answered = true;
        self.failures = 0;
        if let Some(error) = reply.error {
            return self.fail(Error::new(ErrorKind::JetStream, error));
        }
        if let Some(part) = reply.part {
            if part.offset != self.part.len() as u64 {
                // The event changed between parts (it expired): start over.
                self.part.clear();
                return;
            }
            self.part.extend_from_slice(&part.bytes);
            if (self.part.len() as u64) < part.total && !part.bytes.is_empty() {
                return;
            }
            let bytes = std::mem::take(&mut self.part);
            self.after = part.seq;
            let item = Event::from_msgpack_limited(&bytes, usize::MAX)
                .map(|event| (event, u64::from(part.more)))
                .map_err(|err| {
                    Error::new(
                        ErrorKind::Decode,
                        format!("unreadable event {}: {err}", part.seq),
                    )
                });
            self.ready.push_back(item);
            return;
        }
        if reply.events.is_empty() && !self.follow {
            self.done = true;
        }
        let relayed = self
            .relaying
            .as_ref()
            .is_some_and(|relaying| relaying.load(Ordering::Relaxed));
        for read in reply.events {
            if read.seq == 0 && relayed {
                continue;
            }
            // A live event is never the stored end: it counts as one more to come.
            let more = if read.seq == 0 {
                1
            } else {
                self.after = read.seq;
                u64::from(read.more)
            };
            self.ready.push_back(Ok((read.event, more)));
        }
    }

    fn fail(&mut self, err: Error) {
        self.ready.push_back(Err(err));
        self.done = true;
    }
}

/// Cancels `session` through the router.
pub(crate) async fn cancel(
    client: &async_nats::Client,
    subjects: &Subjects,
    session: Uuid,
    detail: &str,
) -> Result<Cancel, Error> {
    let request = CancelRequest {
        detail: detail.to_owned(),
        ..CancelRequest::default()
    };
    let subject = subjects.session_cancel(session);
    let reply: CancelReply = ask(client, &subject, &request, ANSWER).await?;
    match (reply.error, reply.event) {
        (Some(error), _) => Err(Error::new(ErrorKind::JetStream, error)),
        (None, Some(event)) if reply.ended_before => Ok(Cancel::Ended(event)),
        (None, Some(event)) => Ok(Cancel::Cancelled(event)),
        (None, None) => Err(Error::new(
            ErrorKind::Decode,
            format!("the router's answer on {subject} has neither an event nor an error"),
        )),
    }
}

/// One request to the router's session service, and its answer.
async fn ask<R: Wire>(
    client: &async_nats::Client,
    subject: &str,
    request: &impl Wire,
    timeout: Duration,
) -> Result<R, Error> {
    let payload = request
        .to_msgpack()
        .map_err(|err| Error::with_source(ErrorKind::Encode, "cannot encode a request", err))?;
    let request = async_nats::Request::new()
        .payload(payload.into())
        .timeout(Some(timeout));
    let answer = client
        .send_request(subject.to_owned(), request)
        .await
        .map_err(|err| match err.kind() {
            async_nats::RequestErrorKind::NoResponders => Error::new(
                ErrorKind::NoRoute,
                format!(
                    "no router answers {subject}: this NATS user reads sessions through `baton router` \
                     (its permissions do not let it read the events stream), so start one"
                ),
            ),
            async_nats::RequestErrorKind::TimedOut => Error::new(
                ErrorKind::Timeout,
                format!("the router did not answer {subject} within {timeout:?}"),
            ),
            _ => {
                Error::with_source(ErrorKind::Connect, format!("cannot ask {subject}"), err)
            }
        })?;
    // NATS has limited its size already.
    R::from_msgpack_limited(&answer.payload, usize::MAX).map_err(|err| {
        Error::new(
            ErrorKind::Decode,
            format!("unreadable answer on {subject}: {err}"),
        )
    })
}
