//! Settling a conversation: a running turn that ended gives the
//! conversation its holder and transcript, and the next message runs; an
//! interrupted turn carries its messages on.

use baton_proto::{Context, Conversation, ConversationTurn, Event, EventType, TurnMessage};

use super::{ConversationError, Conversations, Sent};

impl Conversations {
    /// Settles `record`'s running turn if it has ended: the agent that
    /// answered holds the conversation, what the turn added is appended to
    /// the transcript, and the next queued message runs. Returns whether a
    /// turn started (to send once the record is stored).
    pub(super) async fn settle(
        &self,
        record: &mut Conversation,
    ) -> Result<bool, ConversationError> {
        let Some(running) = &record.running else {
            return Ok(false);
        };
        let last = self
            .client
            .last_event(running.session)
            .await
            .map_err(|err| ConversationError::store(err.to_string()))?;
        let Some(end) = last.filter(|event| event.kind.is_terminal()) else {
            return Ok(false);
        };
        let end = self.whole(end).await?;
        // Listed before the record moves on, by whoever settles it (the
        // same entry each time), so no settled turn goes unlisted.
        let mut listed = ConversationTurn {
            turn: record.turns,
            session: running.session,
            text: running.text.clone(),
            agents: end.path.iter().map(|hop| hop.agent.clone()).collect(),
            ended: end.kind.clone(),
            reason: end.reason.clone(),
            at: running.at,
            ended_at: end.at,
            holder: None,
            entries: None,
            extra: baton_proto::Map::new(),
        };
        if let Some(context) = end.context.clone() {
            self.transcribe(record, *context).await?;
        }
        ended(record, &end);
        listed.holder.clone_from(&record.holder);
        listed.entries = Some(record.history.as_ref().map_or(0, |history| history.entries));
        self.list_turn(&record.id, &listed).await?;
        let mut started = false;
        if !record.queue.is_empty() {
            let next = record.queue.remove(0);
            begin(record, next, &mut started);
        }
        record.updated_at = baton_proto::now_ms();
        Ok(started)
    }

    /// `end` with its context's large parts read back, when it kept them
    /// apart.
    async fn whole(&self, end: Event) -> Result<Event, ConversationError> {
        if end.claims.is_empty() {
            return Ok(end);
        }
        let restored = self
            .client
            .ending(end.session)
            .await
            .map_err(|err| ConversationError::store(err.to_string()))?;
        Ok(restored.unwrap_or(end))
    }

    /// Appends what the running turn, which ended with `context`, added to
    /// `record`'s transcript; the rest of the context (its variables, state
    /// and metadata) is what the next turn starts from.
    async fn transcribe(
        &self,
        record: &mut Conversation,
        mut context: Context,
    ) -> Result<(), ConversationError> {
        let broken = |err: crate::state::transcript::TranscriptError| {
            ConversationError::store(err.to_string())
        };
        let messages = std::mem::take(&mut context.messages);
        let (base, messages) = match context.history.take() {
            Some(history) if record.history.as_ref() == Some(&history) => (false, messages),
            // The turn ran on another transcript (its record was replaced
            // meanwhile): its whole conversation starts the log again.
            Some(history) => {
                let prefix = self.transcripts.prefix(&history).await.map_err(broken)?;
                (true, prefix.iter().cloned().chain(messages).collect())
            }
            None => (true, messages),
        };
        let entry = crate::state::transcript::entry_of(record.turns, base, messages);
        let history = self
            .transcripts
            .append(&record.id, record.history.as_ref(), &entry)
            .await
            .map_err(broken)?;
        record.history = Some(history);
        context.trace.clear();
        context.expanded = None;
        record.context = Some(Box::new(context));
        Ok(())
    }

    /// Settles conversation `id` now if its running turn has ended, as the
    /// router's keeper does within a moment: a gateway that saw the turn
    /// end calls it, so the conversation's next message finds it settled.
    ///
    /// # Errors
    ///
    /// When JetStream fails.
    pub async fn settle_now(&self, id: &str) -> Result<(), ConversationError> {
        self.keep_one(&Conversation::key_of(id)).await.map(drop)
    }

    /// Cancels `record`'s running turn, marked interrupted: unless it
    /// answered meanwhile, its message and those queued behind it are
    /// carried on to the turn that starts next. A turn that ended
    /// meanwhile is settled as usual.
    pub(super) async fn interrupt(
        &self,
        record: &mut Conversation,
        running: &TurnMessage,
    ) -> Result<(), ConversationError> {
        let end = match self
            .client
            .cancel(
                running.session,
                "interrupted by a newer message of its conversation",
            )
            .await
            .map_err(|err| ConversationError::store(err.to_string()))?
        {
            crate::Cancel::Cancelled(end) | crate::Cancel::Ended(end) => end,
        };
        // A turn that answered meanwhile adds its messages, as a settle does.
        let end = self.whole(end).await?;
        if let Some(context) = end.context.clone() {
            self.transcribe(record, *context).await?;
        }
        ended(record, &end);
        for queued in record.queue.drain(..) {
            record.carried.extend(queued.earlier);
            record.carried.push(queued.text);
        }
        Ok(())
    }
}

/// Makes `mine` `record`'s running turn, the next one, with the messages
/// carried from interrupted turns before its own; `started` notes it.
pub(super) fn begin(record: &mut Conversation, mut mine: TurnMessage, started: &mut bool) -> Sent {
    record.turns += 1;
    if !record.carried.is_empty() {
        let mut earlier = std::mem::take(&mut record.carried);
        earlier.append(&mut mine.earlier);
        mine.earlier = earlier;
    }
    if !record.cut.is_empty() {
        let mut cut = std::mem::take(&mut record.cut);
        cut.append(&mut mine.cut);
        mine.cut = cut;
    }
    let sent = Sent::Started {
        session: mine.session,
        turn: record.turns,
    };
    record.running = Some(mine);
    *started = true;
    sent
}

/// Applies the end of `record`'s running turn: the agent that answered a
/// completed turn holds the conversation, unless the turn handed it back
/// to its entry; a turn that ended with a context is the transcript from
/// now on; an interrupted turn that ended without one carries its messages
/// on to the next turn.
pub(super) fn ended(record: &mut Conversation, end: &Event) {
    let Some(running) = record.running.take() else {
        return;
    };
    if end.kind == EventType::Completed {
        if end.conversation.as_ref().is_some_and(|turn| turn.hand_back) {
            record.holder = None;
        } else if let Some(hop) = end.path.last() {
            record.holder = Some(hop.agent.clone());
        }
    }
    if end.context.is_some() {
        record.transcript = Some(running.session);
    } else if running.interrupted {
        record.carried.extend(running.earlier);
        record.carried.push(running.text);
        record.cut.extend(running.cut);
        record.cut.push(record.turns);
    }
}
