//! Turning a plan into publishable messages, and settling the delivery.

use async_nats::HeaderMap;
use async_nats::jetstream::{self, AckKind};
use baton_proto::{AgentName, DeadLetterReason, Event, EventType, Reason, Subjects, Wire, headers};
use bytes::Bytes;
use uuid::Uuid;

use crate::error::{Error, ErrorKind};
use crate::plan::{Output, Settle};
use crate::publish::Outgoing;
use crate::trace;

/// Where the messages of one delivery go, and under which trace.
pub(crate) struct Emitter<'a> {
    pub(crate) subjects: &'a Subjects,
    /// The agent type whose dead-letter subject is used.
    pub(crate) agent: &'a AgentName,
    pub(crate) span: &'a tracing::Span,
    pub(crate) parent: &'a opentelemetry::Context,
}

impl Emitter<'_> {
    pub(crate) fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        trace::inject(self.span, self.parent, &mut headers);
        headers
    }

    pub(crate) fn event(&self, event: &Event) -> Result<Outgoing, Error> {
        Ok(Outgoing {
            subject: self.subjects.events(event.session),
            id: event.id,
            payload: encode(event)?,
            headers: self.headers(),
        })
    }

    /// An envelope for agent type `to`.
    pub(crate) fn envelope(
        &self,
        to: &AgentName,
        envelope: &baton_proto::Envelope,
    ) -> Result<Outgoing, Error> {
        Ok(Outgoing {
            subject: self.subjects.agent(to),
            id: envelope.id,
            payload: encode(envelope)?,
            headers: self.headers(),
        })
    }

    /// A copy of `message` for the dead-letter stream, with the reason headers.
    pub(crate) fn dead_letter(
        &self,
        message: &jetstream::Message,
        id: Uuid,
        reason: &DeadLetterReason,
        detail: &str,
    ) -> Outgoing {
        let mut headers = self.headers();
        headers.insert(headers::ERROR, reason.as_str());
        headers.insert(headers::ERROR_DETAIL, header_safe(detail).as_str());
        headers.insert(headers::AGENT, self.agent.as_str());
        headers.insert(headers::ORIGINAL_SUBJECT, message.subject.as_str());
        let deliveries = message.info().map(|info| info.delivered).unwrap_or(1);
        headers.insert(headers::DELIVERIES, deliveries.to_string().as_str());
        Outgoing {
            subject: self.subjects.dlq(self.agent),
            id,
            payload: message.payload.clone(),
            headers,
        }
    }

    /// The messages of a plan, in order.
    pub(crate) fn outputs(
        &self,
        message: &jetstream::Message,
        outputs: &[Output],
    ) -> Result<Vec<Outgoing>, Error> {
        outputs
            .iter()
            .map(|output| match output {
                Output::Envelope { to, envelope } => self.envelope(to, envelope),
                Output::Event(event) => self.event(event),
                Output::DeadLetter(dead) => {
                    Ok(self.dead_letter(message, dead.id, &dead.reason, &dead.detail))
                }
            })
            .collect()
    }

    /// The outputs for bytes that are not a readable envelope: a dead letter,
    /// and, when the session can still be read, `dead_lettered` and `failed`
    /// events so a client waiting on it is not left hanging.
    pub(crate) fn undecodable(
        &self,
        message: &jetstream::Message,
        reason: &DeadLetterReason,
        detail: &str,
    ) -> Vec<Outgoing> {
        let stream_seq = message
            .info()
            .map(|info| info.stream_sequence)
            .unwrap_or_default();
        let base = Uuid::new_v5(
            &Uuid::NAMESPACE_OID,
            format!("{}/{stream_seq}", message.subject).as_bytes(),
        );
        let mut outgoing =
            vec![self.dead_letter(message, baton_proto::derive_id(base, 0), reason, detail)];
        if let Some(session) = probe_session(&message.payload) {
            for (index, kind) in [(1, EventType::DeadLettered), (2, EventType::Failed)] {
                let mut event = Event::new(baton_proto::derive_id(base, index), session, kind);
                event.agent = Some(self.agent.to_string());
                event.reason = Some(Reason::parse(reason.as_str()));
                event.detail = Some(detail.to_owned());
                if let Ok(event) = self.event(&event) {
                    outgoing.push(event);
                }
            }
        }
        outgoing
    }
}

fn encode<T: Wire>(value: &T) -> Result<Bytes, Error> {
    value
        .to_msgpack()
        .map(Bytes::from)
        .map_err(|err| Error::with_source(ErrorKind::Decode, "cannot encode output", err))
}

/// Header values cannot hold line breaks; keep the detail on one bounded line.
fn header_safe(text: &str) -> String {
    let line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    line.chars().take(1024).collect()
}

/// The `session` of a payload that is not a readable envelope, if it has a valid one.
fn probe_session(payload: &[u8]) -> Option<Uuid> {
    #[derive(serde::Deserialize)]
    struct Probe {
        session: Option<String>,
    }
    let probe: Probe = rmp_serde_probe(payload)?;
    probe
        .session
        .and_then(|session| Uuid::parse_str(&session).ok())
}

fn rmp_serde_probe<T: serde::de::DeserializeOwned>(payload: &[u8]) -> Option<T> {
    let value = rmpv::decode::read_value(&mut &payload[..]).ok()?;
    rmpv::ext::from_value(value).ok()
}

/// Settles the delivery after its outputs are durable.
pub(crate) async fn settle(message: &jetstream::Message, settle: Settle) {
    let result = match settle {
        Settle::Ack => message.double_ack().await,
        Settle::Nak(delay) => message.ack_with(AckKind::Nak(Some(delay))).await,
        Settle::Term => message.double_ack_with(AckKind::Term).await,
    };
    if let Err(err) = result {
        // The outputs are durable and carry deterministic ids: a redelivery
        // republishes the same ids, which JetStream drops as duplicates.
        tracing::warn!(error = %err, ?settle, "could not settle the message; it will be redelivered and deduplicated");
    }
}
