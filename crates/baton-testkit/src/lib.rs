//! Test support for Baton: real processes, started and cleaned up for you.
//!
//! The parts:
//!
//! - [`NatsServer`], [`ServerOptions`], [`nats_server_binary`] and
//!   [`nats_server_version`]: a real `nats-server` on a random port with a
//!   temporary store, re-exported from `baton-nats-server` (which `baton dev`
//!   uses too); [`NatsCluster`] starts several of them as one JetStream
//!   cluster;
//! - [`ChildProcess`] wraps a spawned binary for end-to-end tests: output is
//!   captured to files so it can be shown when a test fails, and the process
//!   is killed on drop. [`baton_binary`] locates the `baton` executable;
//! - [`FakeLlm`] is a scripted OpenAI-compatible chat-completions server on a
//!   random loopback port that records the requests it gets (a provider's
//!   rate limit to answer with, `RateWindow`, is `baton-devtools`'s, which
//!   the benchmarks use too);
//! - [`eventually`] retries a check until it holds or a time limit passes,
//!   and says what it last saw when it gives up.
//!
//! # Examples
//!
//! ```no_run
//! let server = baton_testkit::NatsServer::start()?;
//! println!("connect to {}", server.url());
//! # Ok::<(), baton_testkit::Error>(())
//! ```

mod cluster;
mod eventually;
mod llm;
mod process;

pub use baton_nats_server::{
    Error, ErrorKind, MIN_VERSION, NatsServer, ServerOptions, nats_server_binary,
    nats_server_version,
};
pub use cluster::NatsCluster;
pub use eventually::{Timeout, eventually};
pub use llm::{FakeLlm, Recorded, Scripted, Streaming};
pub use process::{ChildProcess, baton_binary};
