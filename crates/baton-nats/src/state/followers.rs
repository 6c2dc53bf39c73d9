//! Who follows live events, so that a worker publishes an event it does not
//! store only when someone listens.
//!
//! A follower (the console, the router's relay, a client following a
//! session: `baton send`, `baton live`, the gateways) keeps a key in the
//! `BATON_FOLLOWERS` bucket while it listens: `all.<id>` for every session,
//! `<session>.<id>` for one. [`follow`] writes it, rewrites it every
//! [`REFRESH`], and deletes it when dropped; the bucket forgets a key after
//! [`TTL`], so a follower that crashed stops counting by itself.
//!
//! Every worker watches the bucket into memory ([`Followers`]), so the check
//! on the hot path is a lookup, not a round trip. The watch is
//! asynchronous: a follower that starts mid-session sees the events
//! published once its key has reached the workers, normally within a round
//! trip. A worker counts a key for [`TTL`] from when it saw it (not by the
//! server's clock). While the watch is not running (not yet read, or
//! failing), a worker publishes every live event, as before there was a
//! bucket.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_nats::jetstream::{self, kv};
use baton_proto::Subjects;
use baton_proto::footprint::Footprint;
use uuid::Uuid;

use crate::error::Error;
use crate::nats::watched::{self, Seen};

/// How long the bucket keeps a key that is not rewritten.
pub(crate) use crate::state::buckets::FOLLOWER_TTL as TTL;
/// How often a follower rewrites its key.
pub(crate) const REFRESH: Duration = Duration::from_secs(10);

/// Opens the bucket of followers, creating it if it is missing. Its keys
/// are short-lived flags, kept in memory.
pub(crate) async fn bucket(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    replicas: usize,
) -> Result<kv::Store, Error> {
    crate::state::Bucket::Followers
        .open(jetstream, subjects, replicas)
        .await
}

/// What a follower follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every session's live events.
    All,
    /// One session's.
    Session(Uuid),
}

impl Scope {
    /// The scope of key `key` (`all.<id>` or `<session>.<id>`).
    fn of_key(key: &str) -> Option<Self> {
        let (scope, _follower) = key.split_once('.')?;
        if scope == "all" {
            return Some(Self::All);
        }
        scope.parse().ok().map(Self::Session)
    }

    fn key(self, follower: Uuid) -> String {
        match self {
            Self::All => format!("all.{}", follower.simple()),
            Self::Session(session) => format!("{session}.{}", follower.simple()),
        }
    }
}

/// The followers a worker knows of, kept current by [`watch`].
#[derive(Debug, Default)]
pub struct Followers {
    known: Mutex<Known>,
    /// Whether the watch is current; until it is, everything is wanted.
    current: AtomicBool,
}

/// Each scope's followers, by key, with when the bucket forgets each.
#[derive(Debug, Default)]
struct Known {
    scopes: HashMap<Scope, HashMap<String, SystemTime>>,
    /// When expired keys were last dropped.
    pruned: Option<SystemTime>,
}

impl Followers {
    /// Whether a live event of `session` has anyone to reach: a follower of
    /// every session or of this one, or a watch that is not current.
    pub fn wants(&self, session: Uuid) -> bool {
        if !self.current.load(Ordering::Relaxed) {
            return true;
        }
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if known.scopes.is_empty() {
            return false;
        }
        let now = SystemTime::now();
        [Scope::All, Scope::Session(session)].iter().any(|scope| {
            known
                .scopes
                .get(scope)
                .is_some_and(|keys| keys.values().any(|until| *until > now))
        })
    }

    fn seen(&self, seen: Seen<'_>) {
        match seen {
            Seen::Entry(entry) => {
                let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
                known.prune(SystemTime::now());
                let Some(scope) = Scope::of_key(&entry.key) else {
                    return;
                };
                if entry.operation == kv::Operation::Put {
                    // From when this worker saw it, not the server's clock: a
                    // worker whose clock is off still counts a live follower.
                    // (A key read from the history may so count up to one TTL
                    // longer than the bucket keeps it: an event more, not less.)
                    let keys = known.scopes.entry(scope).or_default();
                    keys.insert(entry.key.clone(), SystemTime::now() + TTL);
                } else if let Some(keys) = known.scopes.get_mut(&scope) {
                    keys.remove(&entry.key);
                    if keys.is_empty() {
                        known.scopes.remove(&scope);
                    }
                }
            }
            Seen::Current => self.current.store(true, Ordering::Relaxed),
            Seen::Lost => {
                self.current.store(false, Ordering::Relaxed);
                *self.known.lock().unwrap_or_else(|e| e.into_inner()) = Known::default();
            }
        }
    }
}

impl Known {
    /// Drops the keys the bucket has forgotten, at most once a second.
    fn prune(&mut self, now: SystemTime) {
        if self
            .pruned
            .is_some_and(|at| now.duration_since(at).unwrap_or_default() < Duration::from_secs(1))
        {
            return;
        }
        self.pruned = Some(now);
        self.scopes.retain(|_, keys| {
            keys.retain(|_, until| *until > now);
            !keys.is_empty()
        });
    }
}

/// Follows the bucket of followers into `followers`; see
/// [`watched::watch`].
pub async fn watch(
    jetstream: jetstream::Context,
    subjects: Subjects,
    replicas: usize,
    followers: Arc<Followers>,
    ready_within: Duration,
) -> tokio::task::JoinHandle<()> {
    let name = subjects.followers_bucket();
    let open = move || {
        let (jetstream, subjects) = (jetstream.clone(), subjects.clone());
        async move { bucket(&jetstream, &subjects, replicas).await }
    };
    let seen = move |seen: Seen<'_>| followers.seen(seen);
    watched::watch("followers of live events", name, open, seen, ready_within).await
}

/// A follower's key, kept while this lives: rewritten every [`REFRESH`],
/// deleted on drop.
#[derive(Debug)]
pub struct Following {
    refresh: tokio::task::JoinHandle<()>,
    client: async_nats::Client,
    /// The key's subject in the bucket.
    subject: String,
}

impl Drop for Following {
    fn drop(&mut self) {
        self.refresh.abort();
        let (client, subject) = (self.client.clone(), std::mem::take(&mut self.subject));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("KV-Operation", "DEL");
                let _ = client
                    .publish_with_headers(subject, headers, bytes::Bytes::new())
                    .await;
            });
        }
    }
}

/// Says, in the bucket of followers, that this process listens to `scope`'s
/// live events, until the returned guard is dropped. Subscribe first, then
/// follow. The key is written with a plain publish into the bucket, so
/// following costs no round trip on the caller's path: it reaches the
/// server before anything this connection publishes next, and the workers
/// a moment later. The first follow of a process on a server makes sure the
/// bucket exists (in the background, writing the key again once it does).
/// A write the server refuses (the bucket is not granted to this user)
/// shows in the client's error log; workers then publish only what other
/// followers want.
pub async fn follow(client: &async_nats::Client, subjects: &Subjects, scope: Scope) -> Following {
    let subject = format!(
        "$KV.{}.{}",
        subjects.followers_bucket(),
        scope.key(Uuid::new_v4())
    );
    let put = |client: async_nats::Client, subject: String| async move {
        if let Err(err) = client.publish(subject, bytes::Bytes::new()).await {
            tracing::debug!(error = %err, "cannot write the follower's key");
        }
    };
    put(client.clone(), subject.clone()).await;
    let refresh = tokio::spawn({
        let (client, subject, subjects) = (client.clone(), subject.clone(), subjects.clone());
        async move {
            if ensure_bucket(&client, &subjects).await {
                put(client.clone(), subject.clone()).await;
            }
            loop {
                tokio::time::sleep(REFRESH).await;
                put(client.clone(), subject.clone()).await;
            }
        }
    });
    Following {
        refresh,
        client: client.clone(),
        subject,
    }
}

/// The buckets of followers this process knows exist, by server and name.
static ENSURED: std::sync::LazyLock<Mutex<std::collections::HashSet<String>>> =
    std::sync::LazyLock::new(Mutex::default);

/// Makes sure the bucket of followers exists on `client`'s server, once per
/// process and server; whether it had to look.
async fn ensure_bucket(client: &async_nats::Client, subjects: &Subjects) -> bool {
    let known = format!(
        "{}/{}",
        client.server_info().server_id,
        subjects.followers_bucket()
    );
    if ENSURED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&known)
    {
        return false;
    }
    let jetstream = jetstream::new(client.clone());
    match bucket(&jetstream, subjects, 1).await {
        Ok(_) => {
            ENSURED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(known);
        }
        Err(err) => tracing::warn!(
            error = %err,
            "cannot open the bucket of followers: workers at the `lean` event level may not \
             publish this follower's live events (see `baton permissions`)"
        ),
    }
    true
}

/// What watching the followers uses (every worker).
#[must_use]
pub fn watcher_footprint(subjects: &Subjects) -> Footprint {
    Footprint::kv_watcher(&subjects.followers_bucket())
}

/// What following live events uses: its own key in the bucket, and the
/// bucket's creation when it is missing.
#[must_use]
pub fn follower_footprint(subjects: &Subjects) -> Footprint {
    let stream = format!("KV_{}", subjects.followers_bucket());
    Footprint::new().publishes([
        format!("$KV.{}.>", subjects.followers_bucket()),
        baton_proto::footprint::api(format_args!("STREAM.INFO.{stream}")),
        baton_proto::footprint::api(format_args!("STREAM.CREATE.{stream}")),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_their_scope() {
        let (session, follower) = (Uuid::new_v4(), Uuid::new_v4());
        for scope in [Scope::All, Scope::Session(session)] {
            assert_eq!(Scope::of_key(&scope.key(follower)), Some(scope));
        }
        assert_eq!(Scope::of_key("nonsense"), None);
        assert_eq!(Scope::of_key("nonsense.x"), None);
    }

    fn know(followers: &Followers, scope: Scope, until: SystemTime) {
        let mut known = followers.known.lock().unwrap();
        let keys = known.scopes.entry(scope).or_default();
        keys.insert(scope.key(Uuid::new_v4()), until);
    }

    #[test]
    fn a_worker_wants_what_is_followed_and_everything_until_its_watch_is_current() {
        let followers = Followers::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        assert!(followers.wants(a), "not current yet: everything goes");
        followers.seen(Seen::Current);
        assert!(!followers.wants(a), "current, nobody follows");
        know(&followers, Scope::Session(a), SystemTime::now() + TTL);
        assert!(followers.wants(a) && !followers.wants(b));
        know(
            &followers,
            Scope::All,
            SystemTime::now() - Duration::from_secs(1),
        );
        assert!(!followers.wants(b), "an expired key counts for nothing");
        know(&followers, Scope::All, SystemTime::now() + TTL);
        assert!(followers.wants(b), "a follower of every session");
        followers.seen(Seen::Lost);
        assert!(followers.wants(b), "a lost watch lets everything go");
    }
}
