//! The gateway: what the tools reach (the conversations among it, opened
//! on first use), how it is built, and MCP over stdio.

use std::sync::Arc;
use std::time::Duration;

use baton_client::conversation::Conversations;
use baton_client::{Client, RegistryClient};
use baton_proto::AgentName;
use rmcp::ServiceExt;
use tokio::sync::OnceCell;

use crate::Error;

/// What the tools reach.
#[derive(Clone)]
pub struct Gateway {
    pub(crate) client: Client,
    pub(crate) registry: RegistryClient,
    /// The agent types exposed; empty: every live one the registry knows.
    pub(crate) only: Arc<Vec<AgentName>>,
    /// How long a call waits for its session to end.
    pub(crate) timeout: Duration,
    /// The most a session it starts may spend; a call may ask for less.
    pub(crate) budget: baton_proto::Budget,
    /// The conversations calls continue, opened on the first such call.
    pub(crate) talk: Talk,
    /// The log level the MCP session set (`logging/setLevel`), if any.
    pub(crate) log_level: crate::logging::Level,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("only", &self.only)
            .field("timeout", &self.timeout)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// A gateway to the agent types of `client`'s deployment: `only` these
    /// (every live one when empty), each call waiting up to `timeout`.
    #[must_use]
    pub fn new(
        client: Client,
        registry: RegistryClient,
        only: Vec<AgentName>,
        timeout: Duration,
    ) -> Self {
        Self {
            client,
            registry,
            only: Arc::new(only),
            timeout,
            budget: baton_proto::Budget::default(),
            talk: Talk::default(),
            log_level: crate::logging::Level::default(),
        }
    }

    /// This gateway for one MCP session: what it holds of its own (the log
    /// level) starts afresh; the rest is shared.
    #[must_use]
    pub(crate) fn for_session(&self) -> Self {
        Self {
            log_level: crate::logging::Level::default(),
            ..self.clone()
        }
    }

    /// Creates the conversations bucket, when a call is the first to need
    /// it, with `replicas`.
    #[must_use]
    pub fn with_replicas(mut self, replicas: usize) -> Self {
        self.talk = Talk::new(replicas);
        self
    }

    /// Caps what each session a call starts may spend, in tokens and cost:
    /// a call's `budget_tokens` and `budget_cost` may ask for less, not more.
    #[must_use]
    pub fn with_budget(mut self, budget: baton_proto::Budget) -> Self {
        self.budget = budget;
        self
    }

    /// Serves MCP on stdin and stdout until the client closes them.
    ///
    /// # Errors
    ///
    /// When the MCP handshake fails.
    pub async fn serve_stdio(self) -> Result<(), Error> {
        let running = self
            .for_session()
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|err| Error::store(format!("MCP over stdio: {err}")))?;
        running
            .waiting()
            .await
            .map_err(|err| Error::store(format!("MCP over stdio: {err}")))?;
        Ok(())
    }
}

/// The conversations, opened on first use, and the inbox, for answers
/// elicited from the client.
#[derive(Clone)]
pub(crate) struct Talk {
    pub(crate) replicas: usize,
    pub(crate) opened: Arc<OnceCell<Conversations>>,
    /// The inbox, where an agent's question waits: opened when a client
    /// that answers elicitations meets one.
    pub(crate) inbox: Arc<OnceCell<baton_client::Inbox>>,
}

impl Default for Talk {
    fn default() -> Self {
        Self::new(1)
    }
}

impl Talk {
    pub(crate) fn new(replicas: usize) -> Self {
        Self {
            replicas,
            opened: Arc::default(),
            inbox: Arc::default(),
        }
    }
}
