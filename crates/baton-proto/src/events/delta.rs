//! A piece of an answer a model is writing, sent live to a session that
//! asked for it (`stream` in its envelope): a `delta` event on
//! `baton.live.<session>`, never stored.
//!
//! A delta names the hop (`envelope`), the model call within it (`step`)
//! and where its text starts in that call's answer (`offset`, in bytes). A
//! call that is made again after its stream was cut starts from offset 0
//! again, so a reader keeps, per hop and step, how much it has shown, and
//! shows only what lies beyond it: no text twice.

use std::collections::HashMap;

use uuid::Uuid;

use crate::{Event, EventType, Value, derive_id_labelled};

/// One piece of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delta {
    /// The hop's envelope.
    pub envelope: Uuid,
    /// The model call within the hop, from 1.
    pub step: u32,
    /// Where `text` starts in the call's answer, in bytes.
    pub offset: u64,
    /// The text.
    pub text: String,
}

impl Delta {
    /// The `delta` event of `session` that carries this piece, from `agent`.
    #[must_use]
    pub fn event(&self, session: Uuid, agent: &crate::AgentName) -> Event {
        let label = format!("delta/{}", self.step);
        let index = u32::try_from(self.offset).unwrap_or(u32::MAX);
        let mut event = Event::new(
            derive_id_labelled(self.envelope, &label, index),
            session,
            EventType::Delta,
        );
        event.agent = Some(agent.clone());
        event.envelope = Some(self.envelope);
        event.output = Some(Value::Map(vec![
            (Value::from("step"), Value::from(self.step)),
            (Value::from("offset"), Value::from(self.offset)),
            (Value::from("text"), Value::from(self.text.as_str())),
        ]));
        event
    }

    /// The part of this piece beyond the first `shown` bytes of its
    /// answer: empty when the piece lies within them. A cut inside a
    /// character (a call that wrote other text the second time) gives the
    /// whole piece rather than half a character.
    #[must_use]
    pub fn beyond(&self, shown: u64) -> &str {
        if self.end() <= shown {
            return "";
        }
        let skip = usize::try_from(shown.saturating_sub(self.offset)).unwrap_or(usize::MAX);
        self.text.get(skip..).unwrap_or(&self.text)
    }

    /// Where this piece ends in its answer, in bytes.
    #[must_use]
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.text.len() as u64)
    }

    /// The piece a `delta` event carries; `None` for any other event.
    #[must_use]
    pub fn of(event: &Event) -> Option<Self> {
        if event.kind != EventType::Delta {
            return None;
        }
        let Some(Value::Map(fields)) = &event.output else {
            return None;
        };
        let field = |name: &str| {
            fields
                .iter()
                .find(|(key, _)| key.as_str() == Some(name))
                .map(|(_, value)| value)
        };
        Some(Self {
            envelope: event.envelope?,
            step: u32::try_from(field("step")?.as_u64()?).ok()?,
            offset: field("offset")?.as_u64()?,
            text: field("text")?.as_str()?.to_owned(),
        })
    }
}

/// What a reader has shown of each answer: it turns deltas into the text
/// not shown yet.
#[derive(Debug, Default)]
pub struct Shown(HashMap<(Uuid, u32), u64>);

impl Shown {
    /// The part of `delta` not shown before (empty when all of it was).
    pub fn fresh<'a>(&mut self, delta: &'a Delta) -> &'a str {
        let shown = self.0.entry((delta.envelope, delta.step)).or_default();
        let fresh = delta.beyond(*shown);
        *shown = (*shown).max(delta.end());
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(offset: u64, text: &str) -> Delta {
        Delta {
            envelope: Uuid::nil(),
            step: 1,
            offset,
            text: text.to_owned(),
        }
    }

    #[test]
    fn a_delta_survives_its_event() {
        let delta = piece(6, "world");
        let event = delta.event(Uuid::new_v4(), &crate::AgentName::from_static("writer"));
        assert_eq!(Delta::of(&event), Some(delta));
        let other = Event::new(Uuid::new_v4(), Uuid::nil(), EventType::Handoff);
        assert_eq!(Delta::of(&other), None);
    }

    #[test]
    fn a_call_made_again_shows_only_what_is_new() {
        let mut shown = Shown::default();
        assert_eq!(shown.fresh(&piece(0, "Hello ")), "Hello ");
        assert_eq!(shown.fresh(&piece(6, "wor")), "wor");
        // The stream was cut; the call starts again from 0.
        assert_eq!(shown.fresh(&piece(0, "Hello ")), "");
        assert_eq!(shown.fresh(&piece(6, "world")), "ld");
        assert_eq!(shown.fresh(&piece(11, "!")), "!");
        // Another step of the hop is another answer.
        let next = Delta {
            step: 2,
            ..piece(0, "Bye")
        };
        assert_eq!(shown.fresh(&next), "Bye");
    }
}
