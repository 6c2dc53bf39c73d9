//! Baton's web console: the latest sessions live, each session's path,
//! events, delegations and context, the agent pools, the dead letters (with
//! replay), the human inbox (with answers), the conversations (each
//! one's turns, linked to their sessions) and the agent types' versions
//! (their rollouts, and what each version holds).
//!
//! One process serves pages rendered on the server and a small script for
//! live updates, both built into the binary. It reads NATS, not other
//! consoles, so any number of replicas may run. It listens on loopback
//! unless given an access token; every form carries a CSRF token; every
//! value from NATS is escaped, and the pages' Content-Security-Policy lets
//! no inline script run.

use std::net::SocketAddr;
use std::sync::Arc;

use baton_client::{Client, Inbox, RegistryClient};
use baton_proto::Subjects;
use tokio::sync::broadcast;

mod app;
mod auth;
mod conversations;
mod decide;
mod feedback;
mod gated;
pub mod index;
mod ops;
mod path;
mod replay;
mod versions;
mod view;
mod web;

pub use auth::Access;
pub use baton_gateway::Error;

/// How a console runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConsoleConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Access token (required beyond loopback).
    pub token: Option<String>,
    /// Link to a trace in a tracing UI, with `{trace_id}` in it.
    pub trace_url: Option<String>,
    /// How many sessions the console keeps in memory (the newest).
    pub sessions: usize,
    /// How many rows the sessions list shows.
    pub shown: usize,
    /// Replicas of the buckets it opens (the inbox).
    pub replicas: usize,
}

impl ConsoleConfig {
    /// A console on `listen` with the defaults.
    #[must_use]
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            listen,
            token: None,
            trace_url: None,
            sessions: 5000,
            shown: 1000,
            replicas: 1,
        }
    }
}

/// Serves the console until `shutdown` resolves.
///
/// # Errors
///
/// When the address is refused (beyond loopback without a token, or in
/// use), or NATS cannot be read.
pub async fn serve(
    config: ConsoleConfig,
    client: Client,
    subjects: Subjects,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    if let Some(url) = &config.trace_url {
        if !url.contains("{trace_id}") {
            return Err(Error::config(
                "--trace-url must contain {trace_id}, where the console puts a session's trace id \
                 (for Jaeger: http://jaeger:16686/trace/{trace_id})"
                    .to_owned(),
            ));
        }
    }
    let access = Access::new(config.listen, config.token.as_deref())?;
    client.ensure_streams().await?;
    let nats = client.jetstream().client();
    let inbox = Inbox::open(nats.clone(), subjects.clone(), config.replicas).await?;
    let index = index::Index::new(config.sessions);
    let (agents_changed, _) = broadcast::channel(16);
    let heartbeats = Arc::default();
    let app = app::App {
        client: client.clone(),
        subjects: subjects.clone(),
        index: index.clone(),
        access,
        inbox,
        registry: RegistryClient::new(nats.clone(), &subjects),
        trace_url: config.trace_url.clone(),
        heartbeats: Arc::clone(&heartbeats),
        agents_changed: agents_changed.clone(),
        shown: config.shown,
        conversations: Arc::default(),
        versions: Arc::default(),
        replicas: config.replicas,
    };
    let listener = baton_gateway::listen::bind(config.listen).await?;
    let local = listener
        .local_addr()
        .map_err(|err| Error::serve("console", err))?;
    let (ready, loaded) = tokio::sync::oneshot::channel();
    let mut following = tokio::spawn(index::follow(
        client.jetstream().clone(),
        subjects.clone(),
        index.clone(),
        ready,
    ));
    // Serve once the stored sessions are in (a page then lists them all),
    // or after a while with what is in so far.
    tokio::select! {
        _ = loaded => {}
        () = tokio::time::sleep(std::time::Duration::from_secs(20)) => {
            tracing::warn!(sessions = index.len(), "still reading the stored sessions; serving meanwhile");
        }
        result = &mut following => return Err(stopped(result)),
    }
    let beats = tokio::spawn(web::follow_heartbeats(
        nats,
        subjects,
        heartbeats,
        agents_changed,
    ));
    tracing::info!(
        url = %format!("http://{local}/"),
        auth = if config.token.is_some() { "token" } else { "none (loopback)" },
        sessions = index.len(),
        "console listening"
    );
    let served = axum::serve(listener, web::router(app)).with_graceful_shutdown(shutdown);
    let result = tokio::select! {
        result = served => result.map_err(|err| Error::serve("console", err)),
        result = following => Err(stopped(result)),
    };
    beats.abort();
    result
}

/// Why following the events stopped: the console cannot go on without it.
fn stopped(result: Result<Result<(), Error>, tokio::task::JoinError>) -> Error {
    match result {
        Ok(Ok(())) => Error::store("the events stream closed".to_owned()),
        Ok(Err(err)) => err,
        Err(err) => Error::store(format!("following the events failed: {err}")),
    }
}

/// What the console does on NATS beyond the sessions it reads, the dead
/// letters and the inbox: it follows live progress, the agents'
/// heartbeats and the rollouts of versions, and gives the registry
/// feedback on sessions.
#[must_use]
pub fn footprint(subjects: &Subjects) -> baton_proto::Footprint {
    baton_proto::Footprint::new()
        .subscribes([subjects.all_live(), subjects.all_heartbeats()])
        .publishes([subjects.feedback(), subjects.notebook()])
        .with(baton_nats::footprints::live_follower(subjects))
        // The versions page and the sessions' version labels read the
        // rollouts.
        .with(baton_nats::footprints::rollouts(subjects))
}
