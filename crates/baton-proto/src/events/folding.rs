//! A replayable session's `started` event folded into the next event of
//! its hop (an optional extension, version 2 of an event): the `started`
//! event holds the task's context as it arrived, and the hop's outcome
//! (`completed`, `handoff`, …) holds the same context with the messages the
//! agent added. When the agent changed nothing else, the outcome carries
//! the start's few fields ([`FoldedStart`]) instead of a second copy of the
//! context: one stored message instead of two, and each text once.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{Event, EventType, Map, Start, uuid_text};

/// A step's `tool_called` event folded into the next event of its hop:
/// what that event does not already say. The restored event is of type
/// `tool_called` and takes `session`, `agent`, `instance`, `version` and
/// `envelope` from the event that carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FoldedStep {
    /// Id of the `tool_called` event.
    #[serde(with = "uuid_text")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub id: Uuid,
    /// When the step ended, unix ms.
    pub at: u64,
    /// The step, as `step:NAME`.
    pub tool: String,
    /// The step's idempotency key.
    pub call: String,
    /// `ok` or `error`.
    pub outcome: String,
    /// How long it ran, in ms.
    pub duration_ms: u64,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

impl FoldedStep {
    /// The `tool_called` event this stands for, of `carrier`'s hop.
    fn restored(&self, carrier: &Event) -> Event {
        let mut event = carrier.kin(self.id, EventType::ToolCalled);
        event.at = self.at;
        event.detail = Some(self.detail());
        event.output = Some(crate::Value::Map(vec![
            (
                crate::Value::from("tool"),
                crate::Value::from(self.tool.as_str()),
            ),
            (
                crate::Value::from("call"),
                crate::Value::from(self.call.as_str()),
            ),
            (
                crate::Value::from("outcome"),
                crate::Value::from(self.outcome.as_str()),
            ),
            (
                crate::Value::from("duration_ms"),
                crate::Value::from(self.duration_ms),
            ),
        ]));
        event
    }

    /// The event's `detail`: `step:NAME ok in 3 ms`.
    #[must_use]
    pub fn detail(&self) -> String {
        format!("{} {} in {} ms", self.tool, self.outcome, self.duration_ms)
    }
}

/// A `started` event folded into the next event of its hop: what that
/// event does not already say. The restored event takes `session`,
/// `agent`, `instance`, `version` and `envelope` from the event that
/// carries it, and its context is that event's context with only its
/// first `messages` messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FoldedStart {
    /// Id of the `started` event.
    #[serde(with = "uuid_text")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub id: Uuid,
    /// When it was written, unix ms.
    pub at: u64,
    /// The task as it arrived: the `started` event's `output`.
    pub start: Start,
    /// How many of the carrying event's context's messages the task
    /// arrived with.
    pub messages: u32,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

impl Event {
    /// Folds `started`, the `started` event of this event's hop, into it,
    /// when this event's context is the context `started` holds with
    /// messages added after it (nothing else changed). Gives `started`
    /// back otherwise.
    ///
    /// # Errors
    ///
    /// `started`, unchanged, when it cannot be folded.
    pub fn fold_start(&mut self, started: Event) -> Result<(), Box<Event>> {
        let foldable = started.kind == EventType::Started
            && started.envelope.is_some()
            && started.envelope == self.envelope
            && started.session == self.session
            && self.accepted.is_none()
            && self.started.is_none()
            && started.accepted.is_none()
            && started.refs.is_empty()
            && started.claims.is_empty()
            && self.claims.is_empty()
            && same_but_messages(started.context.as_deref(), self.context.as_deref());
        let start = foldable.then(|| Start::from_event(&started)).flatten();
        let (Some(start), Some(before)) = (start, started.context.as_deref()) else {
            return Err(Box::new(started));
        };
        let Ok(messages) = u32::try_from(before.messages.len()) else {
            return Err(Box::new(started));
        };
        self.started = Some(FoldedStart {
            id: started.id,
            at: started.at,
            start,
            messages,
            extra: Map::new(),
        });
        self.v = self.v.max(crate::EVENT_VERSION_REFERRING);
        Ok(())
    }

    /// The events this stored event stands for, in the order they were
    /// written: the `accepted` event folded into it, then the `started`
    /// event, then the steps' `tool_called` events, restored, then the
    /// event itself without them.
    #[must_use]
    pub fn unfold(mut self) -> Vec<Event> {
        let mut events = Vec::with_capacity(3 + self.steps.len());
        if let Some(folded) = self.accepted.take() {
            let mut accepted = self.kin(folded.id, EventType::Accepted);
            accepted.at = folded.at;
            accepted.attempt = Some(folded.attempt);
            accepted.reason = folded.reason;
            events.push(accepted);
        }
        if let Some(folded) = self.started.take() {
            let mut started = self.kin(folded.id, EventType::Started);
            started.at = folded.at;
            started.output = Some(folded.start.to_value());
            started.context = self.context.as_deref().map(|context| {
                let mut context = context.clone();
                context.messages.truncate(folded.messages as usize);
                Box::new(context)
            });
            events.push(started);
        }
        for step in std::mem::take(&mut self.steps) {
            events.push(step.restored(&self));
        }
        self.version_once_whole();
        events.push(self);
        events
    }

    /// An event `id` of `kind` of the same hop as this one.
    fn kin(&self, id: Uuid, kind: EventType) -> Event {
        let mut event = Event::new(id, self.session, kind);
        event.agent.clone_from(&self.agent);
        event.instance.clone_from(&self.instance);
        event.version.clone_from(&self.version);
        event.envelope = self.envelope;
        event.replay_of = self.replay_of;
        event
    }
}

/// Whether `after` is `before` with messages added after its own.
fn same_but_messages(before: Option<&crate::Context>, after: Option<&crate::Context>) -> bool {
    let (Some(before), Some(after)) = (before, after) else {
        return false;
    };
    before.expanded.is_none()
        && after.expanded.is_none()
        && after.messages.starts_with(&before.messages)
        && before.initial_query == after.initial_query
        && before.problem == after.problem
        && before.variables == after.variables
        && before.trace == after.trace
        && before.state == after.state
        && before.metadata == after.metadata
        && before.history == after.history
        && before.extra == after.extra
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Envelope, Message, Role, Wire};

    fn hop() -> (Event, Event) {
        let mut task =
            Envelope::task("Where is my order ABC-123? It has not arrived yet, a week on.")
                .with_variable("tier", "gold");
        task.replayable = true;
        let start = Start::of(&task).expect("a replayable first task");
        let mut started = Event::new(Uuid::new_v4(), task.session, EventType::Started);
        started.agent = Some(crate::AgentName::from_static("desk"));
        started.instance = Some("w0".into());
        started.envelope = Some(task.id);
        started.context = Some(Box::new(task.context.clone()));
        started.output = Some(start.to_value());
        let mut completed = Event::new(Uuid::new_v4(), task.session, EventType::Completed);
        completed.agent = started.agent.clone();
        completed.instance = started.instance.clone();
        completed.envelope = Some(task.id);
        let mut context = task.context.clone();
        context
            .messages
            .push(Message::new(Role::Agent, "It left the warehouse today."));
        completed.context = Some(Box::new(context));
        completed.output = Some(crate::Value::from("It left the warehouse today."));
        (started, completed)
    }

    #[test]
    fn a_start_folds_into_its_hops_end_and_comes_back_whole() {
        let (started, mut completed) = hop();
        let whole = started.to_msgpack().unwrap().len() + completed.to_msgpack().unwrap().len();
        completed.fold_start(started.clone()).expect("folds");
        assert_eq!(completed.v, 2, "a reader of version 1 would miss the start");
        let bytes = completed.to_msgpack().unwrap();
        assert!(bytes.len() < whole * 2 / 3, "{} of {whole}", bytes.len());
        let read = Event::from_msgpack(&bytes).unwrap();
        assert_eq!(read.v, 2, "decoded, it still carries the start");
        let events = read.unfold();
        let kinds: Vec<&str> = events.iter().map(|event| event.kind.as_str()).collect();
        assert_eq!(kinds, ["started", "completed"]);
        assert_eq!(events[0], started);
        assert_eq!(Start::from_event(&events[0]), Start::from_event(&started));
        assert_eq!(events[1].v, 1);
        assert!(events[1].started.is_none());
    }

    #[test]
    fn a_start_whose_context_the_agent_changed_stays_apart() {
        let (started, mut completed) = hop();
        if let Some(context) = completed.context.as_deref_mut() {
            context.variables.insert("tier".into(), "silver".into());
        }
        let back = completed.fold_start(started.clone()).unwrap_err();
        assert_eq!(*back, started);
        assert!(completed.started.is_none());
        assert_eq!(completed.v, 1);
        // Another hop's start does not fold either.
        let (mut other, mut completed) = hop();
        other.envelope = Some(Uuid::new_v4());
        assert!(completed.fold_start(other).is_err());
    }
}
