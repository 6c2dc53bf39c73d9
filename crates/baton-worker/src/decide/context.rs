//! What happens to the context as an envelope leaves an agent: the agent's
//! update is applied, this hop joins the path, and the route's context
//! policy trims the conversation.

use baton_proto::{
    Envelope, EventType, Hop, Message, Role, Start, Step, Value, derive_id_labelled,
};

use super::{Output, Planner};
use baton_author::ContextPolicy;
use baton_author::ContextUpdate;

impl Planner<'_> {
    /// The `started` event of a replayable session's first task: the task
    /// as it arrived, so that the session can be replayed. Its id comes
    /// from the session, so every attempt (and a re-opened session) stores
    /// one.
    pub(crate) fn started(&self, envelope: &Envelope) -> Option<Output> {
        let start = Start::of(envelope)?;
        let id = derive_id_labelled(envelope.session, "started", 0);
        let mut event = self.event(envelope, id, EventType::Started);
        event.context = Some(Box::new(envelope.context.clone()));
        event.output = Some(start.to_value());
        Some(Output::Event(Box::new(event)))
    }

    /// The envelope as it leaves this agent: this hop on the path, the update applied.
    pub(crate) fn advance(&self, envelope: &Envelope, update: ContextUpdate) -> Envelope {
        self.moved_on(envelope.clone(), update)
    }

    /// As [`Planner::advance`], but the context (the bulk of an envelope)
    /// is moved out of `envelope` into the result, not copied: what stays
    /// behind has every other field, and an empty context.
    pub(crate) fn advance_taking(
        &self,
        envelope: &mut Envelope,
        update: ContextUpdate,
    ) -> Envelope {
        let context = std::mem::take(&mut envelope.context);
        let mut next = envelope.clone();
        next.context = context;
        self.moved_on(next, update)
    }

    /// `next`, a copy of the envelope this agent ran on, as it leaves it.
    fn moved_on(&self, mut next: Envelope, update: ContextUpdate) -> Envelope {
        // A waiting call and a resumed journal belong to this hop alone.
        next.gate = None;
        next.resumed = None;
        let mut hop = Hop::new(self.agent.clone(), self.instance, next.reason.clone());
        hop.requires.clone_from(&next.requires);
        hop.domains.clone_from(&next.domains);
        next.path.push(hop);
        next.from = Some(self.agent.clone());
        let context = &mut next.context;
        if let Some(compacted) = update.compaction {
            compacted.apply_to(&mut context.messages);
        }
        for mut message in update.messages {
            if message.name.is_none() && message.role == Role::Agent {
                message.name = Some(self.agent.to_string());
            }
            context.messages.push(message);
        }
        context.variables.extend(update.variables);
        for mut step in update.trace {
            if step.agent.is_none() {
                step.agent = Some(self.agent.clone());
            }
            context.trace.push(step);
        }
        context.state.extend(update.state);
        if let Some(problem) = update.problem {
            context.problem = problem;
        }
        if let Some(turn) = next.conversation.as_mut() {
            turn.hand_back |= update.hand_back || self.hand_back;
        }
        next
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
            self.agent.clone(),
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
}

/// An update as one value, its empty parts left out: what a `waiting` event
/// carries so watchers see what the agent said.
pub(super) fn update_value(update: &ContextUpdate) -> Value {
    fn value<T: serde::Serialize>(part: &T) -> Value {
        rmpv::ext::to_value(part).unwrap_or(Value::Nil)
    }
    let mut entries = Vec::new();
    if !update.messages.is_empty() {
        entries.push(("messages".into(), value(&update.messages)));
    }
    if !update.variables.is_empty() {
        entries.push(("variables".into(), value(&update.variables)));
    }
    if !update.trace.is_empty() {
        entries.push(("trace".into(), value(&update.trace)));
    }
    if !update.state.is_empty() {
        entries.push(("state".into(), value(&update.state)));
    }
    if let Some(problem) = &update.problem {
        entries.push(("problem".into(), Value::from(problem.as_str())));
    }
    Value::Map(entries)
}

/// A digest of messages a context policy removed: SHA-256 over each
/// message's role, name and content, each followed by a NUL byte, in order.
fn digest(messages: &[Message]) -> String {
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
    format!("sha256:{}", baton_proto::hex(&hasher.finalize()))
}
