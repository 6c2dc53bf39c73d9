//! A context whose first messages a worker put back from the transcript
//! its `history` referred to, for its agent to see; publishing refers to
//! them again.

use std::sync::Arc;

use super::{Context, Message};

/// A context's messages as a worker holds them while its agent runs: the
/// first `prefix.len()` came from `history`, and are taken off again when
/// the context is published. Never on the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct Expanded {
    /// The reference the messages came from.
    pub history: crate::conversation_ref::History,
    /// The referenced messages.
    pub prefix: Arc<[Message]>,
}

impl Context {
    /// Takes the messages that came from a [`crate::History`] off again, and
    /// refers to them, when the context still begins with them; a context
    /// whose agent changed them keeps them all, and no reference.
    pub fn collapse(&mut self) {
        let Some(expanded) = self.expanded.take() else {
            return;
        };
        if self.messages.starts_with(&expanded.prefix) {
            self.messages.drain(..expanded.prefix.len());
            self.history = Some(expanded.history);
        }
    }

    /// Puts `prefix`, the messages `history` refers to, before the
    /// context's own.
    pub fn expand(&mut self, prefix: Arc<[Message]>) {
        let Some(history) = self.history.take() else {
            return;
        };
        let own = std::mem::take(&mut self.messages);
        self.messages = prefix.iter().cloned().chain(own).collect();
        self.expanded = Some(Expanded { history, prefix });
    }
}
