//! Where OAuth sign-ins to MCP servers are kept: the JetStream bucket
//! `BATON_MCP_AUTH`, a key per server (a hash of its URL). `baton mcp
//! login` writes one; the workers of agent types that use the server read
//! it and write the refreshed tokens back, so a person signs in once for
//! every worker. Tokens are never logged.

use async_nats::jetstream::{self, kv};
use baton_proto::Subjects;
use rmcp::transport::auth::{
    AuthError, CredentialRefreshGuard, CredentialStore, StoredCredentials,
};
use sha2::{Digest, Sha256};

use crate::{Error, ErrorKind};

/// The sign-ins of one deployment.
#[derive(Clone)]
pub struct Tokens {
    store: kv::Store,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tokens")
    }
}

impl Tokens {
    /// Opens (or creates, with `replicas`) the bucket under `subjects`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Nats`] when JetStream refuses it (often a permission).
    pub async fn open(
        client: &async_nats::Client,
        subjects: &Subjects,
        replicas: usize,
    ) -> Result<Self, Error> {
        let bucket = subjects.mcp_auth_bucket();
        let config = kv::Config {
            bucket: bucket.clone(),
            description: "Baton: OAuth sign-ins to MCP servers, a key per server".to_owned(),
            history: 1,
            num_replicas: replicas,
            ..Default::default()
        };
        let store = baton_nats::nats::provision::key_value(&jetstream::new(client.clone()), config)
            .await
            .map_err(|err| {
                Error::with_source(
                    ErrorKind::Nats,
                    format!("cannot open the bucket {bucket}"),
                    err,
                )
            })?;
        Ok(Self { store })
    }

    /// The bucket, if someone signed in already: for a reader that must
    /// not create it (`baton doctor`).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Nats`] when JetStream cannot be asked.
    pub async fn existing(
        client: &async_nats::Client,
        subjects: &Subjects,
    ) -> Result<Option<Self>, Error> {
        let bucket = subjects.mcp_auth_bucket();
        match jetstream::new(client.clone()).get_key_value(&bucket).await {
            Ok(store) => Ok(Some(Self { store })),
            Err(err) if err.kind() == jetstream::context::KeyValueErrorKind::GetBucket => Ok(None),
            Err(err) => Err(Error::with_source(
                ErrorKind::Nats,
                format!("cannot read the bucket {bucket}"),
                err,
            )),
        }
    }

    /// Every sign-in kept, with its server's URL.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Nats`] when the bucket cannot be listed or read.
    pub async fn all(&self) -> Result<Vec<(String, SignedIn)>, Error> {
        use futures::TryStreamExt as _;
        let failed = |err: &dyn std::fmt::Display| {
            Error::new(ErrorKind::Nats, format!("cannot list the sign-ins: {err}"))
        };
        let keys: Vec<String> = (self.store.keys().await.map_err(|err| failed(&err))?)
            .try_collect()
            .await
            .map_err(|err| failed(&err))?;
        let mut all = Vec::new();
        // A server's key, not its refresh lock (`<key>.refresh`).
        for key in keys.into_iter().filter(|key| !key.contains('.')) {
            let kept = ServerTokens {
                store: self.store.clone(),
                key,
                url: String::new(),
            };
            if let Some(entry) = kept.entry().await.map_err(|err| failed(&err))? {
                all.push((entry.url.clone(), SignedIn::of(entry.credentials)));
            }
        }
        Ok(all)
    }

    /// The key of the server at `url`.
    pub(crate) fn key(url: &str) -> String {
        let digest = Sha256::digest(url.as_bytes());
        format!("s{}", baton_proto::hex(&digest[..16]))
    }

    /// The sign-in to the server at `url`, as the MCP SDK keeps it.
    #[must_use]
    pub fn of(&self, url: &str) -> ServerTokens {
        ServerTokens {
            store: self.store.clone(),
            key: Self::key(url),
            url: url.to_owned(),
        }
    }

    /// What is kept for the server at `url`: `None` when no one signed in.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Nats`] when the bucket cannot be read.
    pub async fn signed_in(&self, url: &str) -> Result<Option<SignedIn>, Error> {
        let stored = (self.of(url).load().await).map_err(|err| {
            Error::new(ErrorKind::Nats, format!("cannot read the sign-in: {err}"))
        })?;
        Ok(stored.map(SignedIn::of))
    }
}

impl Tokens {
    /// Notes how the sign-in to `url` was made (after it was kept).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Nats`] when the bucket cannot be read or written.
    pub(crate) async fn note_client(&self, url: &str, client: KeptClient) -> Result<(), Error> {
        let server = self.of(url);
        let failed = |err: &dyn std::fmt::Display| {
            Error::new(ErrorKind::Nats, format!("cannot keep the sign-in: {err}"))
        };
        let Some(mut kept) = server.entry().await.map_err(|err| failed(&err))? else {
            return Ok(());
        };
        kept.client = Some(client);
        let bytes = serde_json::to_vec(&kept).map_err(|err| failed(&err))?;
        (self.store.put(&server.key, bytes.into()).await)
            .map(drop)
            .map_err(|err| failed(&err))
    }

    /// How the sign-in to `url` was made, and the scopes it has: `None`
    /// when no one signed in to it.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Nats`] when the bucket cannot be read.
    pub async fn client_of(&self, url: &str) -> Result<Option<(KeptClient, Vec<String>)>, Error> {
        let kept = (self.of(url).entry().await).map_err(|err| {
            Error::new(ErrorKind::Nats, format!("cannot read the sign-in: {err}"))
        })?;
        Ok(kept.map(|kept| {
            (
                kept.client.unwrap_or_default(),
                kept.credentials.granted_scopes,
            )
        }))
    }
}

/// What a sign-in holds, without its tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedIn {
    /// The OAuth client it signed in as.
    pub client_id: String,
    /// The scopes granted.
    pub scopes: Vec<String>,
    /// Whether it can be refreshed (the server gave a refresh token).
    pub refreshable: bool,
    /// When its token was received, in seconds since the epoch.
    pub at: Option<u64>,
    /// How long its token lasts from then, in seconds, as the server said.
    pub lasts: Option<u64>,
}

impl SignedIn {
    /// What `stored` holds, without its tokens.
    fn of(stored: StoredCredentials) -> Self {
        let token =
            (stored.token_response.as_ref()).and_then(|token| serde_json::to_value(token).ok());
        let field = |name: &str| {
            token
                .as_ref()
                .and_then(|token| token.get(name))
                .filter(|v| !v.is_null())
                .cloned()
        };
        Self {
            client_id: stored.client_id,
            scopes: stored.granted_scopes,
            refreshable: field("refresh_token").is_some(),
            at: stored.token_received_at,
            lasts: field("expires_in").and_then(|v| v.as_u64()),
        }
    }
}

/// What the bucket holds for one server: its URL (the key is a hash of
/// it), the SDK's credentials, and how the person signed in (so that a
/// new sign-in, `baton inbox authorize`, goes the same way).
#[derive(serde::Serialize, serde::Deserialize)]
struct Kept {
    url: String,
    credentials: StoredCredentials,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client: Option<KeptClient>,
}

/// How a person signed in, without secrets: as a pre-registered client
/// (`id`), or as the client of a metadata document (`metadata_url`); with
/// neither, by dynamic registration.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeptClient {
    /// The pre-registered client's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The client ID metadata document's URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_url: Option<String>,
}

/// One server's sign-in in the bucket.
pub struct ServerTokens {
    store: kv::Store,
    key: String,
    url: String,
}

impl ServerTokens {
    /// What is kept under the key, if anything.
    async fn entry(&self) -> Result<Option<Kept>, AuthError> {
        let entry = (self.store.get(&self.key).await)
            .map_err(|err| AuthError::InternalError(format!("cannot read the sign-in: {err}")))?;
        entry
            .map(|bytes| serde_json::from_slice(&bytes))
            .transpose()
            .map_err(|err| AuthError::InternalError(format!("a sign-in that is not one: {err}")))
    }
}

#[async_trait::async_trait]
impl CredentialStore for ServerTokens {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        Ok(self.entry().await?.map(|kept| kept.credentials))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        // A refresh keeps how the person signed in.
        let client = self.entry().await?.and_then(|kept| kept.client);
        let kept = Kept {
            url: self.url.clone(),
            credentials,
            client,
        };
        let bytes = serde_json::to_vec(&kept)
            .map_err(|err| AuthError::InternalError(format!("cannot encode the sign-in: {err}")))?;
        (self.store.put(&self.key, bytes.into()).await)
            .map(|_| ())
            .map_err(|err| AuthError::InternalError(format!("cannot keep the sign-in: {err}")))
    }

    async fn clear(&self) -> Result<(), AuthError> {
        (self.store.purge(&self.key).await)
            .map_err(|err| AuthError::InternalError(format!("cannot forget the sign-in: {err}")))
    }

    /// One refresh at a time across every worker that shares the sign-in:
    /// a server that rotates refresh tokens refuses a second refresh with
    /// the old one (and may revoke them all). See [`ServerTokens::lock`].
    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        self.lock()
            .await
            .map(|held| Some(CredentialRefreshGuard::new(held)))
    }
}

impl ServerTokens {
    /// Takes the lock of this sign-in's refresh (and of a new sign-in's
    /// write): the key `<key>.refresh`, created only if absent. A holder
    /// that died is taken over once this worker has seen the same holder
    /// (the same revision) for [`REFRESH_LOCK_STALE`] by its own clock; it
    /// gives up after twice that.
    ///
    /// # Errors
    ///
    /// [`AuthError::CredentialStoreError`] when the bucket refuses, or the
    /// holder kept it for twice the stale time.
    pub async fn lock(&self) -> Result<Refreshing, AuthError> {
        let lock = format!("{}.refresh", self.key);
        let failed = |err: &dyn std::fmt::Display| {
            AuthError::CredentialStoreError(format!("cannot take the refresh lock: {err}"))
        };
        let started = std::time::Instant::now();
        let mut seen: Option<(u64, std::time::Instant)> = None;
        loop {
            let mark = baton_proto::now_ms().to_string();
            match self.store.create(&lock, mark.clone().into()).await {
                Ok(revision) => return Ok(self.held(lock, revision)),
                Err(err) if err.kind() == kv::CreateErrorKind::AlreadyExists => {}
                Err(err) => return Err(failed(&err)),
            }
            let holder = (self.store.entry(&lock).await).map_err(|err| failed(&err))?;
            if let Some(holder) = holder {
                match seen {
                    Some((revision, since))
                        if revision == holder.revision && since.elapsed() > REFRESH_LOCK_STALE =>
                    {
                        // Its holder died mid-refresh: take it over, unless
                        // another worker just did.
                        let taken = self.store.update(&lock, mark.into(), holder.revision).await;
                        if let Ok(revision) = taken {
                            tracing::warn!(
                                "a refresh lock held for {REFRESH_LOCK_STALE:?} was taken over"
                            );
                            return Ok(self.held(lock, revision));
                        }
                    }
                    Some((revision, _)) if revision == holder.revision => {}
                    _ => seen = Some((holder.revision, std::time::Instant::now())),
                }
            }
            if started.elapsed() > 2 * REFRESH_LOCK_STALE {
                return Err(failed(&"another worker has held it too long"));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    fn held(&self, lock: String, revision: u64) -> Refreshing {
        Refreshing {
            store: self.store.clone(),
            lock,
            revision,
        }
    }
}

/// How long a holder of the refresh lock may go unchanged before another
/// worker takes it over.
const REFRESH_LOCK_STALE: std::time::Duration = std::time::Duration::from_secs(45);

/// The refresh lock, held: released (deleted, if this worker still holds
/// it) when dropped.
pub struct Refreshing {
    store: kv::Store,
    lock: String,
    revision: u64,
}

impl Refreshing {
    /// Releases it now (a process about to end cannot leave it to `Drop`,
    /// whose release runs on the runtime).
    pub async fn release(mut self) {
        let lock = std::mem::take(&mut self.lock);
        if let Err(err) = (self.store)
            .delete_expect_revision(&lock, Some(self.revision))
            .await
        {
            tracing::debug!(%err, "the refresh lock was not this process's to release");
        }
    }
}

impl Drop for Refreshing {
    fn drop(&mut self) {
        if self.lock.is_empty() {
            return;
        }
        let (store, lock, revision) = (
            self.store.clone(),
            std::mem::take(&mut self.lock),
            self.revision,
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                // Only this holder's: one that took it over keeps it.
                if let Err(err) = store.delete_expect_revision(&lock, Some(revision)).await {
                    tracing::debug!(%err, "the refresh lock was not this worker's to release");
                }
            });
        }
    }
}

/// What a worker that signs in to the servers at `urls` does with their
/// sign-ins: reads and refreshes those keys, and no other server's.
#[must_use]
pub fn footprint(subjects: &Subjects, urls: &[String]) -> baton_proto::footprint::Footprint {
    use baton_proto::footprint::{Footprint, api};
    if urls.is_empty() {
        return Footprint::new();
    }
    let bucket = subjects.mcp_auth_bucket();
    let stream = format!("KV_{bucket}");
    let keys = urls.iter().map(|url| Tokens::key(url));
    let mut allowed = vec![api(format_args!("STREAM.INFO.{stream}"))];
    for key in keys {
        // The sign-in, and the lock of its refresh.
        for key in [key.clone(), format!("{key}.refresh")] {
            allowed.push(api(format_args!("DIRECT.GET.{stream}.$KV.{bucket}.{key}")));
            allowed.push(format!("$KV.{bucket}.{key}"));
        }
    }
    Footprint::new().publishes(allowed)
}
