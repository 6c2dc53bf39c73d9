//! Conversations: turns, holders, transcripts, compaction, crashes mid-turn, `baton chat` and `baton conversations`.

pub(crate) mod chat;
pub(crate) mod compaction;
pub(crate) mod conversations;
pub(crate) mod holders;
pub(crate) mod transcripts;
pub(crate) mod turn_crashes;
