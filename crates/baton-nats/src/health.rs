//! Whether this process serves: set once a worker or the router has its
//! consumer and starts pulling, cleared when it starts to drain. Probes
//! (`baton`'s `/readyz`) read it together with the connection's state.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

static SERVING: AtomicBool = AtomicBool::new(false);

/// Why this worker takes nothing: its version was retired.
static RETIRED: OnceLock<String> = OnceLock::new();

/// Whether a worker or router of this process pulls its messages now.
#[must_use]
pub fn serving() -> bool {
    SERVING.load(Ordering::Relaxed)
}

/// Why this process's worker takes nothing, when its version is retired
/// (`baton retire`): it stays up, idle, until it is removed.
#[must_use]
pub fn retired() -> Option<&'static str> {
    RETIRED.get().map(String::as_str)
}

/// Marks the worker retired, saying `why`, and no longer serving.
#[doc(hidden)]
pub fn set_retired(why: String) {
    let _ = RETIRED.set(why);
    set_serving(false);
}

#[doc(hidden)]
pub fn set_serving(serving: bool) {
    SERVING.store(serving, Ordering::Relaxed);
}

/// `shutdown`, which first marks the process as no longer serving.
#[doc(hidden)]
pub async fn draining(shutdown: impl std::future::Future<Output = ()>) {
    shutdown.await;
    set_serving(false);
}
