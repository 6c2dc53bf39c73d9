//! Saying a message to a conversation: the one entry point every gateway
//! calls. The fast path claims an idle conversation's next turn from the
//! record this process stored last (one write, no read); else the record
//! is read, its owner checked, a question its running turn waits on is
//! answered, and otherwise the message starts the next turn or waits
//! behind the running one, as its overlap policy says, with one
//! compare-and-swap of the record.

use std::future::Future;

use baton_proto::{Conversation, Overlap};

use super::{Conversations, Taken, Turn, UserMessage};
use crate::EventStream;
use baton_nats::state::conversation::{begin, owned};
use baton_nats::{Error, ErrorKind};

/// A failure of what the caller records beside the message.
type Cause = Box<dyn std::error::Error + Send + Sync>;

impl Conversations {
    /// Says `message` to conversation `id` (created when it does not
    /// exist, entered at the agent type the message addresses): the answer
    /// to the question an agent of its running turn asked the user; else
    /// the next turn, or a message waiting behind the running one, as
    /// `message.overlap` says. Returns the [`Turn`]: what became of the
    /// message, and its events when the caller follows them (a streamed
    /// message's are followed from before it is sent).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotOwner`] for another caller's
    /// conversation; [`ErrorKind::Busy`] for `reject` while a
    /// turn runs; [`ErrorKind::Deleted`] for a deleted one;
    /// [`ErrorKind::JetStream`] when JetStream fails.
    pub async fn say(&self, id: &str, message: UserMessage) -> Result<Turn, Error> {
        self.say_recorded(id, message, || async { Ok::<(), Cause>(()) })
            .await
    }

    /// [`Conversations::say`], with what the caller keeps of the message
    /// (A2A's task index) written by `record` beside the first read or
    /// claim, so it costs no time of its own, and always before the
    /// message's task can be sent: a follower of the task finds it.
    ///
    /// When the record fails before anything was claimed, the message is
    /// refused (Store). When a turn was claimed meanwhile, the turn runs
    /// (were it not sent here, the router's keeper would send it): the
    /// record is tried once more, then the failure only logged, since an
    /// error would have the caller send again, and the turn run twice. A
    /// refused or answering message leaves its record to the caller to
    /// undo.
    ///
    /// # Errors
    ///
    /// As for [`Conversations::say`].
    pub async fn say_recorded<R, W, E>(
        &self,
        id: &str,
        message: UserMessage,
        record: R,
    ) -> Result<Turn, Error>
    where
        R: Fn() -> W,
        W: Future<Output = Result<(), E>>,
        E: Into<Cause>,
    {
        // A streamed answer's pieces are only live: followed before it runs.
        let early = if message.turn.stream {
            let session = message.turn.session;
            let events = (self.client.follow_to_rest(session).await).map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "cannot follow the turn", err)
            })?;
            Some(events)
        } else {
            None
        };
        let (taken, answering) = self.taken(id, message, record).await?;
        // An answer goes on in the asking session, followed on its own.
        let early = match taken {
            Taken::Answered { .. } => answering,
            _ => early,
        };
        Ok(Turn::new(self, id, taken, early))
    }

    /// What becomes of `message` (see [`Conversations::say_recorded`]);
    /// for a streamed answer, its follower.
    async fn taken<R, W, E>(
        &self,
        id: &str,
        message: UserMessage,
        record: R,
    ) -> Result<(Taken, Option<EventStream>), Error>
    where
        R: Fn() -> W,
        W: Future<Output = Result<(), E>>,
        E: Into<Cause>,
    {
        let mut recorded = None;
        if let Some(idle) = self.records.idle(id) {
            let claim = self
                .records
                .claim(idle, message.turn.clone(), &message.caller);
            let (claimed, wrote) = tokio::join!(claim, record());
            if let Some(claimed) = claimed? {
                if let Err(err) = wrote {
                    if let Err(again) = record().await {
                        let (err, again): (Cause, Cause) = (err.into(), again.into());
                        tracing::warn!(error = %again, first = %err, conversation = id, "a running turn's message is not recorded");
                    }
                }
                let turn = claimed.turns;
                self.start(&claimed, turn).await?;
                self.note_sent_later(Conversation::key_of(id), turn);
                let session = message.turn.session;
                return Ok((Taken::Started { session, turn }, None));
            }
            recorded = Some(wrote);
        }
        let (read, wrote) = match recorded {
            Some(wrote) => (self.records.get(id).await, wrote),
            None => tokio::join!(self.records.get(id), record()),
        };
        wrote.map_err(|err| {
            Error::with_source(ErrorKind::JetStream, "cannot record the message", err)
        })?;
        let read = read?;
        if let Some((found, _)) = &read {
            // A named caller continues only its own (an anonymous one may
            // answer any, as a person at the inbox may).
            if message.caller.is_some() && found.owner != message.caller {
                return Err(Error::new(
                    ErrorKind::NotOwner,
                    format!("conversation {id} belongs to another caller"),
                ));
            }
            if let Some(entry) = self.question(found).await? {
                let (session, seen, early) =
                    self.answer(&entry, &message.turn, &message.via).await?;
                return Ok((Taken::Answered { session, seen }, early));
            }
        }
        Ok((self.send(id, &message, read).await?, None))
    }

    /// Sends `message` to conversation `id`, as it was `read`: the next
    /// turn, or waiting behind the running one, as `message.overlap` says,
    /// the record read again while another writer comes first.
    async fn send(
        &self,
        id: &str,
        message: &UserMessage,
        read: Option<(Conversation, u64)>,
    ) -> Result<Taken, Error> {
        let key = Conversation::key_of(id);
        let mine = &message.turn;
        let mut read = Some(read);
        loop {
            let found = match read.take() {
                Some(read) => read,
                None => self.records.read(&key).await?,
            };
            let (mut record, revision) = found.unwrap_or_else(|| {
                let entry = mine.to.clone();
                (Conversation::new(id, message.caller.clone(), entry), 0)
            });
            owned(id, &record, &message.caller)?;
            if let (Overlap::Interrupt, Some(running)) = (message.overlap, record.running.clone()) {
                if !running.interrupted {
                    // Noted before the cancel, so whoever closes the turn
                    // carries its message on to the next.
                    if let Some(running) = record.running.as_mut() {
                        running.interrupted = true;
                    }
                    self.records.swap(&key, &record, revision).await?;
                    continue;
                }
                self.interrupt(&mut record, &running).await?;
            }
            let mut started = self.close_turn(&mut record).await?;
            let said = match (&record.running, message.overlap) {
                (None, _) => {
                    begin(&mut record, mine.clone());
                    started = true;
                    Taken::Started {
                        session: mine.session,
                        turn: record.turns,
                    }
                }
                (Some(running), Overlap::Reject) => {
                    return Err(Error::new(
                        ErrorKind::Busy,
                        format!(
                            "conversation {id} is busy: turn {} runs as session {}; send again when it ends, or with overlap enqueue",
                            record.turns, running.session
                        ),
                    ));
                }
                // (An interrupt leaves no turn running.)
                (Some(_), Overlap::Enqueue | Overlap::Interrupt) => {
                    record.queue.push(mine.clone());
                    Taken::Queued {
                        session: mine.session,
                        ahead: record.queue.len() - 1,
                    }
                }
            };
            if self.records.swap(&key, &record, revision).await? {
                // Only the running turn is sent (a queued turn an
                // interrupt cancelled before it was sent is not).
                if started {
                    self.start(&record, record.turns).await?;
                    self.note_sent_later(key, record.turns);
                }
                return Ok(said);
            }
        }
    }
}
