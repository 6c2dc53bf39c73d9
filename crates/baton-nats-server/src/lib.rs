//! A local `nats-server`, started and cleaned up for you.
//!
//! `baton dev` runs the whole system on one machine with it, and the test
//! kit starts one per test. It holds no test code of its own.
//!
//! The parts:
//!
//! - [`NatsServer`] starts a `nats-server` with JetStream on a random port
//!   (`-p -1`) and a temporary store, reads the real port from the server's
//!   ports file, and kills the server and removes the store on drop.
//!   [`ServerOptions`] pins the port or the store directory, which is how a
//!   test restarts a server "in place".
//! - [`nats_server_binary`] and [`nats_server_version`] find the binary
//!   (`$NATS_SERVER_BIN`, then `<workspace>/.tools/bin`, then `PATH`) and
//!   check that it is new enough ([`MIN_VERSION`]).
//! - [`Error`] and [`ErrorKind`] say what went wrong and how to fix it.
//!
//! # Examples
//!
//! ```no_run
//! let server = baton_nats_server::NatsServer::start()?;
//! println!("connect to {}", server.url());
//! # Ok::<(), baton_nats_server::Error>(())
//! ```

mod binary;
mod error;
mod server;

pub use binary::{MIN_VERSION, nats_server_binary, nats_server_version};
pub use error::{Error, ErrorKind};
pub use server::{NatsServer, ServerOptions};
