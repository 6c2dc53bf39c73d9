//! One delivery of a message: its attempt number and trace context, how its
//! plan becomes publishable messages, and how it is settled (steps 1 and 6
//! of the worker loop).

use async_nats::HeaderMap;
use async_nats::jetstream::{self, AckKind};
use baton_proto::{
    AgentName, DeadLetterReason, Event, EventType, Reason, Subjects, Wire, derive_id, headers,
};
use bytes::Bytes;
use uuid::Uuid;

use crate::error::{Error, ErrorKind};
use crate::nats::publish::{Class, Outgoing};
use crate::nats::trace;
use crate::pipeline::opening::Opening;
use crate::pipeline::plan::Output;

/// How a worker acknowledges a message whose outputs are durable.
///
/// Either way the outputs are durable before the acknowledgement is sent.
/// What differs is whether the worker waits for the server to confirm it:
/// an acknowledgement lost on the way means one more delivery, whose
/// outputs carry the same ids and are dropped as duplicates, so the agent
/// runs once more but nothing is doubled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SettleMode {
    /// Wait for the server's confirmation (a second round trip).
    Confirmed,
    /// Send the acknowledgement and go on (the default: faster in every
    /// measured run, and a lost ack costs one more run, never a double).
    #[default]
    Plain,
}

/// A message pulled from a consumer, with what every output of it needs.
pub struct Delivery<'a> {
    pub message: jetstream::Message,
    /// Delivery attempt, counting from 1.
    pub attempt: u32,
    /// The span of this delivery, a child of the sender's trace.
    pub span: tracing::Span,
    parent: opentelemetry::Context,
    subjects: &'a Subjects,
    /// Who handles it: the agent type whose dead-letter subject is used.
    agent: &'a AgentName,
    /// Whether settling waits for the server's confirmation.
    confirm: bool,
    /// When the worker took it, unix ms.
    pub received_at: u64,
    /// The hop's `accepted` event, to fold into the first event written
    /// for this delivery instead of storing it on its own.
    folded: std::sync::OnceLock<Event>,
    /// The trace headers of every output, written once: the span and its
    /// parent do not change while the delivery is handled.
    trace_headers: std::sync::OnceLock<std::sync::Arc<HeaderMap>>,
    /// Set for a root task on its first delivery: its first write checks
    /// that its session has not ended.
    opening: std::sync::OnceLock<std::sync::Arc<Opening>>,
}

impl<'a> Delivery<'a> {
    /// `message`, handled by `agent` under `span`; the span joins the trace
    /// the message's headers carry.
    pub fn new(
        message: jetstream::Message,
        span: tracing::Span,
        subjects: &'a Subjects,
        agent: &'a AgentName,
    ) -> Self {
        let attempt = message.info().map_or(1, |info| {
            u32::try_from(info.delivered).unwrap_or(u32::MAX).max(1)
        });
        let parent = trace::extract(message.headers.as_ref());
        trace::adopt(&span, &parent);
        Self {
            message,
            attempt,
            span,
            parent,
            subjects,
            agent,
            confirm: true,
            received_at: baton_proto::now_ms(),
            folded: std::sync::OnceLock::new(),
            trace_headers: std::sync::OnceLock::new(),
            opening: std::sync::OnceLock::new(),
        }
    }

    /// When `envelope` opens its session (a root task, not a conversation's
    /// turn, not sent back after a person's decision) and this is its first
    /// delivery: its first write checks that its session has not ended (see
    /// [`crate::pipeline::opening`]). A redelivery is not judged: it
    /// republishes its outputs under the same ids.
    pub fn open(&self, subjects: &Subjects, envelope: &baton_proto::Envelope) {
        if envelope.opens_session() && self.attempt == 1 {
            let opening = Opening::new(subjects, envelope.id, envelope.session);
            let _ = self.opening.set(std::sync::Arc::new(opening));
        }
    }

    /// The opening of a root task's first delivery.
    pub fn opening(&self) -> Option<&std::sync::Arc<Opening>> {
        self.opening.get()
    }

    /// Folds `accepted` into the first event of this delivery's envelope
    /// that its outputs will write (see [`Event::fold`]).
    pub fn fold(&self, accepted: Event) {
        let _ = self.folded.set(accepted);
    }

    /// Settles without waiting for the server's confirmation.
    pub fn settling(mut self, mode: SettleMode) -> Self {
        self.confirm = mode == SettleMode::Confirmed;
        self
    }

    /// The trace headers of every message this delivery leads to, built
    /// once and shared.
    pub fn shared_headers(&self) -> std::sync::Arc<HeaderMap> {
        self.trace_headers
            .get_or_init(|| {
                let mut headers = HeaderMap::new();
                trace::inject(&self.span, &self.parent, &mut headers);
                std::sync::Arc::new(headers)
            })
            .clone()
    }

    /// A copy of [`Delivery::shared_headers`].
    pub fn headers(&self) -> HeaderMap {
        HeaderMap::clone(&self.shared_headers())
    }

    /// `event`, ready to publish.
    pub fn event(&self, event: &Event) -> Result<Outgoing, Error> {
        Ok(Outgoing {
            class: Class::Plain,
            subject: self.subjects.events(event.session),
            id: event.id,
            payload: encode(event)?,
            headers: self.shared_headers(),
        })
    }

    /// `envelope` for agent type `to`, ready to publish.
    pub(crate) fn envelope(
        &self,
        to: &AgentName,
        envelope: &baton_proto::Envelope,
    ) -> Result<Outgoing, Error> {
        Ok(Outgoing {
            class: Class::Plain,
            subject: crate::pipeline::versions::subject_of(self.subjects, to, envelope),
            id: envelope.id,
            payload: encode(envelope)?,
            headers: self.shared_headers(),
        })
    }

    /// The message as stored, for dead-lettering.
    fn stored(&self) -> Stored<'_> {
        let info = self.message.info().ok();
        Stored {
            subject: self.message.subject.as_str(),
            stream_seq: info.as_ref().map_or(0, |info| info.stream_sequence),
            deliveries: info
                .as_ref()
                .map_or(1, |info| u64::try_from(info.delivered).unwrap_or(0)),
            payload: &self.message.payload,
        }
    }

    /// A copy of the message for the dead-letter stream, with the reason headers.
    fn dead_letter(&self, id: Uuid, reason: &DeadLetterReason, detail: &str) -> Outgoing {
        let stored = self.stored();
        stored.dead_letter(
            self.subjects,
            self.agent,
            self.headers(),
            id,
            reason,
            detail,
        )
    }

    /// Folds the hop's `accepted` event, if it is held, into the first of
    /// `outputs` it belongs in, in place, so that [`Delivery::encode`]
    /// encodes every event as it is, with no copy.
    pub fn fold_into(&self, outputs: &mut [Output]) {
        let Some(accepted) = self.folded.get() else {
            return;
        };
        let first = outputs.iter_mut().find_map(|output| match output {
            Output::Event(event) if event.envelope == accepted.envelope => Some(event),
            _ => None,
        });
        if let Some(event) = first {
            event.fold(accepted);
        }
    }

    /// The messages of a plan, in order.
    pub fn encode<'o>(
        &self,
        outputs: impl IntoIterator<Item = &'o Output>,
    ) -> Result<Vec<Outgoing>, Error> {
        let mut folded = self.folded.get();
        outputs
            .into_iter()
            .map(|output| match output {
                Output::Envelope { to, envelope } => self.envelope(to, envelope),
                // Folded in place already ([`Delivery::fold_into`]).
                Output::Event(event) if event.accepted.is_some() => {
                    folded = None;
                    self.event(event)
                }
                Output::Event(event) => match folded.filter(|a| a.envelope == event.envelope) {
                    Some(accepted) => {
                        folded = None;
                        let mut event = event.clone();
                        event.fold(accepted);
                        self.event(&event)
                    }
                    None => self.event(event),
                },
                Output::DeadLetter(dead) => {
                    Ok(self.dead_letter(dead.id, &dead.reason, &dead.detail))
                }
            })
            .collect()
    }

    /// The outputs for a message that cannot be handled as an envelope (it
    /// cannot be read, or what it led to cannot be written): a dead letter,
    /// and, when the session can still be read, `dead_lettered` and `failed`
    /// events so a client waiting on it is not left hanging.
    pub fn unreadable(&self, reason: &DeadLetterReason, detail: &str) -> Vec<Outgoing> {
        let stored = self.stored();
        let ending = Ending {
            reason,
            detail,
            folded: self.folded.get(),
        };
        stored.ending(self.subjects, self.agent, &self.headers(), &ending)
    }

    /// Whether settling waits for the server's confirmation.
    pub(crate) fn confirms(&self) -> bool {
        self.confirm
    }

    /// Tells the server the work is alive (`+WPI`), so `ack_wait` restarts.
    pub async fn progress(&self) {
        if let Err(err) = self.message.ack_with(AckKind::Progress).await {
            tracing::debug!(error = %err, "could not send progress");
        }
    }
}

/// A message as the stream holds it, on its way to the dead-letter stream.
pub(crate) struct Stored<'m> {
    pub subject: &'m str,
    pub stream_seq: u64,
    /// How many times it was delivered.
    pub deliveries: u64,
    pub payload: &'m Bytes,
}

impl Stored<'_> {
    /// Its copy for `agent`'s dead-letter subject, with the reason headers
    /// added to `headers`.
    pub(crate) fn dead_letter(
        &self,
        subjects: &Subjects,
        agent: &AgentName,
        mut headers: HeaderMap,
        id: Uuid,
        reason: &DeadLetterReason,
        detail: &str,
    ) -> Outgoing {
        headers.insert(headers::ERROR, reason.as_str());
        headers.insert(headers::ERROR_DETAIL, header_safe(detail).as_str());
        headers.insert(headers::AGENT, agent.as_str());
        headers.insert(headers::ORIGINAL_SUBJECT, self.subject);
        headers.insert(headers::DELIVERIES, self.deliveries.to_string().as_str());
        Outgoing {
            class: Class::DeadLetter,
            subject: subjects.dlq(agent),
            id,
            payload: self.payload.clone(),
            headers: headers.into(),
        }
    }

    /// The end of a message that cannot be handled as an envelope (it cannot
    /// be read, or what it led to cannot be written): a dead letter, and,
    /// when the session can still be read, `dead_lettered` and `failed`
    /// events so a client waiting on it is not left hanging. The ids derive
    /// from the stream position, so every path that ends the same message
    /// writes the same messages, and JetStream keeps one copy.
    pub(crate) fn ending(
        &self,
        subjects: &Subjects,
        agent: &AgentName,
        headers: &HeaderMap,
        ending: &Ending<'_>,
    ) -> Vec<Outgoing> {
        let (reason, detail) = (ending.reason, ending.detail);
        let mut folded = ending.folded;
        let base = Uuid::new_v5(
            &Uuid::NAMESPACE_OID,
            format!("{}/{}", self.subject, self.stream_seq).as_bytes(),
        );
        let dead = self.dead_letter(
            subjects,
            agent,
            headers.clone(),
            derive_id(base, 0),
            reason,
            detail,
        );
        let mut outgoing = vec![dead];
        let Some((session, replay_of)) = probe_session(self.payload) else {
            return outgoing;
        };
        for (index, kind) in [(1, EventType::DeadLettered), (2, EventType::Failed)] {
            let mut event = Event::new(derive_id(base, index), session, kind);
            event.agent = Some(agent.clone());
            event.replay_of = replay_of;
            event.reason = Some(Reason::from(reason));
            event.detail = Some(detail.to_owned());
            if let Some(accepted) = folded.take().filter(|a| a.session == session) {
                event.envelope = accepted.envelope;
                event.fold(accepted);
            }
            match encode(&event) {
                Ok(payload) => outgoing.push(Outgoing {
                    // Never a second end: written only while the session runs.
                    class: Class::Ending(subjects.events_stream()),
                    subject: subjects.events(session),
                    id: event.id,
                    payload,
                    headers: headers.clone().into(),
                }),
                Err(err) => tracing::warn!(error = %err, "cannot encode an event"),
            }
        }
        outgoing
    }
}

/// Why a message ends unhandled, for [`Stored::ending`].
pub(crate) struct Ending<'a> {
    pub reason: &'a DeadLetterReason,
    pub detail: &'a str,
    /// The hop's `accepted` event, folded into the `dead_lettered` event.
    pub folded: Option<&'a Event>,
}

fn encode<T: Wire>(value: &T) -> Result<Bytes, Error> {
    value
        .to_msgpack()
        .map(Bytes::from)
        .map_err(|err| Error::with_source(ErrorKind::Encode, "cannot encode output", err))
}

/// Header values cannot hold line breaks; keep the detail on one bounded line.
fn header_safe(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(1024)
        .collect()
}

/// The `session` of a payload that may not be a readable envelope, if it
/// has a valid one, and the session it replays, if it says so.
fn probe_session(payload: &[u8]) -> Option<(Uuid, Option<Uuid>)> {
    #[derive(serde::Deserialize)]
    struct Probe {
        session: Option<String>,
        // Read loosely: a malformed `replay` must not hide the session.
        replay: Option<rmpv::Value>,
    }
    if baton_proto::nests_deeper_than(payload, baton_proto::MAX_NESTING) {
        return None;
    }
    let value = rmpv::decode::read_value(&mut &payload[..]).ok()?;
    let probe: Probe = rmpv::ext::from_value(value).ok()?;
    let session = Uuid::parse_str(&probe.session?).ok()?;
    let of = |replay: rmpv::Value| {
        let rmpv::Value::Map(entries) = replay else {
            return None;
        };
        let (_, of) = entries
            .into_iter()
            .find(|(key, _)| key.as_str() == Some("of"))?;
        Uuid::parse_str(of.as_str()?).ok()
    };
    let replay_of = probe.replay.and_then(of);
    Some((session, replay_of))
}
