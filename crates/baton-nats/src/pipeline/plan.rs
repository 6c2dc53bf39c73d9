//! A plan: the messages one delivery publishes, each with its
//! deterministic id, and how the delivery is settled once they are durable.
//! The worker's planner and the router's routing both make plans, and the
//! outbox and the router carry them out the same way ([`super::settle`]).

use std::time::Duration;

use baton_proto::{AgentName, DeadLetterReason, Envelope, Event};
use uuid::Uuid;

/// How the incoming delivery is settled once every output is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Done: confirmed ack.
    Ack,
    /// Deliver again after the delay.
    Nak(Duration),
    /// Never deliver again (it was dead-lettered).
    Term,
}

/// One message to publish, with its deterministic id.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// An envelope for an agent's subject.
    Envelope {
        to: AgentName,
        envelope: Box<Envelope>,
    },
    /// A session event.
    Event(Box<Event>),
    /// A copy of the incoming bytes for the dead-letter stream.
    DeadLetter(DeadLetter),
}

/// A dead letter: the original bytes are kept; the reason travels in headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub id: Uuid,
    pub reason: DeadLetterReason,
    pub detail: String,
}

/// What to do with one delivery: publish `outputs`, then settle.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub outputs: Vec<Output>,
    pub settle: Settle,
    /// Whether the task failed here (for the worker's counters).
    pub failed: bool,
}

impl Plan {
    /// Root task `envelope` of `session`, which ended with `end` already:
    /// dead-lettered with reason `session_ended`, and no event (the session
    /// keeps its one end).
    pub fn session_ended(envelope: Uuid, session: Uuid, end: &baton_proto::Event) -> Self {
        let detail = format!(
            "session {session} ended ({}) before this task arrived: a session runs one task and ends once; send a new task in a new session",
            end.kind
        );
        Self {
            outputs: vec![Output::DeadLetter(DeadLetter {
                id: baton_proto::derive_id_labelled(envelope, "session_ended", 0),
                reason: DeadLetterReason::SessionEnded,
                detail,
            })],
            settle: Settle::Term,
            failed: false,
        }
    }

    /// Publish `outputs`, then ack.
    pub fn ack(outputs: Vec<Output>) -> Self {
        Self {
            outputs,
            settle: Settle::Ack,
            failed: false,
        }
    }
}
