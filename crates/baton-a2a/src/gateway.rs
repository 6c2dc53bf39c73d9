//! The gateway: what the A2A agents reach, and which agent types it
//! exposes.

use std::sync::Arc;
use std::time::Duration;

use baton_client::{Client, Inbox, RegistryClient};
use baton_proto::{AgentName, LookupRequest};

use crate::index;

/// What the A2A agents reach.
#[derive(Clone)]
pub struct Gateway {
    pub(crate) client: Client,
    pub(crate) registry: RegistryClient,
    pub(crate) inbox: Inbox,
    pub(crate) index: index::Index,
    /// The agent types exposed; empty: every live one the registry knows.
    pub(crate) only: Arc<Vec<AgentName>>,
    /// How long a blocking `SendMessage` waits for its session.
    pub(crate) timeout: Duration,
    /// The URL clients reach this gateway at, for the cards; `None`: from
    /// each request's `Host`.
    pub(crate) public_url: Option<String>,
    /// Whether calls need the access token (the cards say so).
    pub(crate) token_required: bool,
    /// The most a session it starts may spend; a message may ask for less
    /// (`metadata.budget_tokens`, `metadata.budget_cost`).
    pub(crate) budget: baton_proto::Budget,
    /// Contexts as conversations.
    pub(crate) conversations: baton_client::conversation::Conversations,
    /// What a message does while a turn of its context runs, unless its
    /// metadata says otherwise.
    pub(crate) overlap: baton_proto::Overlap,
}

impl Gateway {
    /// The exposed agent types and their registry entries.
    pub(crate) async fn exposed(&self) -> Vec<(String, Option<baton_proto::Candidate>)> {
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
    pub(crate) async fn agent(&self, name: &str) -> Option<AgentName> {
        let agent = AgentName::new(name).ok()?;
        self.exposes(&agent).await.then_some(agent)
    }

    /// Whether agent type `name` is exposed.
    pub(crate) async fn exposes(&self, name: &AgentName) -> bool {
        if self.only.is_empty() {
            self.client.check_served(name).await.is_ok()
        } else {
            self.only.contains(name)
        }
    }
}
