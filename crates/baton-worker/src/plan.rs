//! The routing decision, as a pure function: given an envelope and what the
//! agent decided, which messages to publish and how to settle the delivery.
//!
//! Keeping it free of I/O means every failure path is unit-tested here, and
//! the loop in `worker.rs` only executes plans.

use std::time::Duration;

use baton_proto::{
    AgentName, DeadLetterReason, Envelope, Event, EventType, Hop, Kind, LookupRequest,
    PROTOCOL_VERSION, Reason, ResultStatus, Step, Value, derive_id, derive_id_labelled, now_ms,
};
use uuid::Uuid;

use crate::agent::{AgentError, ContextPolicy, ContextUpdate, Need, Outcome, RetryPolicy, Target};

/// How the incoming delivery is settled once every output is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settle {
    /// Done: confirmed ack.
    Ack,
    /// Deliver again after the delay.
    Nak(Duration),
    /// Never deliver again (it was dead-lettered).
    Term,
}

/// One message to publish, with its deterministic id.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Output {
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
pub(crate) struct DeadLetter {
    pub(crate) id: Uuid,
    pub(crate) reason: DeadLetterReason,
    pub(crate) detail: String,
}

/// What to do with one delivery.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    pub(crate) outputs: Vec<Output>,
    pub(crate) settle: Settle,
    /// Whether the task failed here (for the worker's counters).
    pub(crate) failed: bool,
}

/// Who is deciding: the worker's identity and routing settings.
#[derive(Debug, Clone)]
pub(crate) struct Planner<'a> {
    pub(crate) agent: &'a AgentName,
    pub(crate) instance: &'a str,
    pub(crate) fallback: Option<&'a AgentName>,
    pub(crate) retry: RetryPolicy,
    /// This agent's tier: an escalation asks the registry for a higher one.
    pub(crate) tier: u32,
}

/// The registry's answer for an outcome that needed a lookup: the best
/// candidate, or why there is none (nothing fits, or no registry answered).
pub(crate) type Found = Option<Result<AgentName, String>>;

/// Labels of the id spaces of per-attempt events.
pub(crate) const ACCEPTED_LABEL: &str = "accepted";
const RETRYING_LABEL: &str = "retrying";

impl Planner<'_> {
    /// The `accepted` event of delivery `attempt`.
    pub(crate) fn accepted(&self, envelope: &Envelope, attempt: u32) -> Event {
        let mut event = self.event(
            envelope,
            derive_id_labelled(envelope.id, ACCEPTED_LABEL, attempt),
            EventType::Accepted,
        );
        event.attempt = Some(attempt);
        event.reason.clone_from(&envelope.reason);
        event
    }

    /// The plan for an envelope whose deadline has passed.
    pub(crate) fn deadline_exceeded(&self, envelope: &Envelope, now: u64) -> Option<Plan> {
        let deadline = envelope.deadline?;
        if now <= deadline {
            return None;
        }
        let detail = format!(
            "deadline passed {} ms before {} took the task",
            now - deadline,
            self.agent
        );
        let mut outputs = Outputs::new(envelope.id);
        outputs.dead_letter(DeadLetterReason::DeadlineExceeded, &detail);
        {
            let id = outputs.next_id();
            outputs.push_event(self.dead_lettered(
                envelope,
                DeadLetterReason::DeadlineExceeded,
                &detail,
                id,
            ));
        }
        self.end(
            &mut outputs,
            envelope,
            envelope.clone(),
            Ending::Failed {
                reason: Reason::DeadlineExceeded,
                detail,
            },
        );
        Some(Plan {
            outputs: outputs.list,
            settle: Settle::Term,
            failed: true,
        })
    }

    /// The registry lookup an outcome needs before it can be planned, if any:
    /// a capability target, an escalation, or a rejection. The session's path
    /// and this agent are excluded, so work never goes back to an agent that had it.
    pub(crate) fn lookup_request(
        &self,
        envelope: &Envelope,
        result: &Result<Outcome, AgentError>,
    ) -> Option<LookupRequest> {
        let need = match result {
            Ok(Outcome::Handoff {
                target: Target::Capabilities(need),
                ..
            }) => need.clone(),
            Ok(Outcome::Handoff {
                target: Target::Escalate(need),
                ..
            }) => need.clone().above(self.tier),
            Err(AgentError::Reject(_)) => Need::capabilities(envelope.requires.iter().cloned()),
            _ => return None,
        };
        let mut exclude: Vec<String> = envelope.path.iter().map(|hop| hop.agent.clone()).collect();
        exclude.push(self.agent.to_string());
        exclude.sort();
        exclude.dedup();
        Some(need.lookup(exclude))
    }

    /// The plan for what the agent returned on delivery `attempt`, when no
    /// registry lookup was made.
    #[cfg(test)]
    pub(crate) fn plan(
        &self,
        envelope: &Envelope,
        attempt: u32,
        result: Result<Outcome, AgentError>,
    ) -> Plan {
        self.plan_routed(envelope, attempt, result, None)
    }

    /// The plan for what the agent returned on delivery `attempt`, with the
    /// registry's answer to [`Planner::lookup_request`] when one was made.
    pub(crate) fn plan_routed(
        &self,
        envelope: &Envelope,
        attempt: u32,
        result: Result<Outcome, AgentError>,
        found: Found,
    ) -> Plan {
        match result {
            Ok(Outcome::Complete { output, update }) => self.complete(envelope, output, update),
            Ok(Outcome::Delegate { .. }) => self.give_up(
                envelope,
                DeadLetterReason::Fatal,
                Reason::parse("fatal"),
                "a delegation must be started by the worker, not planned",
            ),
            Ok(Outcome::Wait { .. }) => {
                let mut outputs = Outputs::new(envelope.id);
                let mut event = self.event(envelope, outputs.next_id(), EventType::Waiting);
                event.reason.clone_from(&envelope.reason);
                event.path.clone_from(&envelope.path);
                outputs.push_event(event);
                outputs.into_plan()
            }
            Ok(Outcome::Handoff {
                target,
                reason,
                suggested_next_action,
                update,
                options,
            }) => {
                let mut next = self.advance(envelope, update);
                next.suggested_next_action = suggested_next_action;
                self.trim_context(&mut next, options.context);
                let visits = options.max_visits;
                match (target, found) {
                    (Target::Agent(name), _) => {
                        self.handoff(envelope, next, &name, reason, EventType::Handoff, visits)
                    }
                    (Target::Capabilities(need), Some(Ok(agent))) => {
                        next.requires = need.requires;
                        let to = agent.as_str();
                        self.handoff(envelope, next, to, reason, EventType::Handoff, visits)
                    }
                    (Target::Capabilities(need), found) => {
                        let why = no_candidate(&need, found);
                        next.requires = need.requires;
                        // `no_match` when the fallback takes it; `no_route` when nobody can.
                        let reason = if self.usable_fallback(&next).is_some() {
                            Reason::NoMatch
                        } else {
                            Reason::parse("no_route")
                        };
                        let detail = format!("{} handed off, but {why}", self.agent);
                        self.to_fallback(envelope, next, reason, &detail)
                    }
                    (Target::Escalate(_), Some(Ok(agent))) => {
                        let to = agent.as_str();
                        self.handoff(envelope, next, to, reason, EventType::Escalated, visits)
                    }
                    (Target::Escalate(_) | Target::Fallback, _) => {
                        let detail = format!("{} escalated: {reason}", self.agent);
                        self.to_fallback(envelope, next, reason, &detail)
                    }
                }
            }
            Err(AgentError::RetryAfter(detail, after)) if attempt < self.retry.max_attempts => self
                .retry_later(
                    envelope,
                    attempt,
                    &detail,
                    self.retry.backoff(attempt).max(after),
                ),
            Err(AgentError::Retryable(detail)) if attempt < self.retry.max_attempts => {
                self.retry_later(envelope, attempt, &detail, self.retry.backoff(attempt))
            }
            Err(AgentError::Retryable(detail) | AgentError::RetryAfter(detail, _)) => {
                let detail = format!("gave up after {attempt} attempts: {detail}");
                self.give_up(
                    envelope,
                    DeadLetterReason::MaxAttempts,
                    Reason::MaxAttempts,
                    &detail,
                )
            }
            Err(AgentError::Fatal(detail)) => self.give_up(
                envelope,
                DeadLetterReason::Fatal,
                Reason::parse("fatal"),
                &detail,
            ),
            Err(AgentError::Reject(detail)) => {
                let mut outputs = Outputs::new(envelope.id);
                let mut rejected = self.event(envelope, outputs.next_id(), EventType::Rejected);
                rejected.reason = Some(Reason::Rejected);
                rejected.detail = Some(detail.clone());
                outputs.push_event(rejected);
                let next = self.advance(envelope, ContextUpdate::default());
                if let Some(Ok(agent)) = found {
                    // Re-routed through the registry, this agent excluded.
                    self.forward(
                        &mut outputs,
                        envelope,
                        next,
                        &agent,
                        Reason::Rejected,
                        EventType::Handoff,
                        None,
                    );
                    return outputs.into_plan();
                }
                let detail = format!("{} rejected the task: {detail}", self.agent);
                self.escalate_or_fail(
                    &mut outputs,
                    envelope,
                    next,
                    Reason::Rejected,
                    DeadLetterReason::NoRoute,
                    &detail,
                );
                outputs.into_plan()
            }
        }
    }

    /// Nak with `delay`, announced by a `retrying` event.
    fn retry_later(
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

    /// Applies a route's context policy to the outgoing envelope; what it
    /// removed is recorded in the trace, as a count and a digest.
    pub(crate) fn trim_context(&self, next: &mut Envelope, policy: ContextPolicy) {
        let messages = &mut next.context.messages;
        let keep = policy.keeps(messages.len());
        let removed: Vec<_> = messages.drain(..messages.len() - keep).collect();
        if removed.is_empty() {
            return;
        }
        let mut step = Step::new(
            self.agent.as_str(),
            "context_trimmed",
            format!(
                "{} earlier message(s) not passed on (policy {policy})",
                removed.len()
            ),
        );
        step.details = Value::Map(vec![
            ("removed".into(), Value::from(removed.len())),
            ("kept".into(), Value::from(keep)),
            ("policy".into(), Value::from(policy.to_string())),
            ("digest".into(), Value::from(digest(&removed))),
        ]);
        next.context.trace.push(step);
    }

    fn complete(&self, envelope: &Envelope, output: Value, update: ContextUpdate) -> Plan {
        let next = self.advance(envelope, update);
        let mut outputs = Outputs::new(envelope.id);
        self.end(&mut outputs, envelope, next, Ending::Completed(output));
        Plan {
            outputs: outputs.list,
            settle: Settle::Ack,
            failed: false,
        }
    }

    /// Hands `next` to `target`, announced by an event of type `kind`
    /// (`handoff`, or `escalated` for a registry-chosen escalation).
    fn handoff(
        &self,
        envelope: &Envelope,
        next: Envelope,
        target: &str,
        reason: Reason,
        kind: EventType,
        max_visits: Option<u32>,
    ) -> Plan {
        let target = match AgentName::new(target) {
            Ok(target) => target,
            Err(err) => {
                let detail = format!("{} handed off to an invalid agent type: {err}", self.agent);
                return self.give_up(
                    envelope,
                    DeadLetterReason::NoRoute,
                    Reason::parse("no_route"),
                    &detail,
                );
            }
        };
        let mut outputs = Outputs::new(envelope.id);
        self.forward(
            &mut outputs,
            envelope,
            next,
            &target,
            reason,
            kind,
            max_visits,
        );
        outputs.into_plan()
    }

    /// Sends `next` to `target` unless the loop guard refuses the route, in
    /// which case it emits `loop_detected` and escalates or fails instead.
    #[allow(clippy::too_many_arguments)] // one call per kind of route; a struct would only rename them
    fn forward(
        &self,
        outputs: &mut Outputs,
        envelope: &Envelope,
        next: Envelope,
        target: &AgentName,
        reason: Reason,
        kind: EventType,
        max_visits: Option<u32>,
    ) {
        if let Some(why) = loop_violation(&next, target, max_visits) {
            let mut event = self.event(envelope, outputs.next_id(), EventType::LoopDetected);
            event.to = Some(target.to_string());
            event.reason = Some(Reason::LoopDetected);
            event.detail = Some(why.clone());
            event.path.clone_from(&next.path);
            outputs.push_event(event);
            self.escalate_or_fail(
                outputs,
                envelope,
                next,
                Reason::LoopDetected,
                DeadLetterReason::NoRoute,
                &why,
            );
            return;
        }
        let mut event = self.event(envelope, outputs.next_id(), kind);
        event.to = Some(target.to_string());
        event.reason = Some(reason.clone());
        event.path.clone_from(&next.path);
        outputs.push_event(event);
        outputs.push_envelope(target.clone(), next, Kind::Handoff, reason);
    }

    /// Dead-letters the envelope, then escalates to the fallback or fails the session.
    fn give_up(
        &self,
        envelope: &Envelope,
        code: DeadLetterReason,
        reason: Reason,
        detail: &str,
    ) -> Plan {
        let mut outputs = Outputs::new(envelope.id);
        outputs.dead_letter(code.clone(), detail);
        {
            let id = outputs.next_id();
            outputs.push_event(self.dead_lettered(envelope, code.clone(), detail, id));
        }
        let next = self.advance(envelope, ContextUpdate::default());
        self.escalate_or_fail(&mut outputs, envelope, next, reason, code, detail);
        let mut plan = outputs.into_plan();
        plan.settle = Settle::Term;
        plan.failed = true;
        plan
    }

    /// The plan that sends `next` to the fallback agent, or fails the session
    /// with `no_route` when there is none.
    fn to_fallback(
        &self,
        envelope: &Envelope,
        next: Envelope,
        reason: Reason,
        detail: &str,
    ) -> Plan {
        let mut outputs = Outputs::new(envelope.id);
        self.escalate_or_fail(
            &mut outputs,
            envelope,
            next,
            reason,
            DeadLetterReason::NoRoute,
            detail,
        );
        outputs.into_plan()
    }

    /// Sends `next` to the fallback agent if one exists and has not had this
    /// session yet; otherwise fails the session with `reason` (and dead-letters
    /// it, unless a dead letter is already among the outputs).
    fn escalate_or_fail(
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
            event.to = Some(fallback.to_string());
            event.reason = Some(reason.clone());
            event.detail = Some(detail.to_owned());
            event.path.clone_from(&next.path);
            outputs.push_event(event);
            outputs.push_envelope(fallback.clone(), next, Kind::Handoff, reason);
            return;
        }
        if !outputs.has_dead_letter() {
            outputs.dead_letter(code.clone(), detail);
            {
                let id = outputs.next_id();
                outputs.push_event(self.dead_lettered(envelope, code, detail, id));
            }
        }
        let detail = match self.fallback {
            Some(fallback) => format!("{detail}; fallback {fallback} already handled this session"),
            None => format!("{detail}; no fallback agent is configured"),
        };
        self.end(outputs, envelope, next, Ending::Failed { reason, detail });
        outputs.failed = true;
    }

    /// Ends a session, or a delegated branch of one. The root of a session
    /// emits its terminal event; a delegated child (its envelope has a
    /// `parent`) sends a `result` envelope to the parent instead.
    fn end(&self, outputs: &mut Outputs, envelope: &Envelope, next: Envelope, ending: Ending) {
        let Some(parent) = envelope.parent.clone() else {
            let (kind, output, reason, detail) = match ending {
                Ending::Completed(output) => (EventType::Completed, Some(output), None, None),
                Ending::Failed { reason, detail } => {
                    (EventType::Failed, None, Some(reason), Some(detail))
                }
            };
            let mut event = self.event(envelope, outputs.next_id(), kind);
            event.output = output;
            event.reason = reason;
            event.detail = detail;
            event.path = next.path;
            outputs.push_event(event);
            return;
        };
        let Ok(to) = AgentName::new(parent.agent.as_str()) else {
            tracing::warn!(parent = %parent.agent, "a delegated child names an invalid parent; its result cannot be sent");
            return;
        };
        let mut result = next;
        let (status, output, reason) = match ending {
            Ending::Completed(output) => (ResultStatus::Completed, output, None),
            Ending::Failed { reason, detail } => {
                (ResultStatus::Failed, Value::from(detail), Some(reason))
            }
        };
        result.status = Some(status);
        result.output = Some(output);
        result.reply_to = None;
        outputs.push_envelope(
            to,
            result,
            Kind::Result,
            reason.unwrap_or_else(|| Reason::parse("result")),
        );
    }

    /// The fallback agent, unless it already had the session.
    fn usable_fallback(&self, next: &Envelope) -> Option<&AgentName> {
        self.fallback
            .filter(|fallback| !next.visited(fallback.as_str()))
    }

    fn dead_lettered(
        &self,
        envelope: &Envelope,
        code: DeadLetterReason,
        detail: &str,
        id: Uuid,
    ) -> Event {
        let mut event = self.event(envelope, id, EventType::DeadLettered);
        event.reason = Some(Reason::parse(code.as_str()));
        event.detail = Some(detail.to_owned());
        event.path.clone_from(&envelope.path);
        event
    }

    /// The envelope as it leaves this agent: this hop on the path, the update applied.
    pub(crate) fn advance(&self, envelope: &Envelope, update: ContextUpdate) -> Envelope {
        let mut next = envelope.clone();
        next.path.push(Hop::new(
            self.agent.as_str(),
            self.instance,
            envelope.reason.clone(),
        ));
        next.from = Some(self.agent.to_string());
        let context = &mut next.context;
        for mut message in update.messages {
            if message.name.is_none() && message.role == baton_proto::Role::Agent {
                message.name = Some(self.agent.to_string());
            }
            context.messages.push(message);
        }
        context.variables.extend(update.variables);
        for mut step in update.trace {
            if step.agent.is_empty() {
                step.agent = self.agent.to_string();
            }
            context.trace.push(step);
        }
        context.state.extend(update.state);
        if let Some(problem) = update.problem {
            context.problem = problem;
        }
        next
    }

    pub(crate) fn event(&self, envelope: &Envelope, id: Uuid, kind: EventType) -> Event {
        let mut event = Event::new(id, envelope.session, kind);
        event.agent = Some(self.agent.to_string());
        event.instance = Some(self.instance.to_owned());
        event.envelope = Some(envelope.id);
        event
    }
}

/// How a session, or a delegated branch, ends.
enum Ending {
    Completed(Value),
    Failed { reason: Reason, detail: String },
}

/// Why the registry gave no agent for `need`.
fn no_candidate(need: &Need, found: Found) -> String {
    match found {
        Some(Err(why)) => why,
        Some(Ok(_)) | None => format!(
            "no agent was looked up for capabilities [{}]: the worker has no registry",
            need.requires.join(", ")
        ),
    }
}

/// Why handing `next` to `target` would loop, if it would. `max_visits` is
/// the route's visit budget for the target (once when unset).
pub(crate) fn loop_violation(
    next: &Envelope,
    target: &AgentName,
    max_visits: Option<u32>,
) -> Option<String> {
    let path = next
        .path
        .iter()
        .map(|hop| hop.agent.as_str())
        .collect::<Vec<_>>()
        .join(" -> ");
    let visits = next
        .path
        .iter()
        .filter(|hop| hop.agent == target.as_str())
        .count();
    match max_visits {
        None if visits > 0 => {
            return Some(format!(
                "{target} already handled this session (path {path})"
            ));
        }
        Some(budget) if visits >= budget as usize => {
            return Some(format!(
                "{target} already had {visits} of its {budget} visits (path {path})"
            ));
        }
        _ => {}
    }
    let budget = next.hop_budget();
    if next.path.len() >= budget as usize {
        return Some(format!("hop budget of {budget} spent (path {path})"));
    }
    None
}

/// A digest of messages a context policy removed: SHA-256 over each
/// message's role, name and content, each followed by a NUL byte, in order.
fn digest(messages: &[baton_proto::Message]) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for message in messages {
        for part in [
            message.role.as_str(),
            message.name.as_deref().unwrap_or(""),
            message.content.as_str(),
        ] {
            hasher.update(part.as_bytes());
            hasher.update([0]);
        }
    }
    let hex: String = hasher
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// Outputs under construction, numbered in order for deterministic ids.
struct Outputs {
    parent: Uuid,
    list: Vec<Output>,
    index: u32,
    failed: bool,
}

impl Outputs {
    fn new(parent: Uuid) -> Self {
        Self {
            parent,
            list: Vec::new(),
            index: 0,
            failed: false,
        }
    }

    fn next_id(&mut self) -> Uuid {
        let id = derive_id(self.parent, self.index);
        self.index += 1;
        id
    }

    fn push_event(&mut self, event: Event) {
        self.list.push(Output::Event(Box::new(event)));
    }

    fn push_envelope(&mut self, to: AgentName, mut envelope: Envelope, kind: Kind, reason: Reason) {
        envelope.v = PROTOCOL_VERSION;
        envelope.id = self.next_id();
        envelope.kind = kind;
        envelope.to = Some(to.to_string());
        envelope.reason = Some(reason);
        envelope.created_at = now_ms();
        self.list.push(Output::Envelope {
            to,
            envelope: Box::new(envelope),
        });
    }

    fn dead_letter(&mut self, reason: DeadLetterReason, detail: &str) {
        let id = self.next_id();
        self.list.push(Output::DeadLetter(DeadLetter {
            id,
            reason,
            detail: detail.to_owned(),
        }));
    }

    fn has_dead_letter(&self) -> bool {
        self.list
            .iter()
            .any(|output| matches!(output, Output::DeadLetter(_)))
    }

    fn into_plan(self) -> Plan {
        Plan {
            outputs: self.list,
            settle: Settle::Ack,
            failed: self.failed,
        }
    }
}

#[cfg(test)]
mod tests;
