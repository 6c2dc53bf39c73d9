//! How a long-running process stops: the first SIGTERM or Ctrl-C asks it
//! to finish what it holds, its grace bounds how long that may take, and a
//! second signal ends it at once.
//!
//! The bound lives here, outside the libraries, so that it holds whatever
//! they wait on: async-nats holds a flush or a publish until it reconnects,
//! which with the server gone is never, and an HTTP server's graceful stop
//! waits for every open stream. Past the grace nothing more can be gained by
//! waiting, and what was in hand is left to redelivery (or, for the
//! gateways and the console, to the sessions that go on without them).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// What a process leaves behind when it stops before it is done, said in
/// its last log line: computed then, so a worker can count its messages.
pub type Left = Arc<dyn Fn() -> String + Send + Sync>;

/// The exit status at the end of the grace: a stop as designed, which
/// leaves what it could not finish to redelivery, as a stop in time does
/// with what it could not start.
const GRACE_OVER: i32 = 0;

/// The stop of one process: `signal` is the future its library serves
/// until.
pub struct Stop {
    stopping: watch::Receiver<bool>,
}

impl Stop {
    /// Listens for SIGTERM and Ctrl-C from now on. The first signal starts
    /// the stop and says so; from then on the process has `grace` to end by
    /// itself, else it exits saying what it leaves; a second signal exits at
    /// once. `client` tells whether the server is reachable when the stop
    /// starts: if not, nothing can be acked, and the log says what is left.
    pub fn listen(grace: Duration, client: Option<async_nats::Client>, left: Left) -> Self {
        let (tell, stopping) = watch::channel(false);
        let mut signals = Signals::new();
        tokio::spawn(async move {
            let (first, _) = signals.next().await;
            let reachable = client.as_ref().is_none_or(|client| {
                client.connection_state() == async_nats::connection::State::Connected
            });
            if reachable {
                tracing::info!(
                    signal = first,
                    ?grace,
                    "stopping: finishing what is in hand within the grace; a second SIGTERM or Ctrl-C exits at once"
                );
            } else {
                tracing::warn!(
                    signal = first,
                    ?grace,
                    left = %left(),
                    "stopping with NATS unreachable: nothing in hand can be settled, so it is left; exiting within the grace at the latest"
                );
            }
            let _ = tell.send(true);
            deadline(grace, left.clone());
            let (second, number) = signals.next().await;
            tracing::warn!(
                signal = second,
                left = %left(),
                "second signal: exiting at once"
            );
            // As a shell reports a process the signal ended.
            std::process::exit(128 + number);
        });
        Self { stopping }
    }

    /// Resolves once the stop has started.
    pub fn signal(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut stopping = self.stopping.clone();
        async move {
            // An error means the listener is gone: the process is ending.
            let _ = stopping.wait_for(|stopping| *stopping).await;
        }
    }
}

/// Exits `grace` from now if the process is still running then. A thread,
/// not a task: the bound must hold even while the async runtime shuts down
/// (which waits for its blocking tasks).
fn deadline(grace: Duration, left: Left) {
    let spawned = std::thread::Builder::new()
        .name("stop-deadline".to_owned())
        .spawn(move || {
            std::thread::sleep(grace);
            tracing::warn!(
                ?grace,
                left = %left(),
                "the shutdown grace is over: exiting now"
            );
            std::process::exit(GRACE_OVER);
        });
    if let Err(err) = spawned {
        tracing::warn!(error = %err, "cannot bound the stop by its grace; a second SIGTERM or Ctrl-C exits at once");
    }
}

/// SIGTERM and SIGINT (Ctrl-C), each named when it arrives. Registered at
/// once, so a signal that arrives while the process starts is not lost.
struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Self {
                term: signal(SignalKind::terminate()).ok(),
                int: signal(SignalKind::interrupt()).ok(),
            }
        }
        #[cfg(not(unix))]
        Self {}
    }

    /// Resolves when `signal` arrives; never if it could not be listened to.
    #[cfg(unix)]
    async fn recv(signal: Option<&mut tokio::signal::unix::Signal>) {
        if let Some(signal) = signal {
            if signal.recv().await.is_some() {
                return;
            }
        }
        std::future::pending().await
    }

    /// The next signal's name and number.
    async fn next(&mut self) -> (&'static str, i32) {
        #[cfg(unix)]
        {
            let term = Self::recv(self.term.as_mut());
            let int = Self::recv(self.int.as_mut());
            tokio::select! {
                () = term => ("SIGTERM", 15),
                () = int => ("SIGINT", 2),
            }
        }
        #[cfg(not(unix))]
        {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
            ("Ctrl-C", 2)
        }
    }
}

/// What a process that holds no messages leaves: nothing to redeliver.
#[must_use]
pub fn nothing(what: &'static str) -> Left {
    Arc::new(move || what.to_owned())
}
