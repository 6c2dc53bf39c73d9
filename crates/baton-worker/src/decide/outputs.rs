//! Outputs under construction, numbered in order for deterministic ids.

use baton_proto::derive_id;
use baton_proto::{AgentName, DeadLetterReason, Envelope, Event, Kind, Reason};
use uuid::Uuid;

use super::{DeadLetter, Output, Plan, Settle};

/// The outputs of one delivery. Each takes the next id derived from the
/// incoming envelope's id, so a redelivery plans the same ids.
pub(super) struct Outputs {
    parent: Uuid,
    list: Vec<Output>,
    index: u32,
    pub(super) failed: bool,
}

impl Outputs {
    pub(super) fn new(parent: Uuid) -> Self {
        Self {
            parent,
            list: Vec::new(),
            index: 0,
            failed: false,
        }
    }

    pub(super) fn next_id(&mut self) -> Uuid {
        let id = derive_id(self.parent, self.index);
        self.index += 1;
        id
    }

    pub(super) fn push_event(&mut self, event: Event) {
        self.list.push(Output::Event(Box::new(event)));
    }

    /// `envelope` as a new message of `kind` to `to`, under the next id.
    pub(super) fn push_envelope(
        &mut self,
        to: AgentName,
        envelope: Envelope,
        kind: Kind,
        reason: Reason,
    ) {
        let mut envelope = envelope.resent(self.next_id(), kind, to.clone());
        envelope.reason = Some(reason);
        self.list.push(Output::Envelope {
            to,
            envelope: Box::new(envelope),
        });
    }

    pub(super) fn dead_letter(&mut self, reason: DeadLetterReason, detail: &str) {
        let id = self.next_id();
        self.list.push(Output::DeadLetter(DeadLetter {
            id,
            reason,
            detail: detail.to_owned(),
        }));
    }

    pub(super) fn has_dead_letter(&self) -> bool {
        self.list
            .iter()
            .any(|output| matches!(output, Output::DeadLetter(_)))
    }

    pub(super) fn into_list(self) -> Vec<Output> {
        self.list
    }

    pub(super) fn into_plan(self) -> Plan {
        Plan {
            outputs: self.list,
            settle: Settle::Ack,
            failed: self.failed,
        }
    }
}
