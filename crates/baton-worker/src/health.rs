//! Whether this process serves: set once a worker or the router has its
//! consumer and starts pulling, cleared when it starts to drain. Probes
//! (`baton`'s `/readyz`) read it together with the connection's state.

use std::sync::atomic::{AtomicBool, Ordering};

static SERVING: AtomicBool = AtomicBool::new(false);

/// Whether a worker or router of this process pulls its messages now.
#[must_use]
pub fn serving() -> bool {
    SERVING.load(Ordering::Relaxed)
}

pub(crate) fn set_serving(serving: bool) {
    SERVING.store(serving, Ordering::Relaxed);
}

/// `shutdown`, which first marks the process as no longer serving.
pub(crate) async fn draining(shutdown: impl std::future::Future<Output = ()>) {
    shutdown.await;
    set_serving(false);
}
