//! References within an event (an optional extension): a part the event
//! holds twice is kept once, and the other place says where it is.
//!
//! A turn's `completed` event carries the answer as its `output` and again
//! as the last message of its ending `context`, and a turn's events carry
//! the user's message as the context's first message and again as its
//! `initial_query`. A worker that refers ([`Event::refer`]) leaves the
//! second copy empty and lists it in `refs`; every decode puts it back
//! ([`Event::resolve_refs`], called by [`crate::Wire`]'s decode), so no
//! reader of this version sees a difference.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Event;
use crate::value::{Map, Value};

/// Where an event's `output` may be kept instead.
const OUTPUT: &str = "/output";
/// Where an event's context's `initial_query` may be kept instead.
const QUERY: &str = "/context/initial_query";
/// The shortest text referred to: a reference takes about 60 bytes.
const MIN_REFERRED: usize = 64;

/// A part of an event left empty because the same event holds it
/// elsewhere: `path` is the part (a JSON Pointer from the payload's root:
/// `/output` or `/context/initial_query`), `from` the string it equals
/// (`/context/messages/<n>/content`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Ref {
    /// The part left empty: `/output` (then absent) or
    /// `/context/initial_query` (then `""`).
    pub path: String,
    /// Where the same text is: `/context/messages/<n>/content`.
    pub from: String,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

impl Event {
    /// Keeps each text this event holds twice once: an `output` string
    /// that equals one of its context's messages (the last such), and an
    /// `initial_query` that equals one (the first such), are left empty and
    /// listed in `refs`, when they are long enough for a reference to be
    /// shorter. An event without a context is left as it is.
    pub fn refer(&mut self) {
        let Some(context) = self.context.as_deref_mut() else {
            return;
        };
        let at = |n: usize| format!("/context/messages/{n}/content");
        if let Some(Value::String(answer)) = &self.output {
            let answer = answer.as_str().unwrap_or_default();
            let found = (answer.len() >= MIN_REFERRED)
                .then(|| context.messages.iter().rposition(|m| m.content == answer))
                .flatten();
            if let Some(n) = found {
                self.output = None;
                self.refs.push(reference(OUTPUT, at(n)));
                self.v = crate::EVENT_VERSION_REFERRING;
            }
        }
        let query = context.initial_query.as_str();
        let found = (query.len() >= MIN_REFERRED)
            .then(|| context.messages.iter().position(|m| m.content == query))
            .flatten();
        if let Some(n) = found {
            context.initial_query.clear();
            self.refs.push(reference(QUERY, at(n)));
            self.v = crate::EVENT_VERSION_REFERRING;
        }
    }

    /// Puts back every part `refs` lists, and drops them; an event whole
    /// again (no reference left, no `path_from`, no folded `started`) is
    /// version 1 again. A
    /// reference this version does not know (another path, or a message
    /// that is not there) is kept in `refs` and changes nothing.
    pub fn resolve_refs(&mut self) {
        if self.refs.is_empty() {
            return;
        }
        let refs = std::mem::take(&mut self.refs);
        for reference in refs {
            let text = self.context.as_deref().and_then(|context| {
                let n: usize = (reference.from.strip_prefix("/context/messages/"))
                    .and_then(|rest| rest.strip_suffix("/content"))
                    .and_then(|n| n.parse().ok())?;
                context.messages.get(n).map(|m| m.content.clone())
            });
            match (reference.path.as_str(), text) {
                (OUTPUT, Some(text)) if self.output.is_none() => {
                    self.output = Some(Value::from(text));
                }
                (QUERY, Some(text)) => {
                    if let Some(context) = self.context.as_deref_mut() {
                        context.initial_query = text;
                    }
                }
                _ => self.refs.push(reference),
            }
        }
        self.version_once_whole();
    }
}

impl Event {
    /// Version 1 again once nothing a reader of version 1 would misread is
    /// left: no reference, no `path_from`, no folded `started` (a folded
    /// start stays version 2 until it is unfolded).
    pub(crate) fn version_once_whole(&mut self) {
        if self.refs.is_empty() && self.path_from.is_none() && self.started.is_none() {
            self.v = self.v.min(crate::PROTOCOL_VERSION);
        }
    }

    /// Keeps only the last hop of a `handoff` event's path, and says how
    /// many came before (`path_from`): the session's earlier events carry
    /// them. Other events, and a path of one hop, are left as they are.
    pub fn keep_new_hops(&mut self) {
        if self.kind != crate::EventType::Handoff || self.path.len() < 2 {
            return;
        }
        let before = self.path.len() - 1;
        self.path.drain(..before);
        self.path_from = u32::try_from(before).ok();
        self.v = crate::EVENT_VERSION_REFERRING;
    }

    /// Takes `event`'s path into `path`, the session's path so far: the
    /// hops it names after the first `path_from`, or its whole path when it
    /// names one (an event without a path changes nothing).
    pub fn follow_path(path: &mut Vec<crate::Hop>, event: &Event) {
        match event.path_from {
            Some(from) => {
                path.truncate(usize::try_from(from).unwrap_or(usize::MAX));
                path.extend(event.path.iter().cloned());
            }
            None if !event.path.is_empty() => path.clone_from(&event.path),
            None => {}
        }
    }

    /// The last of `events` (a session's, in order) with its whole path.
    #[must_use]
    pub fn last_with_path(events: &[Event]) -> Option<Event> {
        let mut path = Vec::new();
        for event in events {
            Self::follow_path(&mut path, event);
        }
        let mut last = events.last()?.clone();
        if last.path_from.take().is_some() {
            last.path = path;
        }
        Some(last)
    }
}

fn reference(path: &str, from: String) -> Ref {
    Ref {
        path: path.to_owned(),
        from,
        extra: Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use crate::{Context, Event, EventType, Message, Role, Wire};

    const QUERY_TEXT: &str = "Where is my order ABC-123? It has not arrived. ";
    const ANSWER_TEXT: &str = "It left the warehouse today and arrives Friday. ";

    fn ended(query: &str, messages: &[(Role, &str)], output: &str) -> Event {
        let mut event = Event::new(Uuid::new_v4(), Uuid::new_v4(), EventType::Completed);
        let context = Context {
            initial_query: query.to_owned(),
            messages: (messages.iter())
                .map(|(role, text)| Message::new(role.clone(), *text))
                .collect(),
            ..Context::default()
        };
        event.context = Some(Box::new(context));
        event.output = Some(output.into());
        event
    }

    #[test]
    fn an_answer_and_a_query_kept_twice_are_kept_once_and_decoding_puts_them_back() {
        let (query, answer) = (QUERY_TEXT.repeat(3), ANSWER_TEXT.repeat(3));
        let whole = ended(
            &query,
            &[(Role::User, &query), (Role::Agent, &answer)],
            &answer,
        );
        let mut referred = whole.clone();
        referred.refer();
        assert_eq!(referred.output, None);
        assert_eq!(
            referred.context.as_ref().map(|c| c.initial_query.as_str()),
            Some("")
        );
        assert_eq!(referred.refs.len(), 2);
        let bytes = referred.to_msgpack().expect("encodes");
        let once = |text: &str| {
            bytes
                .windows(text.len())
                .filter(|w| *w == text.as_bytes())
                .count()
        };
        assert_eq!((once(&answer), once(&query)), (1, 1));
        let read = Event::from_msgpack(&bytes).expect("decodes");
        assert_eq!(read, whole);
        // Smaller by the two copies, less the references.
        let before = whole.to_msgpack().expect("encodes").len();
        let saved = query.len() + answer.len();
        assert!(
            bytes.len() + saved - 120 < before,
            "{} vs {before}",
            bytes.len()
        );
    }

    #[test]
    fn a_handoff_keeps_its_new_hop_and_readers_follow_the_whole_path() {
        let hop = |agent: &str| crate::Hop::new(crate::AgentName::unchecked(agent), "w1", None);
        let session = Uuid::new_v4();
        let mut first = Event::new(Uuid::new_v4(), session, EventType::Handoff);
        first.path = vec![hop("front")];
        let mut second = Event::new(Uuid::new_v4(), session, EventType::Handoff);
        second.path = vec![hop("front"), hop("triage"), hop("refunds")];
        first.keep_new_hops();
        second.keep_new_hops();
        assert_eq!((first.path.len(), first.path_from), (1, None));
        assert_eq!((second.path.len(), second.path_from), (1, Some(2)));
        let read = Event::from_msgpack(&second.to_msgpack().expect("encodes")).expect("decodes");
        assert_eq!(read.path_from, Some(2));
        let mut middle = Event::new(Uuid::new_v4(), session, EventType::Accepted);
        middle.path = vec![hop("front"), hop("triage")];
        let last = Event::last_with_path(&[first, middle, read]).expect("a last event");
        let agents: Vec<&str> = last.path.iter().map(|h| h.agent.as_str()).collect();
        assert_eq!(
            (agents, last.path_from),
            (vec!["front", "triage", "refunds"], None)
        );
    }

    #[test]
    fn what_is_not_held_twice_or_not_known_is_left_as_it_is() {
        // Short texts cost less than a reference; other texts are not twice.
        let mut other = ended("Hi", &[(Role::User, "Hi")], "Hello");
        let whole = other.clone();
        other.refer();
        assert_eq!(other, whole);
        let long = ANSWER_TEXT.repeat(3);
        let mut other = ended(&long, &[(Role::User, "Hello")], &long);
        let whole = other.clone();
        other.refer();
        assert_eq!(other, whole);
        let mut unknown = whole.clone();
        unknown.output = None;
        unknown.refs.push(super::reference(
            "/detail",
            "/context/messages/0/content".to_owned(),
        ));
        unknown.refs.push(super::reference(
            "/output",
            "/context/messages/9/content".to_owned(),
        ));
        let kept = unknown.refs.clone();
        unknown.resolve_refs();
        assert_eq!((unknown.output, unknown.refs), (None, kept));
    }
}
