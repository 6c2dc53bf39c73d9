//! Step 7 of the worker loop: what a failure leads to. A retry (Nak with a
//! backoff), a dead letter with its reason, an escalation to the fallback
//! agent, or the end of the session: never silence.

use std::time::Duration;

use baton_proto::{DeadLetterReason, Envelope, Event, EventType, Kind, Reason, derive_id_labelled};
use uuid::Uuid;

use super::outputs::Outputs;
use super::{Ending, Forward, Lookup, Output, Plan, Planner, RETRYING_LABEL, Settle};
use baton_author::ContextUpdate;

impl Planner<'_> {
    /// The plan for an envelope this runtime cannot place: dead-lettered as
    /// `malformed`, and its session failed.
    pub(crate) fn malformed(&self, envelope: &Envelope, detail: &str) -> Plan {
        let code = DeadLetterReason::Malformed;
        let reason = Reason::from(&code);
        self.give_up(envelope, code, reason, detail, false)
    }

    /// The plan for an envelope that has nowhere to go: a dead letter and
    /// the session's failure, both `no_route`.
    pub(crate) fn no_route(&self, envelope: &Envelope, detail: &str) -> Plan {
        let code = DeadLetterReason::NoRoute;
        self.give_up(envelope, code, Reason::NoRoute, detail, false)
    }

    /// The plan for an outcome the runtime could not carry out (it cannot be
    /// encoded, or a delegation was refused): a fatal failure.
    pub(crate) fn fatal(&self, envelope: &Envelope, detail: &str) -> Plan {
        self.give_up(
            envelope,
            DeadLetterReason::Fatal,
            Reason::Fatal,
            detail,
            true,
        )
    }

    /// A `rejected` event, then the registry's next best agent, the
    /// fallback, or failure.
    pub(super) fn rejected(&self, envelope: &Envelope, detail: &str, found: Lookup) -> Plan {
        let mut outputs = Outputs::new(envelope.id);
        let mut rejected = self.event(envelope, outputs.next_id(), EventType::Rejected);
        rejected.reason = Some(Reason::Rejected);
        rejected.detail = Some(detail.to_owned());
        outputs.push_event(rejected);
        let next = self.advance(envelope, ContextUpdate::default());
        if let Lookup::Candidate(to) = found {
            // Re-routed through the registry, this agent excluded.
            let route = Forward::new(to, Reason::Rejected, EventType::Handoff, None);
            self.forward(&mut outputs, envelope, next, route);
        } else {
            let detail = format!("{} rejected the task: {detail}", self.agent);
            let code = DeadLetterReason::NoRoute;
            self.escalate_or_fail(
                &mut outputs,
                envelope,
                next,
                Reason::Rejected,
                code,
                &detail,
            );
        }
        outputs.into_plan()
    }

    /// Nak with `delay`, announced by a `retrying` event.
    pub(super) fn retry_later(
        &self,
        envelope: &Envelope,
        attempt: u32,
        detail: &str,
        delay: Duration,
    ) -> Plan {
        let id = derive_id_labelled(envelope.id, RETRYING_LABEL, attempt);
        let mut event = self.event(envelope, id, EventType::Retrying);
        event.attempt = Some(attempt);
        event.detail = Some(format!(
            "attempt {attempt} of {} failed: {detail}; retrying in {delay:?}",
            self.retry.max_attempts
        ));
        Plan {
            outputs: vec![Output::Event(Box::new(event))],
            settle: Settle::Nak(delay),
            failed: false,
        }
    }

    /// Dead-letters the envelope, then escalates to the fallback (when
    /// `escalate` and one is usable) or fails the session.
    pub(super) fn give_up(
        &self,
        envelope: &Envelope,
        code: DeadLetterReason,
        reason: Reason,
        detail: &str,
        escalate: bool,
    ) -> Plan {
        let mut outputs = Outputs::new(envelope.id);
        // An evaluation's failure is its result, not work left undone.
        if !evaluates(envelope) {
            outputs.dead_letter(code.clone(), detail);
            let id = outputs.next_id();
            outputs.push_event(self.dead_lettered(envelope, &code, detail, id));
        }
        if escalate {
            let next = self.advance(envelope, ContextUpdate::default());
            self.escalate_or_fail(&mut outputs, envelope, next, reason, code, detail);
        } else {
            let ending = Ending::Failed {
                reason,
                detail: detail.to_owned(),
            };
            self.end(&mut outputs, envelope, envelope.clone(), ending);
        }
        Plan {
            outputs: outputs.into_list(),
            settle: Settle::Term,
            failed: true,
        }
    }

    /// Sends `next` to the fallback agent if one exists and has not had this
    /// session yet; otherwise fails the session with `reason` (and dead-letters
    /// it, unless a dead letter is already among the outputs).
    pub(super) fn escalate_or_fail(
        &self,
        outputs: &mut Outputs,
        envelope: &Envelope,
        next: Envelope,
        reason: Reason,
        code: DeadLetterReason,
        detail: &str,
    ) {
        if let Some(fallback) = self.usable_fallback(&next) {
            let mut event = self.event(envelope, outputs.next_id(), EventType::Escalated);
            event.to = Some(fallback.clone());
            event.reason = Some(reason.clone());
            event.detail = Some(detail.to_owned());
            event.path.clone_from(&next.path);
            outputs.push_event(event);
            outputs.push_envelope(fallback.clone(), next, Kind::Handoff, reason);
            return;
        }
        let evaluation = evaluates(envelope);
        if !outputs.has_dead_letter() && !evaluation {
            outputs.dead_letter(code.clone(), detail);
            let id = outputs.next_id();
            outputs.push_event(self.dead_lettered(envelope, &code, detail, id));
        }
        let detail = match self.fallback {
            Some(fallback) => format!("{detail}; fallback {fallback} already handled this session"),
            None => format!("{detail}; no fallback agent is configured"),
        };
        self.end(outputs, envelope, next, Ending::Failed { reason, detail });
        outputs.failed = true;
    }

    fn dead_lettered(
        &self,
        envelope: &Envelope,
        code: &DeadLetterReason,
        detail: &str,
        id: Uuid,
    ) -> Event {
        let mut event = self.event(envelope, id, EventType::DeadLettered);
        event.reason = Some(Reason::from(code));
        event.detail = Some(detail.to_owned());
        event.path.clone_from(&envelope.path);
        event
    }
}

/// Whether `envelope` belongs to an evaluation (`baton eval`): its
/// failures are not dead-lettered (a person's agent, the fallback among
/// them, refuses an evaluation's task itself).
fn evaluates(envelope: &Envelope) -> bool {
    envelope.replay.as_ref().is_some_and(|replay| replay.eval)
}
