//! Test support for Baton: real processes, started and cleaned up for you.
//!
//! The parts:
//!
//! - [`NatsServer`] starts a `nats-server` with JetStream on a random port
//!   (`-p -1`) and a temporary store, reads the real port from the server's
//!   ports file, and kills the server and removes the store on drop.
//!   [`ServerOptions`] pins the port or the store directory, which is how a
//!   test restarts a server "in place". The `baton dev` command uses the same
//!   type to run a local server.
//! - [`nats_server_binary`] and [`nats_server_version`] find the binary
//!   (`$NATS_SERVER_BIN`, then `<workspace>/.tools/bin`, then `PATH`) and
//!   check that it is new enough (>= 2.10).
//! - [`ChildProcess`] wraps a spawned binary for end-to-end tests: output is
//!   captured to files so it can be shown when a test fails, and the process
//!   is killed on drop. [`baton_binary`] locates the `baton` executable.
//! - [`FakeLlm`] is a scripted OpenAI-compatible chat-completions server on a
//!   random loopback port that records the requests it gets.
//! - [`Error`] and [`ErrorKind`] describe what went wrong and how to fix it.
//!
//! # Examples
//!
//! ```no_run
//! let server = baton_testkit::NatsServer::start()?;
//! println!("connect to {}", server.url());
//! # Ok::<(), baton_testkit::Error>(())
//! ```
#![warn(missing_docs)]

mod binary;
mod error;
mod llm;
mod process;
mod server;

pub use binary::{MIN_VERSION, nats_server_binary, nats_server_version};
pub use error::{Error, ErrorKind};
pub use llm::{FakeLlm, Recorded, Scripted};
pub use process::{ChildProcess, baton_binary};
pub use server::{NatsServer, ServerOptions};
