//! The envelopes and events of a delegation: children, their `delegated`
//! events, the join's deadline timer, `result` notes, and the envelope a
//! continuation runs on.

use baton_proto::{
    AgentName, Envelope, EventType, Kind, Message, Parent, Reason, ResultStatus, Role, Value,
    derive_id_labelled,
};
use uuid::Uuid;

use super::{Output, Planner};
use baton_author::ContextPolicy;
use baton_author::ContextUpdate;

/// One child of a join, as the planner needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChildSpec<'a> {
    /// The join: the delegating envelope's id.
    pub(crate) join: Uuid,
    /// Which child, counting from 0.
    pub(crate) index: u32,
    pub(crate) agent: &'a AgentName,
    pub(crate) input: &'a str,
    pub(crate) context: ContextPolicy,
    /// The children's delegation depth.
    pub(crate) depth: u32,
    /// In serial mode, the outputs of the children before it.
    pub(crate) earlier: Option<&'a Value>,
    /// A team's asynchronous assignment: its parent says so.
    pub(crate) asynchronous: bool,
}

impl Planner<'_> {
    /// A child's `delegated` event and its envelope. `stored` is the
    /// delegating envelope with the agent's update applied.
    pub(crate) fn child(&self, stored: &Envelope, child: ChildSpec<'_>) -> [Output; 2] {
        let mut envelope = self.advance(stored, ContextUpdate::default());
        self.trim_context(&mut envelope, child.context);
        let id = derive_id_labelled(child.join, "child", child.index);
        let mut envelope = envelope.resent(id, Kind::Delegate, child.agent.clone());
        envelope.reason = Some(Reason::Delegated);
        envelope.suggested_next_action = None;
        envelope.reply_to = Some(self.reply_to.to_owned());
        let mut parent = self.parent(child.join, child.depth, Some(child.index));
        if child.asynchronous {
            parent.assignment = Some("async".to_owned());
        }
        envelope.parent = Some(parent);
        envelope.status = None;
        envelope.output = None;
        let context = &mut envelope.context;
        context.problem = child.input.to_owned();
        context
            .messages
            .push(Message::new(Role::User, child.input).with_name(self.agent.as_str()));
        if let Some(earlier) = child.earlier {
            context.state.insert("results".to_owned(), earlier.clone());
        }
        let id = derive_id_labelled(child.join, "delegated", child.index);
        let mut event = self.event(stored, id, EventType::Delegated);
        event.envelope = Some(child.join);
        event.to = Some(child.agent.clone());
        event.reason = Some(Reason::Delegated);
        event.detail = Some(child.input.to_owned());
        event.path.clone_from(&envelope.path);
        [
            Output::Event(Box::new(event)),
            Output::Envelope {
                to: child.agent.clone(),
                envelope: Box::new(envelope),
            },
        ]
    }

    /// A team member's note that it took an asynchronous assignment: a
    /// `result` with status `progress` to the team's coordinator, sent
    /// before the member runs. Its id comes from the assignment's, so a
    /// redelivery sends it once.
    pub(crate) fn progress(&self, envelope: &Envelope) -> Option<Output> {
        let parent = envelope.parent.as_ref()?;
        if parent.assignment.as_deref() != Some("async") || envelope.kind != Kind::Delegate {
            return None;
        }
        let to = AgentName::new(parent.agent.as_str()).ok()?;
        let id = derive_id_labelled(envelope.id, "progress", 0);
        let mut note = envelope.clone().resent(id, Kind::Result, to.clone());
        note.from = Some(self.agent.clone());
        note.status = Some(ResultStatus::Progress);
        note.reason = Some(Reason::Result);
        note.output = Some(Value::from(format!(
            "took the assignment: {}",
            envelope.context.problem
        )));
        // The coordinator reads only who says what.
        note.context.messages.clear();
        note.context.trace.clear();
        Some(Output::Envelope {
            to,
            envelope: Box::new(note),
        })
    }

    /// The join's deadline timer: a `result` with no child index, sent to
    /// this agent type's own subject and held back until `deadline`.
    pub(crate) fn join_timer(
        &self,
        stored: &Envelope,
        join: Uuid,
        depth: u32,
        deadline: u64,
    ) -> Output {
        let id = derive_id_labelled(join, "deadline", 0);
        let mut envelope = stored.clone().resent(id, Kind::Result, self.agent.clone());
        envelope.status = Some(ResultStatus::Failed);
        envelope.reason = Some(Reason::DeadlineExceeded);
        envelope.deadline = Some(deadline);
        envelope.parent = Some(self.parent(join, depth, None));
        Output::Envelope {
            to: self.agent.clone(),
            envelope: Box::new(envelope),
        }
    }

    /// A `result` event: what became of a child's result.
    pub(crate) fn result_note(&self, result: &Envelope, what: &str) -> Output {
        let id = derive_id_labelled(result.id, "result", 0);
        let mut event = self.event(result, id, EventType::Result);
        event.to.clone_from(&result.to);
        event.reason.clone_from(&result.reason);
        event.detail = Some(match (&result.from, result.status.as_ref()) {
            (Some(from), Some(status)) => format!("{status} result from {from}: {what}"),
            _ => what.to_owned(),
        });
        event.output.clone_from(&result.output);
        event.path.clone_from(&result.path);
        Output::Event(Box::new(event))
    }

    /// The envelope a continuation runs on: the delegating envelope under an
    /// id of its own (`step` counts the async reports before it).
    pub(crate) fn continuation(&self, stored: &Envelope, join: Uuid, step: u32) -> Envelope {
        let mut envelope = stored.clone();
        envelope.id = derive_id_labelled(join, "resume", step);
        // The continuation keeps a journal of its own, under its own id.
        envelope.gate = None;
        envelope.resumed = None;
        envelope
    }

    fn parent(&self, join: Uuid, depth: u32, index: Option<u32>) -> Parent {
        Parent {
            id: join,
            agent: self.agent.clone(),
            depth,
            index,
            assignment: None,
            extra: baton_proto::Map::new(),
        }
    }
}
