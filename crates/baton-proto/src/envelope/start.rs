//! A replayable session's start (an optional extension): a session sent
//! `replayable` has its first hop store a `started` event holding the task
//! as it arrived ([`Start`]), which a replay starts from.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::envelope::{Envelope, Kind};
use crate::event::{Event, EventType};
use crate::{Value, uuid_text};

/// A session's task as its first hop took it: the `output` of its
/// `started` event (whose `context` is the context it started with, and
/// whose `agent` took it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Start {
    /// Capabilities the task asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
    /// The session's hop budget, when the task set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_hops: Option<u32>,
    /// How long the task had, in ms from its creation, when it had a deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// The most the session may spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::Budget>,
    /// The session it replays, when it is a replay.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "uuid_text::option"
    )]
    #[schemars(with = "Option<String>", extend("format" = "uuid"))]
    pub replay_of: Option<Uuid>,
    /// The replay is an evaluation (`baton eval`, [`crate::Replay::eval`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub eval: bool,
}

impl Start {
    /// What a session's first hop records of `envelope`, when the envelope
    /// is a session's first task that asked to be replayable.
    #[must_use]
    pub fn of(envelope: &Envelope) -> Option<Self> {
        let first = envelope.kind == Kind::Task
            && envelope.parent.is_none()
            && envelope.path.is_empty()
            && envelope.replayable;
        first.then(|| Self {
            requires: envelope.requires.clone(),
            max_hops: envelope.max_hops,
            deadline_ms: envelope
                .deadline
                .map(|deadline| deadline.saturating_sub(envelope.created_at)),
            budget: envelope.budget,
            replay_of: envelope.replay.as_ref().map(|replay| replay.of),
            eval: envelope.replay.as_ref().is_some_and(|replay| replay.eval),
        })
    }

    /// As an event's `output`.
    #[must_use]
    pub fn to_value(&self) -> Value {
        // Through bytes: `rmpv::ext::to_value` writes a struct as an array.
        rmp_serde::to_vec_named(self)
            .ok()
            .and_then(|bytes| rmpv::decode::read_value(&mut bytes.as_slice()).ok())
            .unwrap_or(Value::Nil)
    }

    /// The start a `started` event records; `None` for any other event.
    #[must_use]
    pub fn from_event(event: &Event) -> Option<Self> {
        if event.kind != EventType::Started {
            return None;
        }
        let Some(output) = &event.output else {
            return Some(Self::default());
        };
        // Through bytes, as it was written.
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, output).ok()?;
        rmp_serde::from_slice(&bytes).ok()
    }

    /// A new task that starts like the one `started` recorded, in a new
    /// session, for agent type `started.agent`.
    #[must_use]
    pub fn task(&self, started: &Event) -> Envelope {
        let mut task = Envelope::task(String::new());
        task.context = started.context.as_deref().cloned().unwrap_or_default();
        task.requires.clone_from(&self.requires);
        task.max_hops = self.max_hops;
        task.deadline = self
            .deadline_ms
            .map(|ms| task.created_at.saturating_add(ms));
        task.budget = self.budget;
        task.to.clone_from(&started.agent);
        task.replayable = true;
        task
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Replay;

    #[test]
    fn a_first_replayable_task_is_recorded_and_rebuilt() {
        let mut task = Envelope::task("where is my order?").with_variable("tier", "gold");
        task.max_hops = Some(5);
        task.deadline = Some(task.created_at + 30_000);
        task.requires = vec!["billing".to_owned()];
        assert_eq!(Start::of(&task), None, "not replayable: nothing recorded");
        task.replayable = true;
        task.replay = Some(Replay::of(Uuid::new_v4()));
        let start = Start::of(&task).expect("recorded");
        assert!(start.replay_of.is_some());
        assert_eq!(start.deadline_ms, Some(30_000));

        let mut started = Event::new(Uuid::new_v4(), task.session, EventType::Started);
        started.agent = Some(crate::AgentName::from_static("triage"));
        started.context = Some(Box::new(task.context.clone()));
        started.output = Some(start.to_value());
        let read = Start::from_event(&started).expect("a started event");
        assert_eq!(read, start);
        let again = read.task(&started);
        assert_ne!(again.session, task.session);
        assert_eq!(again.to.as_deref(), Some("triage"));
        assert_eq!(again.context, task.context);
        assert_eq!(again.max_hops, Some(5));
        assert_eq!(again.requires, task.requires);
        assert_eq!(again.deadline, Some(again.created_at + 30_000));
        assert!(again.replayable);
    }

    #[test]
    fn later_hops_and_children_are_not_starts() {
        let mut handoff = Envelope::task("q");
        handoff.replayable = true;
        handoff.kind = Kind::Handoff;
        assert_eq!(Start::of(&handoff), None);
        let other = Event::new(Uuid::new_v4(), Uuid::new_v4(), EventType::Completed);
        assert_eq!(Start::from_event(&other), None);
    }
}
