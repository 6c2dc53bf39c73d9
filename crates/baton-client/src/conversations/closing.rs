//! A turn's end, closed: the entry point reads the running turn's last
//! event, and hands its end to the record (`state/conversation`), which
//! gives the conversation its holder and transcript and starts the next
//! queued message, whose task is sent from here. An interrupt cancels the
//! running turn the same way. Whoever sees a turn end first closes it:
//! the [`Turn`](super::Turn) that followed it to its end, the next
//! message, or the router's keeper.

use std::time::Duration;

use baton_proto::{Conversation, Event, TurnMessage};
use uuid::Uuid;

use super::Conversations;
use baton_nats::state::conversation::SILENT;
use baton_nats::{Error, ErrorKind};

/// How long after sending a turn's task its starter notes it as sent: well
/// within [`SILENT`], and after most turns ended.
const NOTED_AFTER: Duration = Duration::from_secs(2);

impl Conversations {
    /// Closes `record`'s running turn if it has ended (see
    /// `Records::close_turn`). Returns whether a turn started (to send once
    /// the record is stored).
    pub(super) async fn close_turn(&self, record: &mut Conversation) -> Result<bool, Error> {
        let Some(running) = &record.running else {
            return Ok(false);
        };
        let last = (self.client.last_event(running.session).await).map_err(|err| {
            Error::with_source(ErrorKind::JetStream, "cannot read the running turn", err)
        })?;
        let Some(end) = last.filter(|event| event.kind.is_terminal()) else {
            return Ok(false);
        };
        let end = self.whole(end).await?;
        self.records.close_turn(record, &end).await
    }

    /// Cancels `record`'s running turn, marked interrupted (see
    /// `Records::interrupted`); a turn that ended meanwhile is closed as
    /// usual.
    pub(super) async fn interrupt(
        &self,
        record: &mut Conversation,
        running: &TurnMessage,
    ) -> Result<(), Error> {
        let detail = "interrupted by a newer message of its conversation";
        let cancelled = (self.client.cancel(running.session, detail).await).map_err(|err| {
            Error::with_source(ErrorKind::JetStream, "cannot cancel the running turn", err)
        })?;
        let end = match cancelled {
            crate::Cancel::Cancelled(end) | crate::Cancel::Ended(end) => end,
        };
        let end = self.whole(end).await?;
        self.records.interrupted(record, &end).await
    }

    /// `end` with its context's large parts read back, when it kept them
    /// apart.
    async fn whole(&self, end: Event) -> Result<Event, Error> {
        if end.claims.is_empty() {
            return Ok(end);
        }
        let restored = self.ending(end.session).await?;
        Ok(restored.unwrap_or(end))
    }

    /// The terminal event `session` ended with, its claims restored.
    pub(super) async fn ending(&self, session: Uuid) -> Result<Option<Event>, Error> {
        (self.client.ending(session).await).map_err(|err| {
            Error::with_source(
                ErrorKind::JetStream,
                format!("cannot read how {session} ended"),
                err,
            )
        })
    }

    /// Sends the task of `record`'s running turn `turn` (see
    /// `Records::task`), past the router when it names its agent type: one
    /// publish fewer.
    pub(super) async fn start(&self, record: &Conversation, turn: u32) -> Result<(), Error> {
        let legacy = match baton_nats::state::conversation::legacy(record) {
            Some(session) => self.ending(session).await?,
            None => None,
        };
        let Some(mut envelope) = self.records.task(record, turn, legacy).await? else {
            return Ok(());
        };
        // A version being retired with its conversations moved: this turn,
        // the next, goes to the current version instead.
        self.client.unpin_upgrading(&mut envelope).await;
        (self.client.submit_direct(&envelope).await).map_err(|err| {
            Error::with_source(
                ErrorKind::JetStream,
                format!("cannot send turn {turn}"),
                err,
            )
        })
    }

    /// Notes in the background that running turn `turn` of the record at
    /// `key` was sent, once the turn had time to end (most turns then need
    /// no note, and the note's read and write stay off the turn's path). A
    /// note that is lost only lets the keeper send the same task again,
    /// under the same id.
    pub(super) fn note_sent_later(&self, key: String, turn: u32) {
        let records = self.records.clone();
        tokio::spawn(async move {
            tokio::time::sleep(NOTED_AFTER).await;
            if let Err(err) = records.mark_sent(&key, turn).await {
                tracing::warn!(error = %err, "cannot note that a turn was sent");
            }
        });
    }

    /// Says that conversation `id`'s running turn was seen to end (a
    /// [`Turn`](super::Turn) followed it to its end): its turn is
    /// closed at once, as the router's keeper would a moment later, so its
    /// next message finds it closed. Await the handle to wait for the
    /// closing. A failure is logged (the keeper closes it later); a deleted
    /// conversation is left to whatever reads it next to say so.
    pub(super) fn turn_ended(&self, id: &str) -> tokio::task::JoinHandle<()> {
        let (conversations, id) = (self.clone(), id.to_owned());
        tokio::spawn(async move {
            match conversations.keep_one(&Conversation::key_of(&id)).await {
                Ok(_) => {}
                Err(err) if err.kind() == ErrorKind::Deleted => {}
                Err(err) => {
                    tracing::warn!(error = %err, conversation = %id, "cannot close the conversation's turn now; the router's keeper will");
                }
            }
        })
    }

    /// Closes conversation `id`'s running turn if it has ended, as the
    /// router's keeper would a moment later: for a command that needs the
    /// turn closed now (a fork of the turn that just ended, a listing of
    /// its turns). A deleted conversation is left to the read that
    /// follows to say so.
    ///
    /// # Errors
    ///
    /// When the record or the turn's events cannot be read or written.
    pub async fn settle(&self, id: &str) -> Result<(), Error> {
        match self.keep_one(&Conversation::key_of(id)).await {
            Ok(_) => Ok(()),
            Err(err) if err.kind() == ErrorKind::Deleted => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Closes the running turn of the record at `key` if it ended, and sends
    /// again a turn that shows no event long after it started (its starter
    /// may have stopped before sending it). Returns how many turns it
    /// started or sent again.
    pub async fn keep_one(&self, key: &str) -> Result<usize, Error> {
        loop {
            let Some((mut record, revision)) = self.records.read(key).await? else {
                return Ok(0);
            };
            let Some(running) = record.running.clone() else {
                return Ok(0);
            };
            let started = self.close_turn(&mut record).await?;
            if !started && record.running.as_ref() == Some(&running) {
                // Still running: its task is sent again only when its
                // starter stopped before noting it was sent, a while ago.
                let quiet = baton_proto::now_ms().saturating_sub(record.updated_at);
                let silent = u64::try_from(SILENT.as_millis()).unwrap_or(u64::MAX);
                if running.sent || quiet < silent {
                    return Ok(0);
                }
                tracing::warn!(conversation = %record.id, turn = record.turns, "a turn's task may not have been sent: sending it again");
                self.start(&record, record.turns).await?;
                self.records.mark_sent(key, record.turns).await?;
                return Ok(1);
            }
            if self.records.swap(key, &record, revision).await? {
                if started {
                    self.start(&record, record.turns).await?;
                    self.records.mark_sent(key, record.turns).await?;
                }
                return Ok(1);
            }
        }
    }
}
