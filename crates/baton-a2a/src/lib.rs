//! `baton a2a serve`: Baton agent types, and the ingress, as A2A agents
//! (Agent2Agent protocol v1.0, JSON-RPC and HTTP+JSON bindings, streaming
//! over SSE).
//!
//! - `GET /.well-known/agent-card.json`: the ingress's card; its skills are
//!   the exposed agent types. `POST /` takes its JSON-RPC calls: a task
//!   goes to the ingress, and the router's rules pick the first agent.
//! - `GET /agents/{name}/.well-known/agent-card.json` and
//!   `POST /agents/{name}`: agent type `name` as an agent of its own.
//! - HTTP+JSON at the same bases: `POST /message:send`, `/message:stream`,
//!   `GET /tasks`, `/tasks/{id}`, `POST /tasks/{id}:cancel`,
//!   `/tasks/{id}:subscribe` (and under `/agents/{name}`). Both bindings
//!   call the same operations (`calls`, `ops`); only the encoding differs.
//!
//! An A2A task is a Baton session (the task id is the session id). Its state
//! follows the session's events; a session waiting for a person is
//! `TASK_STATE_INPUT_REQUIRED`, and the client's next message to the task is
//! the person's answer, through the inbox. `CancelTask` cancels the session.
//!
//! An A2A context is a Baton conversation (`baton_client::conversation`):
//! a message without a task id is the next turn of its context, which goes
//! to the agent that holds the conversation, with the transcript so far. A
//! message that arrives while a turn runs waits for it (`enqueue`), or is
//! refused (`reject`), as the gateway's `--overlap` or the message's
//! metadata `overlap` says.
//!
//! The wire types are the A2A project's own (`a2a-lf`). Its server and
//! client crates are not used: they bring a gRPC stack (tonic, prost and a
//! vendored protoc at build time) and a second major version of reqwest,
//! for a JSON-RPC binding that is a few routes of axum here.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use baton_client::{Client, Inbox, RegistryClient};
use baton_gateway::listen::Exposure;
use baton_proto::{AgentName, LookupRequest};

mod calls;
mod card;
mod errors;
mod http;
mod index;

pub use baton_gateway::Error;
use baton_gateway::callers::Callers;
pub use index::footprint;
mod list;
mod ops;
mod rest;
mod rpc;
mod task;
mod terms;
mod turns;

/// What the A2A agents reach.
#[derive(Clone)]
pub struct Gateway {
    client: Client,
    registry: RegistryClient,
    inbox: Inbox,
    index: index::Index,
    /// The agent types exposed; empty: every live one the registry knows.
    only: Arc<Vec<AgentName>>,
    /// How long a blocking `SendMessage` waits for its session.
    timeout: Duration,
    /// The URL clients reach this gateway at, for the cards; `None`: from
    /// each request's `Host`.
    public_url: Option<String>,
    /// Whether calls need the access token (the cards say so).
    token_required: bool,
    /// The most a session it starts may spend; a message may ask for less
    /// (`metadata.budget_tokens`, `metadata.budget_cost`).
    budget: baton_proto::Budget,
    /// Contexts as conversations.
    conversations: baton_client::conversation::Conversations,
    /// What a message does while a turn of its context runs, unless its
    /// metadata says otherwise.
    overlap: baton_proto::Overlap,
}

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
        Some(path) => Some(Callers::load(path).map_err(Error::Config)?),
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
    let conversations =
        baton_client::conversation::Conversations::open(client.clone(), settings.replicas)
            .await
            .map_err(|err| Error::Store(format!("cannot open the conversations: {err}")))?;
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

impl Gateway {
    /// The exposed agent types and their registry entries.
    async fn exposed(&self) -> Vec<(String, Option<baton_proto::Candidate>)> {
        let candidates = match self.registry.lookup(&LookupRequest::default()).await {
            Ok(answer) => answer.candidates,
            Err(err) => {
                tracing::warn!(error = %err, "no registry: the cards have no descriptions");
                Vec::new()
            }
        };
        baton_gateway::exposed(&self.only, &candidates)
            .into_iter()
            .map(|name| {
                let found = candidates.iter().find(|c| c.agent == name).cloned();
                (name, found)
            })
            .collect()
    }

    /// Agent type `name`, if it is exposed.
    async fn agent(&self, name: &str) -> Option<AgentName> {
        let agent = AgentName::new(name).ok()?;
        self.exposes(&agent).await.then_some(agent)
    }

    /// Whether agent type `name` is exposed.
    async fn exposes(&self, name: &AgentName) -> bool {
        if self.only.is_empty() {
            self.client.check_served(name).await.is_ok()
        } else {
            self.only.contains(name)
        }
    }
}
