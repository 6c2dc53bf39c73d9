//! Conversations from the command line: `baton chat` and `baton
//! conversations`, and what `baton send --conversation` (in
//! `sessions::send`) says through. Each message is a turn of its
//! conversation, which goes to the agent that holds it; a message to a
//! conversation whose agent asked the user a question is the answer.
//!
//! Answers go to standard output, what happens around them (the
//! conversation's id, handoffs, who holds it) to standard error, so a
//! script that pipes turns into `baton chat` reads the answers alone.

pub mod chat;
pub mod lifecycle;
mod show;
mod talk;

pub use talk::{Talk, agent_type, overlap};
