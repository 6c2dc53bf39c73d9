//! Settling a conversation: a running turn that ended gives the
//! conversation its holder and transcript, and the next message runs; an
//! interrupted turn carries its messages on.

use baton_proto::{Conversation, ConversationTurn, Event, EventType, TurnMessage};
use uuid::Uuid;

use super::{ConversationError, Conversations, ENDS_KEPT, Sent};

impl Conversations {
    /// Settles `record`'s running turn if it has ended: the agent that
    /// answered holds the conversation, the ended session is the
    /// transcript, and the next queued message runs. Returns whether a
    /// turn started (to send once the record is stored), and the end it
    /// settled (which a turn that starts reads its transcript from).
    pub(super) async fn settle(
        &self,
        record: &mut Conversation,
    ) -> Result<(bool, Option<Event>), ConversationError> {
        let Some(running) = &record.running else {
            return Ok((false, None));
        };
        let last = self
            .client
            .last_event(running.session)
            .await
            .map_err(|err| ConversationError::store(err.to_string()))?;
        let Some(end) = last.filter(|event| event.kind.is_terminal()) else {
            return Ok((false, None));
        };
        // Listed before the record moves on, by whoever settles it (the
        // same entry each time), so no settled turn goes unlisted.
        let listed = ConversationTurn {
            turn: record.turns,
            session: running.session,
            text: running.text.clone(),
            agents: end.path.iter().map(|hop| hop.agent.clone()).collect(),
            ended: end.kind.clone(),
            reason: end.reason.clone(),
            at: running.at,
            ended_at: end.at,
            extra: baton_proto::Map::new(),
        };
        self.list_turn(&record.id, &listed).await?;
        ended(record, &end);
        self.remember(&end);
        let mut started = false;
        if !record.queue.is_empty() {
            let next = record.queue.remove(0);
            begin(record, next, &mut started);
        }
        record.updated_at = baton_proto::now_ms();
        Ok((started, Some(end)))
    }

    /// Keeps `end` (a turn's terminal event with its context, whole) for the
    /// turn that starts next.
    pub(super) fn remember(&self, end: &Event) {
        if end.context.is_none() || !end.claims.is_empty() {
            return;
        }
        let mut ends = self
            .ends
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if ends.len() == ENDS_KEPT {
            ends.pop_front();
        }
        ends.push_back(end.clone());
    }

    /// The end of `session` this process settled, if it remembers it.
    pub(super) fn remembered(&self, session: Uuid) -> Option<Event> {
        let ends = self
            .ends
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        ends.iter()
            .rev()
            .find(|end| end.session == session)
            .cloned()
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
