//! Sessions from the command line: start one, follow it, cancel it, run a
//! finished one again, and compare two.

pub mod cancel;
pub mod diff;
mod given;
pub mod replay;
pub mod send;
pub mod watch;

pub use given::{amount, session_id, variable};
