//! A key-value bucket followed into memory: every entry, from the stored
//! history on, handed to the caller as it arrives, and the watch reopened
//! with backoff whenever it ends or fails. The cancelled sessions, the
//! followers of live events and (in `baton-agents`) the shared rate-limit
//! schedules are kept this way.

use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::kv;
use futures::StreamExt;
use tokio::task::JoinHandle;

use crate::error::{Error, ErrorKind};

/// What the watch tells its caller.
pub enum Seen<'a> {
    /// An entry, stored before the watch or written since.
    Entry(&'a kv::Entry),
    /// The stored entries are all read: from now on the memory is current.
    Current,
    /// The watch stopped (an error, or a reconnect ended it); it reopens and
    /// reads the history again.
    Lost,
}

/// Follows the bucket `open` opens, calling `seen` for what it learns.
/// Returns once the stored entries are read (or after `ready_within`, with
/// a warning), and keeps following in the returned task. `what` names the
/// bucket's content in logs ("cancelled sessions"), `bucket` the bucket
/// itself, for the hint that a permission may be missing.
pub async fn watch<O, F, S>(
    what: &'static str,
    bucket: String,
    open: O,
    seen: S,
    ready_within: Duration,
) -> JoinHandle<()>
where
    O: Fn() -> F + Send + Sync + 'static,
    F: Future<Output = Result<kv::Store, Error>> + Send,
    S: Fn(Seen<'_>) + Send + Sync + 'static,
{
    let (task, is_ready) = follow_in_background(what, bucket, open, seen);
    if tokio::time::timeout(ready_within, is_ready).await.is_err() {
        tracing::warn!("{what} not read yet; serving, and reading them on");
    }
    task
}

/// [`watch`], without waiting: the task, and what says when the stored
/// entries are read.
pub(crate) fn follow_in_background<O, F, S>(
    what: &'static str,
    bucket: String,
    open: O,
    seen: S,
) -> (JoinHandle<()>, tokio::sync::oneshot::Receiver<()>)
where
    O: Fn() -> F + Send + Sync + 'static,
    F: Future<Output = Result<kv::Store, Error>> + Send,
    S: Fn(Seen<'_>) + Send + Sync + 'static,
{
    let (ready, is_ready) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut ready = Some(ready);
        let mut pause = Duration::from_secs(1);
        loop {
            let followed = follow(what, &open, &seen, &mut ready).await;
            seen(Seen::Lost);
            match followed {
                // The watch ran and ended (a reconnect): reopen it soon.
                Ok(()) => pause = Duration::from_secs(1),
                Err(err) => tracing::warn!(
                    error = %err,
                    retry_in = ?pause,
                    "the watch of {what} stopped (does this user's permission block grant the \
                     {bucket} bucket? see `baton permissions`)"
                ),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(30));
        }
    });
    (task, is_ready)
}

async fn follow<O, F, S>(
    what: &'static str,
    open: &O,
    seen: &S,
    ready: &mut Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<(), Error>
where
    O: Fn() -> F,
    F: Future<Output = Result<kv::Store, Error>>,
    S: Fn(Seen<'_>),
{
    let failed = |verb: &str, err: Box<dyn std::error::Error + Send + Sync>| {
        Error::with_source(
            ErrorKind::JetStream,
            format!("cannot {verb} the {what}"),
            err,
        )
    };
    let store = open().await?;
    let mut entries = store
        .watch_with_history(">")
        .await
        .map_err(|err| failed("watch", err.into()))?;
    let empty = store
        .status()
        .await
        .map_err(|err| failed("read", err.into()))?
        .values()
        == 0;
    let current = |ready: &mut Option<tokio::sync::oneshot::Sender<()>>| {
        seen(Seen::Current);
        if let Some(ready) = ready.take() {
            let _ = ready.send(());
        }
    };
    if empty {
        current(ready);
    }
    while let Some(entry) = entries.next().await {
        let entry = entry.map_err(|err| failed("watch", err.into()))?;
        seen(Seen::Entry(&entry));
        if entry.delta == 0 {
            current(ready);
        }
    }
    Ok(())
}
