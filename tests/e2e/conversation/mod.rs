//! Conversations: turns, holders, transcripts, compaction, crashes mid-turn, where a turn ends, `baton chat` and `baton conversations`.

pub(crate) mod chat;
pub(crate) mod compaction;
pub(crate) mod conversations;
pub(crate) mod holders;
pub(crate) mod transcripts;
pub(crate) mod turn_crashes;
pub(crate) mod turn_ends;
