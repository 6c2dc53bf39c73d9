//! What an agent did to the context: the [`ContextUpdate`] an outcome
//! carries, applied before the envelope moves on.

use baton_proto::{Map, Message, Step};

/// What an agent did to the context; applied before the envelope moves on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContextUpdate {
    /// Messages to append to the conversation.
    pub messages: Vec<Message>,
    /// Variables to set (merged into the shared variables).
    pub variables: Map,
    /// Steps to append to the reasoning trace.
    pub trace: Vec<Step>,
    /// Internal state entries to set for the receiver.
    pub state: Map,
    /// The problem as this agent now understands it.
    pub problem: Option<String>,
    /// In a conversation: when this turn ends, the conversation goes back
    /// to its entry instead of staying with the agent that answered.
    pub hand_back: bool,
    /// The conversation's first messages give way to one that stands for
    /// them, before `messages` are appended.
    pub compaction: Option<Compacted>,
}

/// A compaction: the context's first `replaces` messages become `message`
/// (whose [`baton_proto::Compaction`] says what it stands for).
#[derive(Debug, Clone, PartialEq)]
pub struct Compacted {
    /// How many of the context's messages, from its first, it replaces.
    pub replaces: usize,
    /// The message that stands for them.
    pub message: Message,
}

impl ContextUpdate {
    /// Whether the update changes nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The update applied to `context` as it is: messages and steps
    /// appended, variables and state merged, the problem replaced.
    #[doc(hidden)]
    pub fn apply_to(&self, context: &mut baton_proto::Context) {
        if let Some(compacted) = &self.compaction {
            compacted.clone().apply_to(&mut context.messages);
        }
        context.messages.extend(self.messages.iter().cloned());
        context.variables.extend(self.variables.clone());
        context.state.extend(self.state.clone());
        context.trace.extend(self.trace.iter().cloned());
        if let Some(problem) = &self.problem {
            context.problem.clone_from(problem);
        }
    }
}

impl Compacted {
    /// Replaces the first messages of `messages` by the one that stands
    /// for them.
    #[doc(hidden)]
    pub fn apply_to(self, messages: &mut Vec<Message>) {
        let replaced = self.replaces.min(messages.len());
        messages.splice(..replaced, [self.message]);
    }
}
