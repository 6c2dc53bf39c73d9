//! `baton a2a serve`: its settings, and the gateway opened and served.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use baton_client::{Client, Inbox, RegistryClient};
use baton_gateway::callers::Callers;
use baton_gateway::listen::Exposure;
use baton_proto::AgentName;

use crate::{Error, Gateway, http, index};

/// How `baton a2a serve` runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The agent types to expose; empty: every live one the registry knows.
    pub only: Vec<AgentName>,
    /// How long a blocking `SendMessage` waits for its session.
    pub timeout: Duration,
    /// The base URL the cards give; `None`: `http://` and the request's `Host`.
    pub public_url: Option<String>,
    /// Where to listen.
    pub listen: SocketAddr,
    /// The token JSON-RPC calls must carry as `Authorization: Bearer`.
    pub token: Option<String>,
    /// A file of named callers (`NAME TOKEN` lines), instead of `token`:
    /// each caller continues and reads only what it started.
    pub callers: Option<std::path::PathBuf>,
    /// Replicas of the task bucket.
    pub replicas: usize,
    /// The most a session started here may spend on models; a message may
    /// ask for less with `metadata.budget_tokens` and `metadata.budget_cost`.
    pub budget: baton_proto::Budget,
    /// What a message does while a turn of its context runs (`enqueue` by
    /// default); a message's metadata `overlap` may say otherwise.
    pub overlap: baton_proto::Overlap,
}

/// Serves A2A until `shutdown`.
///
/// # Errors
///
/// When `listen` is beyond loopback without a token, cannot be bound, or
/// the task bucket or the inbox cannot be opened.
pub async fn serve(
    client: Client,
    settings: Settings,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let exposure = Exposure {
        what: "A2A",
        risk: "a call starts and cancels sessions",
        token_flag: "--access-token (or BATON_A2A_TOKEN)",
        loopback: "--listen 127.0.0.1:8070",
    };
    let callers = match &settings.callers {
        Some(path) => Some(Callers::load(path)?),
        None => {
            baton_gateway::listen::token(settings.listen, settings.token.as_deref(), &exposure)?
                .map(Callers::one)
        }
    };
    client.ensure_streams().await?;
    let nats = client.jetstream().client();
    let subjects = client.subjects().clone();
    let index = index::Index::open(client.jetstream(), &subjects, settings.replicas).await?;
    let inbox = Inbox::open(nats.clone(), subjects.clone(), settings.replicas).await?;
    // What an earlier release left waiting is found by its session too.
    if let Err(err) = inbox.note_older_entries().await {
        tracing::warn!(error = %err, "cannot name the inbox's older entries by their session");
    }
    let conversations =
        baton_client::conversation::Conversations::open(client.clone(), settings.replicas)
            .await
            .map_err(|err| Error::store(format!("cannot open the conversations: {err}")))?;
    let gateway = Gateway {
        conversations,
        overlap: settings.overlap,
        registry: RegistryClient::new(nats, &subjects),
        client,
        inbox,
        index,
        only: Arc::new(settings.only.clone()),
        timeout: settings.timeout,
        budget: settings.budget,
        public_url: settings
            .public_url
            .clone()
            .map(|url| url.trim_end_matches('/').to_owned()),
        token_required: callers.is_some(),
    };
    http::serve(gateway, settings.listen, callers, shutdown).await
}
