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

    /// The bucket, when one of `servers` signs in with a person's sign-in
    /// (`auth = "oauth"`); `None` otherwise. A worker does not create it:
    /// `baton mcp login` does.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Config`] when no one signed in yet, naming the login to
    /// run; [`ErrorKind::Nats`] when JetStream cannot be asked.
    pub async fn for_servers(
        servers: &[crate::spec::McpSpec],
        client: &async_nats::Client,
        subjects: &Subjects,
    ) -> Result<Option<Self>, Error> {
        if !servers
            .iter()
            .any(|server| server.auth == Some(crate::spec::McpAuth::Oauth))
        {
            return Ok(None);
        }
        match Self::existing(client, subjects).await? {
            Some(tokens) => Ok(Some(tokens)),
            None => {
                let url = (servers.iter())
                    .find(|server| server.auth == Some(crate::spec::McpAuth::Oauth))
                    .and_then(|server| server.url.as_deref())
                    .unwrap_or("URL");
                Err(Error::new(
                    ErrorKind::Config,
                    format!(
                        "no MCP sign-in found: no one signed in yet (run `baton mcp login {url}` once, for every worker), or this worker may not read the sign-ins (under generated permissions: `baton permissions worker NAME --mcp-login {url}`)"
                    ),
                ))
            }
        }
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
        for key in keys {
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
    pub(crate) fn of(&self, url: &str) -> ServerTokens {
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
pub(crate) struct ServerTokens {
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
    /// the old one (and may revoke them all). The lock is the key
    /// `<key>.refresh`, created only if absent, holding when it was taken;
    /// one older than [`REFRESH_LOCK_STALE`] (its holder died) is taken
    /// over. The SDK loads the sign-in again once it holds it, so a worker
    /// that waited refreshes from the tokens the first one kept.
    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        let lock = format!("{}.refresh", self.key);
        let failed = |err: &dyn std::fmt::Display| {
            AuthError::CredentialStoreError(format!("cannot take the refresh lock: {err}"))
        };
        let started = std::time::Instant::now();
        loop {
            let now = baton_proto::now_ms();
            match self.store.create(&lock, now.to_string().into()).await {
                Ok(_) => {
                    return Ok(Some(CredentialRefreshGuard::new(Refreshing {
                        store: self.store.clone(),
                        lock,
                    })));
                }
                Err(err) if err.kind() == kv::CreateErrorKind::AlreadyExists => {}
                Err(err) => return Err(failed(&err)),
            }
            let held = (self.store.entry(&lock).await).map_err(|err| failed(&err))?;
            if let Some(held) = held {
                let since = std::str::from_utf8(&held.value)
                    .ok()
                    .and_then(|ms| ms.parse::<u64>().ok())
                    .unwrap_or(0);
                if now.saturating_sub(since) > REFRESH_LOCK_STALE.as_millis() as u64 {
                    // Its holder died mid-refresh: take it over, unless
                    // another worker just did.
                    let taken = self
                        .store
                        .update(&lock, now.to_string().into(), held.revision)
                        .await;
                    if taken.is_ok() {
                        return Ok(Some(CredentialRefreshGuard::new(Refreshing {
                            store: self.store.clone(),
                            lock,
                        })));
                    }
                }
            }
            if started.elapsed() > REFRESH_LOCK_STALE {
                return Err(failed(&"another worker has held it too long"));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}

/// How long a refresh may hold the lock before another worker takes it.
const REFRESH_LOCK_STALE: std::time::Duration = std::time::Duration::from_secs(45);

/// A refresh in progress: the lock is released (deleted) when it ends.
struct Refreshing {
    store: kv::Store,
    lock: String,
}

impl Drop for Refreshing {
    fn drop(&mut self) {
        let (store, lock) = (self.store.clone(), std::mem::take(&mut self.lock));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(err) = store.delete(&lock).await {
                    tracing::warn!(%err, "cannot release the refresh lock; it goes stale in 45 s");
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
