//! Conversations' one entry point: a user's message to a conversation,
//! and what became of it.
//!
//! [`Conversations::say`] takes a message from a caller, with its overlap
//! policy, and owns what happens to it: the idle claim (one write, no
//! read, when this process stored the record last), the owner check, the
//! question its running turn waits on (one keyed read of the inbox, by
//! session), the record's compare-and-swap, and the turn's task. It says
//! what became of the message ([`Taken`]): a turn started, queued, or the
//! answer to a waiting question; or it was refused
//! ([`Error`] of kind Busy, NotOwner or Deleted). A turn that
//! ended is closed here too: at once by the [`Turn`] that followed it to
//! its end, else by the router's keeper (`baton-router`), so no gateway
//! holds turn logic of its own. The records themselves (`state/conversation`)
//! know nothing of sessions, tasks or the inbox; this room reads those and
//! hands them in.

use std::sync::Arc;

use baton_proto::{Conversation, ConversationTurn, Overlap, TurnMessage};
use tokio::sync::OnceCell;
use uuid::Uuid;

use crate::client::Client;
use crate::inbox::Inbox;
use baton_nats::state::conversation::Records;
use baton_nats::{Error, ErrorKind};

mod closing;
mod question;
mod say;
mod turn;

pub use turn::{Question, Turn};

/// What became of a user message ([`Conversations::say`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// It started turn `turn`, which runs as `session`.
    Started {
        /// The turn's session.
        session: Uuid,
        /// The turn, from 1.
        turn: u32,
    },
    /// It waits behind the running turn (and `ahead` others); it will run as
    /// `session`.
    Queued {
        /// The session it will run as.
        session: Uuid,
        /// Messages queued before it.
        ahead: usize,
    },
    /// It answered the question an agent of the running turn asked the
    /// user: `session`, the running turn's, goes on.
    Answered {
        /// The session that goes on with the answer.
        session: Uuid,
        /// Its events before the answer (a follower skips them:
        /// [`Client::follow_after`](crate::Client::follow_after)).
        seen: crate::Seen,
    },
}

impl Taken {
    /// The session that answers the message: the turn it runs (or will run)
    /// as, or the turn its answer lets go on.
    #[must_use]
    pub fn session(&self) -> Uuid {
        match self {
            Self::Started { session, .. }
            | Self::Queued { session, .. }
            | Self::Answered { session, .. } => *session,
        }
    }
}

/// A user message for [`Conversations::say`].
#[derive(Debug, Clone)]
pub struct UserMessage {
    /// The turn it starts, as it waits and runs: its session, text,
    /// variables, addressee, streaming and budget.
    pub turn: TurnMessage,
    /// Who sends it (the conversation's owner, when it starts one).
    pub caller: Option<String>,
    /// What happens when a turn runs.
    pub overlap: Overlap,
    /// What it comes through (`a2a`, `mcp`, `cli`): the person the inbox
    /// records when it answers a question.
    pub via: String,
}

impl UserMessage {
    /// A message with `text`, to run as a new session, queued behind a
    /// running turn.
    #[must_use]
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            turn: TurnMessage::new(text),
            caller: None,
            overlap: Overlap::Enqueue,
            via: "user".to_owned(),
        }
    }
}

/// The conversations of one deployment.
#[derive(Clone)]
pub struct Conversations {
    records: Records,
    client: Client,
    /// Where the question a turn waits on is found, opened on the first
    /// message that may answer one (the router's keeper never does).
    inbox: Arc<OnceCell<Inbox>>,
    replicas: usize,
}

impl std::fmt::Debug for Conversations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conversations").finish_non_exhaustive()
    }
}

impl Conversations {
    /// Opens the bucket (creating it with `replicas` when missing); turns
    /// are sent and read through `client`.
    ///
    /// # Errors
    ///
    /// When JetStream refuses the bucket.
    pub async fn open(client: Client, replicas: usize) -> Result<Self, Error> {
        let claims = Arc::clone(client.claims());
        let records =
            Records::open(client.jetstream(), client.subjects(), claims, replicas).await?;
        Ok(Self {
            records,
            client,
            inbox: Arc::default(),
            replicas,
        })
    }

    /// The records themselves, for the router's keeper, which watches and
    /// expires them.
    #[doc(hidden)]
    #[must_use]
    pub fn records(&self) -> &Records {
        &self.records
    }

    /// Conversation `id`'s record and its revision, if it exists.
    ///
    /// # Errors
    ///
    /// When the bucket cannot be read, or holds a deleted conversation's
    /// marker there ([`crate::conversation::ErrorKind::Deleted`]).
    pub async fn get(&self, id: &str) -> Result<Option<(Conversation, u64)>, Error> {
        self.records.get(id).await
    }

    /// Every conversation's record, most recently updated first.
    ///
    /// # Errors
    ///
    /// When the bucket cannot be listed or read.
    pub async fn list(&self) -> Result<Vec<Conversation>, Error> {
        self.records.list().await
    }

    /// The turns of `record` that ended, in order (the running turn, and
    /// one whose entry expired, are left out).
    ///
    /// # Errors
    ///
    /// When the bucket cannot be read.
    pub async fn turns(&self, record: &Conversation) -> Result<Vec<ConversationTurn>, Error> {
        self.records.turns(record).await
    }

    /// Deletes conversation `id`: its record (leaving the marker), then
    /// the events of every turn it listed, the listed turns, and its
    /// transcript's entries. Returns how many sessions' events it removed.
    ///
    /// # Errors
    ///
    /// Busy while a turn runs; Deleted when there is no such conversation;
    /// JetStream when JetStream refuses a step.
    pub async fn delete(&self, id: &str) -> Result<usize, Error> {
        self.records.delete(id).await
    }

    /// Forks conversation `id` after its turn `at` as conversation `new`,
    /// owned by `caller` (who must own `id`): its turns 1 to `at`, their
    /// transcript, who held it then, the shared variables it had and the
    /// versions it ran on, with `onto`'s agent types on the versions it
    /// names instead (agent type to version).
    ///
    /// # Errors
    ///
    /// NotOwner for another caller's conversation; Deleted when `id` does
    /// not exist or `new` does; Busy when turn `at` has not ended; JetStream
    /// when JetStream fails.
    pub async fn fork(
        &self,
        id: &str,
        at: u32,
        new: &str,
        caller: Option<String>,
        onto: &std::collections::BTreeMap<baton_proto::AgentName, baton_proto::Version>,
    ) -> Result<Conversation, Error> {
        let ending = async |session| self.ending(session).await;
        self.records.fork(id, at, new, caller, onto, ending).await
    }

    /// The inbox, opened now if need be.
    async fn inbox(&self) -> Result<&Inbox, Error> {
        self.inbox
            .get_or_try_init(|| async {
                let nats = self.client.jetstream().client();
                let subjects = self.client.subjects().clone();
                let inbox = Inbox::open(nats, subjects, self.replicas)
                    .await
                    .map_err(|err| {
                        Error::with_source(ErrorKind::JetStream, "cannot open the inbox", err)
                    })?;
                // Questions an earlier release parked are found by their
                // session too, once this process has noted them.
                match inbox.note_older_entries().await {
                    Ok(0) => {}
                    Ok(noted) => tracing::info!(noted, "noted older questions by their session"),
                    Err(err) => {
                        tracing::warn!(error = %err, "cannot note older questions by their session")
                    }
                }
                Ok(inbox)
            })
            .await
    }
}
