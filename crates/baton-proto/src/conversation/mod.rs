//! Conversations (an extension): the record and its turns, what an envelope carries of its conversation, and the transcript's entries.

mod record;
pub use record::*;
pub(crate) mod conversation_ref;
pub(crate) mod conversation_turn;
pub mod transcript;
