//! How the pull loop stops: in-flight work finishes within the grace, and
//! the last acks leave, unless the server is gone, when nothing can be
//! acked and nothing is waited for.

use std::time::Duration;

use tokio::task::JoinSet;

/// How long the last acks may take to leave on shutdown.
const FLUSH_BOUND: Duration = Duration::from_secs(2);

/// Sends what the connection still buffers (the last acks), if the server
/// is there to take it: async-nats holds a flush until it reconnects, which
/// with the server gone is never, and a process must still stop.
pub(super) async fn flush(client: &async_nats::Client) {
    if !connected(client) {
        tracing::warn!(
            "NATS unreachable: acks not yet sent are lost; the server redelivers their messages after ack_wait"
        );
        return;
    }
    match tokio::time::timeout(FLUSH_BOUND, client.flush()).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => {
            tracing::warn!(error = %err, "could not flush the connection on shutdown");
        }
        Err(_) => tracing::warn!(
            bound = ?FLUSH_BOUND,
            "the last acks did not leave in time; the server redelivers their messages after ack_wait"
        ),
    }
}

fn connected(client: &async_nats::Client) -> bool {
    client.connection_state() == async_nats::connection::State::Connected
}

/// Resolves once the connection has been down for `UNREACHABLE_AFTER`: a
/// server that is gone can take no ack, so waiting for in-flight work
/// gains nothing. (Not at the first sight of it: a reconnect to another
/// node of a cluster takes a moment.)
async fn unreachable(client: &async_nats::Client) {
    const POLL: Duration = Duration::from_millis(100);
    const UNREACHABLE_AFTER: Duration = Duration::from_millis(500);
    let mut down = Duration::ZERO;
    while down < UNREACHABLE_AFTER {
        tokio::time::sleep(POLL).await;
        down = if connected(client) {
            Duration::ZERO
        } else {
            down + POLL
        };
    }
}

/// Lets in-flight work finish within `grace`; what is still running then
/// stays un-acked and is redelivered. The hand-back of messages that open
/// pull requests still deliver (`draining`) gets what is left of `grace`.
/// With the server unreachable nothing can be acked or handed back, so
/// nothing is waited for.
pub(super) async fn finish(
    client: &async_nats::Client,
    mut tasks: JoinSet<()>,
    draining: tokio::task::JoinHandle<()>,
    grace: Duration,
) {
    let until = tokio::time::Instant::now() + grace;
    let in_flight = tasks.len();
    if in_flight > 0 {
        tracing::info!(in_flight, ?grace, "shutting down: finishing in-flight work");
    }
    let finished = tokio::select! {
        finished = tokio::time::timeout_at(until, async { while tasks.join_next().await.is_some() {} }) => finished.is_ok(),
        () = unreachable(client) => {
            if !tasks.is_empty() {
                tracing::warn!(
                    abandoned = tasks.len(),
                    "NATS unreachable: stopping without waiting for in-flight work; its messages stay un-acked and are redelivered after ack_wait"
                );
                tasks.abort_all();
            }
            draining.abort();
            return;
        }
    };
    if !finished {
        tracing::warn!(
            abandoned = tasks.len(),
            "grace period over: unfinished messages stay un-acked for redelivery"
        );
        tasks.abort_all();
    }
    let abort = draining.abort_handle();
    let handed_back = tokio::select! {
        handed_back = tokio::time::timeout_at(until, draining) => handed_back.is_ok(),
        () = unreachable(client) => false,
    };
    if !handed_back {
        abort.abort();
        tracing::debug!(
            "stopped handing back what open pull requests deliver; such messages are redelivered after ack_wait"
        );
    }
}
