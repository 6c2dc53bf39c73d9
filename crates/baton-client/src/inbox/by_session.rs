//! Entries found by their session: each entry is also named under its
//! session, so what a session waits on is one keyed read, not a listing.
//! An agent's question to the user (`ask_user`) is named under
//! `q.<session>`, any other entry (a human agent's task, a tool call
//! waiting for a person) under `w.<session>`. Entries themselves are keyed
//! by envelope id, a UUID, so the two never meet.

use baton_proto::{Envelope, Value};

use super::{Decision, Inbox, InboxEntry, Reply, asks};
use baton_nats::{Error, ErrorKind};

/// The prefix of the keys that name a session's question entry.
const QUESTIONS: &str = "q.";

/// The prefix of the keys that name a session's other waiting entry.
const WAITS: &str = "w.";

/// Whether `key` names an entry by its session (and is no entry itself).
pub(super) fn is_session_key(key: &str) -> bool {
    key.starts_with(QUESTIONS) || key.starts_with(WAITS)
}

/// The key naming `envelope`'s entry under its session.
fn session_key(envelope: &Envelope) -> String {
    let prefix = if asks(envelope) { QUESTIONS } else { WAITS };
    format!("{prefix}{}", envelope.session)
}

impl Inbox {
    /// Names `envelope`'s entry (stored) under its session.
    pub(super) async fn note_session(&self, envelope: &Envelope) -> Result<(), Error> {
        let id = envelope.id.to_string().into_bytes();
        (self.store.put(session_key(envelope), id.into()).await)
            .map(drop)
            .map_err(|err| {
                Error::with_source(
                    ErrorKind::JetStream,
                    "cannot note the task by its session",
                    err,
                )
            })
    }

    /// Removes the key naming `entry` under its session, unless it names
    /// another entry of the session since (children of one session may
    /// wait at once).
    pub(super) async fn forget_session(&self, entry: &InboxEntry) {
        let key = session_key(&entry.envelope);
        let id = entry.envelope.id.to_string();
        let named = match self.store.entry(&key).await {
            Ok(Some(named)) if named.value.as_ref() == id.as_bytes() => named,
            Ok(_) => return,
            Err(err) => {
                tracing::debug!(error = %err, %key, "cannot read a session's key");
                return;
            }
        };
        // A key left behind only points at an entry that is gone.
        let removed = self
            .store
            .delete_expect_revision(&key, Some(named.revision));
        if let Err(err) = removed.await {
            tracing::debug!(error = %err, %key, "cannot remove a session's key");
        }
    }

    /// The question session `session` waits on: the entry of an agent of
    /// it that asked the user (`ask_user`), if one waits. One keyed read of
    /// the session's question key, then of the entry it names: no listing.
    ///
    /// # Errors
    ///
    /// When the bucket cannot be read or the entry is not an envelope.
    pub async fn question(&self, session: uuid::Uuid) -> Result<Option<InboxEntry>, Error> {
        let entry = self.named(&format!("{QUESTIONS}{session}")).await?;
        Ok(entry.filter(|entry| entry.envelope.session == session && asks(&entry.envelope)))
    }

    /// What session `session` waits on in the inbox: its question (as
    /// [`Inbox::question`]), else its other waiting entry (a human agent's
    /// task, a tool call waiting for a person). Keyed reads, no listing.
    ///
    /// # Errors
    ///
    /// When the bucket cannot be read or the entry is not an envelope.
    pub async fn waiting(&self, session: uuid::Uuid) -> Result<Option<InboxEntry>, Error> {
        if let Some(question) = self.question(session).await? {
            return Ok(Some(question));
        }
        let entry = self.named(&format!("{WAITS}{session}")).await?;
        Ok(entry.filter(|entry| entry.envelope.session == session))
    }

    /// Answers what session `session` waits on with `text` from `person`,
    /// found by its session: the question an agent asked (the answer's
    /// `variables` recorded with it for that agent), else a human agent's
    /// task, completed or handed on as `reply` says. `false` when nothing
    /// of the session waits.
    ///
    /// # Errors
    ///
    /// As for [`Inbox::resolve_with`] and [`Inbox::reply`]: an entry that
    /// waits for another decision (a tool call's approval) refuses a text.
    pub async fn answer_session(
        &self,
        session: uuid::Uuid,
        text: &str,
        variables: Option<Value>,
        reply: Reply,
        person: &str,
    ) -> Result<bool, Error> {
        let Some(entry) = self.waiting(session).await? else {
            return Ok(false);
        };
        let id = entry.envelope.id.to_string();
        if entry.gate().is_some() {
            // An agent asked the user (ask_user): the answer resumes it.
            let answer = Decision::Answer(text.to_owned());
            self.resolve_with(&id, answer, person, variables).await?;
        } else {
            self.reply(&id, text, reply, person).await?;
        }
        Ok(true)
    }

    /// The entry `key` names, if it still waits.
    async fn named(&self, key: &str) -> Result<Option<InboxEntry>, Error> {
        let named = (self.store.get(key).await).map_err(|err| {
            Error::with_source(ErrorKind::JetStream, "cannot read the inbox", err)
        })?;
        let Some(id) = named.and_then(|id| String::from_utf8(id.to_vec()).ok()) else {
            return Ok(None);
        };
        self.entry(&id).await
    }

    /// Names under their session the entries stored before entries were
    /// named so (by an earlier release), so that [`Inbox::question`] and
    /// [`Inbox::waiting`] find them too; a process's conversations and the
    /// A2A gateway do it once, when they start using the inbox. How many it
    /// named.
    ///
    /// # Errors
    ///
    /// When the bucket cannot be read or written.
    pub async fn note_older_entries(&self) -> Result<usize, Error> {
        let mut noted = 0;
        for entry in self.list().await? {
            let key = session_key(&entry.envelope);
            let known = (self.store.get(key.as_str()).await).map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "cannot read the inbox", err)
            })?;
            if known.is_some() {
                continue;
            }
            self.note_session(&entry.envelope).await?;
            noted += 1;
        }
        Ok(noted)
    }
}
