//! Steps 2, 4, 5 and 7 of the worker loop as pure functions: given an
//! envelope and what its agent decided, which messages to publish and how to
//! settle the delivery.
//!
//! Keeping them free of I/O means every failure path is unit-tested here;
//! the runtime only carries plans out. Every envelope and event the runtime
//! publishes is built here or in the submodules: [`outputs`] numbers them,
//! [`context`] applies updates and context policies, [`delegation`] builds
//! children, join timers and continuations, and [`crate::guard`] refuses loops.

mod context;
mod delegation;
mod failure;
mod outputs;
pub(crate) mod usage;

use baton_proto::{
    AgentName, DeadLetterReason, Envelope, Event, EventType, Kind, LookupRequest, Reason,
    ResultStatus, Value, derive_id_labelled,
};
use uuid::Uuid;

use crate::guard::loop_violation;
use baton_author::RetryPolicy;
use baton_author::Step;
use baton_author::{AgentError, Complete, Handoff, Wait};
use baton_author::{Need, Target};

pub(crate) use baton_nats::pipeline::plan::{DeadLetter, Output, Plan, Settle};
pub(crate) use delegation::ChildSpec;
use outputs::Outputs;

/// Who is deciding: the worker's identity and routing settings.
#[derive(Debug, Clone)]
pub(crate) struct Planner<'a> {
    pub(crate) agent: &'a AgentName,
    pub(crate) instance: &'a str,
    /// The version this worker runs, written in its events.
    pub(crate) version: Option<&'a baton_proto::Version>,
    pub(crate) fallback: Option<&'a AgentName>,
    pub(crate) retry: RetryPolicy,
    /// This agent's tier: an escalation asks the registry for a higher one.
    pub(crate) tier: u32,
    /// This agent type's subject, where children send their results.
    pub(crate) reply_to: &'a str,
    /// Conversation turns this agent takes part in hand the conversation
    /// back to its entry.
    pub(crate) hand_back: bool,
}

/// What the runtime learned about an outcome's target before planning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Nothing was asked: a named agent type that has workers, an outcome
    /// that needs no lookup, or a worker without a registry.
    NotAsked,
    /// The registry's best candidate for a capability target, an
    /// escalation or a re-routed rejection.
    Candidate(AgentName),
    /// Why there is none: nothing fits, no registry answered, or a named
    /// agent type has no workers.
    Nobody(String),
}

impl From<Result<AgentName, baton_nats::Error>> for Lookup {
    fn from(answer: Result<AgentName, baton_nats::Error>) -> Self {
        match answer {
            Ok(agent) => Self::Candidate(agent),
            Err(why) => Self::Nobody(why.to_string()),
        }
    }
}

/// Labels of the id spaces of per-attempt events.
pub(crate) const ACCEPTED_LABEL: &str = "accepted";
pub(crate) const RETRYING_LABEL: &str = "retrying";

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

    /// Step 2: the plan for an envelope that must not reach the agent: its
    /// deadline has passed, or it names a parent that is not an agent type.
    pub(crate) fn refuse(&self, envelope: &Envelope, now: u64) -> Option<Plan> {
        if let Some(parent) = &envelope.parent {
            if let Err(err) = AgentName::new(parent.agent.as_str()) {
                let detail = format!("`parent.agent` is not an agent type: {err}");
                return Some(self.malformed(envelope, &detail));
            }
        }
        if envelope.kind == Kind::Result {
            return None; // a join's timer carries the join's deadline, checked by the join
        }
        if let Some(detail) = envelope.deadline_out_of_range(now) {
            return Some(self.malformed(envelope, &detail));
        }
        let deadline = envelope.deadline?;
        if now <= deadline {
            return None;
        }
        let detail = format!(
            "deadline passed {} ms before {} took the task",
            now - deadline,
            self.agent
        );
        Some(self.deadline_exceeded(envelope, &detail))
    }

    /// The end of a session whose deadline passed while the agent ran (the
    /// run was cancelled at the deadline, or finished too late): its
    /// outcome is dropped.
    pub(crate) fn overran(&self, envelope: &Envelope, now: u64) -> Option<Plan> {
        let deadline = envelope.deadline?;
        if now < deadline {
            return None;
        }
        let detail = format!(
            "deadline passed while {} ran: the run was cancelled, its outcome dropped",
            self.agent
        );
        Some(self.deadline_exceeded(envelope, &detail))
    }

    fn deadline_exceeded(&self, envelope: &Envelope, detail: &str) -> Plan {
        self.give_up(
            envelope,
            DeadLetterReason::DeadlineExceeded,
            Reason::DeadlineExceeded,
            detail,
            false,
        )
    }

    /// The registry lookup a step needs before it can be planned, if any:
    /// a capability target, an escalation, or a rejection. The session's path
    /// and this agent are excluded, so work never goes back to an agent that had it.
    pub(crate) fn lookup_request(
        &self,
        envelope: &Envelope,
        result: &Result<Step, AgentError>,
    ) -> Option<LookupRequest> {
        let need = match result {
            Ok(Step::Handoff(handoff)) => match &handoff.target {
                Target::Capabilities(need) => need.clone(),
                Target::Escalate(need) => need.clone().above(self.tier),
                Target::Agent(_) | Target::Fallback => return None,
            },
            Err(AgentError::Reject(_)) => Need::capabilities(envelope.requires.iter().cloned()),
            _ => return None,
        };
        let mut exclude: Vec<AgentName> =
            envelope.path.iter().map(|hop| hop.agent.clone()).collect();
        exclude.push(self.agent.clone());
        exclude.sort();
        exclude.dedup();
        let mut request = need.lookup(exclude);
        request.query = Some(envelope.context.initial_query.clone());
        Some(request)
    }

    /// Steps 4, 5 and 7: the plan for what the agent returned on delivery
    /// `attempt`, with the registry's answer to [`Planner::lookup_request`]
    /// when one was made.
    ///
    /// The context of `envelope` moves into the envelope or event that
    /// carries it on (when one does): read it before.
    pub(crate) fn plan(
        &self,
        envelope: &mut Envelope,
        attempt: u32,
        result: Result<Step, AgentError>,
        found: Lookup,
    ) -> Plan {
        match result {
            Ok(Step::Complete(Complete { output, update })) => {
                let next = self.advance_taking(envelope, update);
                let mut outputs = Outputs::new(envelope.id);
                self.end(&mut outputs, envelope, next, Ending::Completed(output));
                outputs.into_plan()
            }
            Ok(Step::Wait(wait)) => self.wait(envelope, wait),
            Ok(Step::Handoff(handoff)) => self.handoff(envelope, handoff, found),
            Err(AgentError::RetryAfter(detail, after)) if attempt < self.retry.max_attempts => {
                let delay = self.retry.backoff(attempt).max(after);
                self.retry_later(envelope, attempt, &detail, delay)
            }
            Err(AgentError::Retryable(detail)) if attempt < self.retry.max_attempts => {
                self.retry_later(envelope, attempt, &detail, self.retry.backoff(attempt))
            }
            Err(AgentError::Retryable(detail) | AgentError::RetryAfter(detail, _)) => {
                let detail = format!("gave up after {attempt} attempts: {detail}");
                let code = DeadLetterReason::MaxAttempts;
                self.give_up(envelope, code, Reason::MaxAttempts, &detail, true)
            }
            Err(AgentError::Fatal(detail)) => self.give_up(
                envelope,
                DeadLetterReason::Fatal,
                Reason::Fatal,
                &detail,
                true,
            ),
            Err(AgentError::Reject(detail)) => self.rejected(envelope, &detail, found),
            Err(AgentError::Fail(reason, detail)) => {
                self.give_up(envelope, DeadLetterReason::Fatal, reason, &detail, false)
            }
        }
    }

    /// A `waiting` event that keeps what the agent said: `detail` is its last
    /// message, `output` the whole update.
    fn wait(&self, envelope: &Envelope, wait: Wait) -> Plan {
        let mut outputs = Outputs::new(envelope.id);
        let mut event = self.event(envelope, outputs.next_id(), EventType::Waiting);
        event.reason.clone_from(&envelope.reason);
        event.path.clone_from(&envelope.path);
        // What the session asked, for the outcome the registry learns from.
        event.context = Some(Box::new(envelope.context.clone()));
        event.detail = wait.update.messages.last().map(|m| m.content.clone());
        if !wait.update.is_empty() {
            event.output = Some(context::update_value(&wait.update));
        }
        outputs.push_event(event);
        outputs.into_plan()
    }

    fn handoff(&self, envelope: &mut Envelope, handoff: Handoff, found: Lookup) -> Plan {
        let Handoff {
            target,
            reason,
            suggested_next_action,
            update,
            options,
        } = handoff;
        let mut next = self.advance_taking(envelope, update);
        let envelope = &*envelope;
        next.suggested_next_action = suggested_next_action;
        self.trim_context(&mut next, options.context);
        let visits = options.max_visits;
        let mut outputs = Outputs::new(envelope.id);
        match (target, found) {
            (Target::Agent(_), Lookup::Nobody(why)) => {
                // No worker serves the named agent type.
                let detail = format!("{} handed off, but {why}", self.agent);
                let code = DeadLetterReason::NoRoute;
                self.escalate_or_fail(&mut outputs, envelope, next, Reason::NoRoute, code, &detail);
            }
            (Target::Agent(to), _) => {
                let route = Forward::new(to, reason, EventType::Handoff, visits);
                self.forward(&mut outputs, envelope, next, route);
            }
            (Target::Capabilities(need), Lookup::Candidate(to)) => {
                next.requires = need.requires;
                next.domains = need.domains;
                let route = Forward::new(to, reason, EventType::Handoff, visits);
                self.forward(&mut outputs, envelope, next, route);
            }
            (Target::Capabilities(need), found) => {
                let why = no_candidate(&need, found);
                next.requires = need.requires;
                // `no_match` when the fallback takes it; `no_route` when nobody can.
                let reason = if self.usable_fallback(&next).is_some() {
                    Reason::NoMatch
                } else {
                    Reason::NoRoute
                };
                let detail = format!("{} handed off, but {why}", self.agent);
                let code = DeadLetterReason::NoRoute;
                self.escalate_or_fail(&mut outputs, envelope, next, reason, code, &detail);
            }
            (Target::Escalate(_), Lookup::Candidate(to)) => {
                let route = Forward::new(to, reason, EventType::Escalated, visits);
                self.forward(&mut outputs, envelope, next, route);
            }
            (Target::Escalate(_) | Target::Fallback, _) => {
                let detail = format!("{} escalated: {reason}", self.agent);
                let code = DeadLetterReason::NoRoute;
                self.escalate_or_fail(&mut outputs, envelope, next, reason, code, &detail);
            }
        }
        outputs.into_plan()
    }

    /// Sends `next` on `route` unless the loop guard refuses it, in which
    /// case it emits `loop_detected` and escalates or fails instead.
    fn forward(&self, outputs: &mut Outputs, envelope: &Envelope, next: Envelope, route: Forward) {
        let Forward {
            to,
            reason,
            kind,
            max_visits,
        } = route;
        if let Some(why) = loop_violation(&next, &to, max_visits) {
            let mut event = self.event(envelope, outputs.next_id(), EventType::LoopDetected);
            event.to = Some(to.clone());
            event.reason = Some(Reason::LoopDetected);
            event.detail = Some(why.clone());
            event.path.clone_from(&next.path);
            outputs.push_event(event);
            let code = DeadLetterReason::NoRoute;
            self.escalate_or_fail(outputs, envelope, next, Reason::LoopDetected, code, &why);
            return;
        }
        let mut event = self.event(envelope, outputs.next_id(), kind);
        event.to = Some(to.clone());
        event.reason = Some(reason.clone());
        event.path.clone_from(&next.path);
        outputs.push_event(event);
        outputs.push_envelope(to, next, Kind::Handoff, reason);
    }

    /// Ends a session, or a delegated branch of one. The root of a session
    /// emits its terminal event; a delegated child (its envelope has a
    /// `parent`) sends a `result` envelope to the parent instead.
    fn end(&self, outputs: &mut Outputs, envelope: &Envelope, next: Envelope, ending: Ending) {
        let parent = envelope
            .parent
            .as_ref()
            .and_then(|parent| AgentName::new(parent.agent.as_str()).ok());
        let Some(to) = parent else {
            // The root (a parent that is not an agent type was refused before the agent ran).
            let (kind, output, reason, detail) = match ending {
                Ending::Completed(output) => (EventType::Completed, Some(output), None, None),
                Ending::Failed { reason, detail } => {
                    (EventType::Failed, None, Some(reason), Some(detail))
                }
            };
            // A deadline ends a session once: the router's deadline timer
            // uses the same id for it.
            let id = match (&reason, envelope.deadline) {
                (Some(Reason::DeadlineExceeded), Some(deadline)) => {
                    baton_proto::deadline_event_id(envelope.session, deadline)
                }
                _ => outputs.next_id(),
            };
            let mut event = self.event(envelope, id, kind);
            event.output = output;
            event.reason = reason;
            event.detail = detail;
            event.path = next.path;
            event.context = Some(Box::new(next.context));
            event.conversation = next.conversation;
            event.versions = next.versions;
            outputs.push_event(event);
            return;
        };
        let mut result = next;
        let (status, output, reason) = match ending {
            Ending::Completed(output) => (ResultStatus::Completed, output, Reason::Result),
            Ending::Failed { reason, detail } => {
                (ResultStatus::Failed, Value::from(detail), reason)
            }
        };
        result.status = Some(status);
        result.output = Some(output);
        result.reply_to = None;
        outputs.push_envelope(to, result, Kind::Result, reason);
    }

    /// The fallback agent, unless it already had the session.
    fn usable_fallback(&self, next: &Envelope) -> Option<&AgentName> {
        self.fallback
            .filter(|fallback| !next.visited(fallback.as_str()))
    }

    /// An event of this agent about `envelope`.
    pub(crate) fn event(&self, envelope: &Envelope, id: Uuid, kind: EventType) -> Event {
        let mut event = Event::new(id, envelope.session, kind);
        event.agent = Some(self.agent.clone());
        event.instance = Some(self.instance.to_owned());
        event.version = self.version.cloned();
        event.envelope = Some(envelope.id);
        // Every event of a replay says so: none of it is live.
        event.replay_of = envelope.replay.as_ref().map(|replay| replay.of);
        event
    }
}

/// A route an envelope takes: to whom, why, announced by which event, and
/// the target's visit budget.
struct Forward {
    to: AgentName,
    reason: Reason,
    kind: EventType,
    max_visits: Option<u32>,
}

impl Forward {
    fn new(to: AgentName, reason: Reason, kind: EventType, max_visits: Option<u32>) -> Self {
        Self {
            to,
            reason,
            kind,
            max_visits,
        }
    }
}

/// How a session, or a delegated branch, ends.
enum Ending {
    Completed(Value),
    Failed { reason: Reason, detail: String },
}

/// Why the registry gave no agent for `need`.
fn no_candidate(need: &Need, found: Lookup) -> String {
    match found {
        Lookup::Nobody(why) => why,
        Lookup::Candidate(_) | Lookup::NotAsked => format!(
            "no agent was looked up for capabilities [{}]: the worker has no registry",
            need.requires.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests;
