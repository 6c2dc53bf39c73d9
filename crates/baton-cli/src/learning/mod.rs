//! The registry from the command line: `baton agents` (with `--why`),
//! `baton feedback` and `baton notebook`, as the client role.

pub mod agents;
pub mod feedback;
pub mod notebook;
pub(crate) mod registry;
