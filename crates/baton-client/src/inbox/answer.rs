//! What answering a waiting task publishes.

use baton_nats::pipeline::address::{Sending, addressed};
use baton_nats::state::rollouts::Rollouts;
use baton_proto::{
    AgentName, Event, EventType, Hop, Kind, Message, Reason, Role, Value, derive_id_labelled,
};

use super::{Inbox, InboxEntry, Publication, Reply, encode};
use baton_nats::{Error, ErrorKind};

impl Inbox {
    /// What answering `entry` publishes: the event that tells the session's
    /// watchers, and the messages (subject, id, bytes) to send, in order.
    ///
    /// A session sent on is addressed as every sender addresses one: pinned
    /// to the version `rollouts` choose for a versioned type, and sent to
    /// that version's subject.
    pub(super) fn answer(
        &self,
        entry: &InboxEntry,
        (text, reply, person): (&str, Reply, &str),
        rollouts: &Rollouts,
    ) -> Result<(Event, Vec<Publication>), Error> {
        let envelope = &entry.envelope;
        let agent = entry.agent_type();
        let mut next = envelope.clone();
        next.path
            .push(Hop::new(agent.clone(), person, envelope.reason.clone()));
        next.context
            .messages
            .push(Message::new(Role::Agent, text).with_name(agent.as_str()));
        let mut event = Event::new(
            derive_id_labelled(envelope.id, "reply", 0),
            envelope.session,
            EventType::Completed,
        );
        event.agent = Some(agent.clone());
        event.instance = Some(person.to_owned());
        event.envelope = Some(envelope.id);
        let next_id = derive_id_labelled(envelope.id, "reply", 1);
        let mut outgoing = Vec::new();
        let (output, reply) = match reply {
            Reply::Output(output) => (output, Reply::Complete),
            reply => (Value::from(text), reply),
        };
        match (reply, envelope.parent.clone()) {
            (Reply::Complete | Reply::Output(_), Some(parent)) => {
                // A delegated child: the answer goes back to the parent as its
                // result (the parent's worker records it with a `result` event);
                // only the root of a session ends it.
                let to = AgentName::new(parent.agent.as_str()).map_err(|err| {
                    Error::with_source(
                        ErrorKind::Decode,
                        "the task's parent is not an agent type",
                        err,
                    )
                })?;
                event.kind = EventType::Result;
                event.to = Some(to.clone());
                event.output = Some(output.clone());
                let mut next = next.resent(next_id, Kind::Result, to.clone());
                next.from = Some(agent);
                next.reply_to = None;
                next.status = Some(baton_proto::ResultStatus::Completed);
                next.output = Some(output);
                outgoing.push(self.handed_on(rollouts, &to, next)?);
            }
            (Reply::Complete | Reply::Output(_), None) => {
                event.output = Some(output);
                event.path = next.path;
                event.context = Some(Box::new(next.context));
                let subject = self.subjects.events(envelope.session);
                outgoing.push((subject, event.id, encode(&event)?));
            }
            (Reply::Handoff(to), _) => {
                let reason = Reason::HumanHandoff;
                event.kind = EventType::Handoff;
                event.to = Some(to.clone());
                event.reason = Some(reason.clone());
                event.path.clone_from(&next.path);
                let subject = self.subjects.events(envelope.session);
                outgoing.push((subject, event.id, encode(&event)?));
                let mut next = next.resent(next_id, Kind::Handoff, to.clone());
                next.from = Some(agent);
                next.reason = Some(reason);
                outgoing.push(self.handed_on(rollouts, &to, next)?);
            }
        }
        Ok((event, outgoing))
    }

    /// `next`, handed on to agent type `to`: addressed as every sender
    /// addresses a message, ready to publish.
    fn handed_on(
        &self,
        rollouts: &Rollouts,
        to: &AgentName,
        mut next: baton_proto::Envelope,
    ) -> Result<Publication, Error> {
        let sent = addressed((rollouts, &self.subjects), Sending::HandedOn, to, &mut next);
        Ok((sent.subject, sent.id, encode(&next)?))
    }
}
