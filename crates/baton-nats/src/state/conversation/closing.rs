//! Closing a conversation's turn: a running turn that ended gives the
//! conversation its holder and transcript, and the next message runs; an
//! interrupted turn carries its messages on. The entry point reads the
//! turn's end (`baton-client`'s `conversations/`) and hands it in here.

use baton_proto::{
    Context, Conversation, ConversationTurn, Event, EventType, Role, TextAt, TurnMessage,
};

use super::Records;
use crate::error::Error;

impl Records {
    /// Closes `record`'s running turn, which ended with `end` (its large
    /// parts read back): the agent that answered holds the conversation,
    /// what the turn added is appended to the transcript, the turn is
    /// listed, and the next queued message runs. Returns whether a turn
    /// started (to send once the record is stored).
    pub async fn close_turn(&self, record: &mut Conversation, end: &Event) -> Result<bool, Error> {
        let Some(running) = &record.running else {
            return Ok(false);
        };
        // Listed before the record moves on, by whoever closes it (the
        // same entry each time), so no closed turn goes unlisted.
        let mut listed = ConversationTurn {
            turn: record.turns,
            session: running.session,
            text: running.text.clone(),
            text_at: None,
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
            // The transcript holds the user's text from now on: the
            // listing refers to it instead of keeping it again.
            listed.text_at = self.transcribe(record, *context, &listed.text).await?;
            if listed.text_at.is_some() {
                listed.text.clear();
            }
        }
        ended(record, end);
        listed.holder.clone_from(&record.holder);
        listed.entries = Some(record.history.as_ref().map_or(0, |history| history.entries));
        self.list_turn(&record.id, &listed).await?;
        let mut started = false;
        if !record.queue.is_empty() {
            let next = record.queue.remove(0);
            begin(record, next);
            started = true;
        }
        record.updated_at = baton_proto::now_ms();
        Ok(started)
    }

    /// Applies to `record` the end of its running turn, which a newer
    /// message cancelled (`end`: its end, its large parts read back):
    /// unless it answered meanwhile, its message and those queued behind
    /// it are carried on to the turn that starts next.
    pub async fn interrupted(&self, record: &mut Conversation, end: &Event) -> Result<(), Error> {
        // A turn that answered meanwhile adds its messages, as a closing does.
        if let Some(context) = end.context.clone() {
            self.transcribe(record, *context, "").await?;
        }
        ended(record, end);
        for queued in record.queue.drain(..) {
            record.carried.extend(queued.earlier);
            record.carried.push(queued.text);
        }
        Ok(())
    }

    /// Appends what the running turn, which ended with `context`, added to
    /// `record`'s transcript; the rest of the context (its variables, state
    /// and metadata) is what the next turn starts from. Returns where the
    /// entry keeps the user's message `text` (its last user message with
    /// that text), if it does and `text` is not empty.
    async fn transcribe(
        &self,
        record: &mut Conversation,
        mut context: Context,
        text: &str,
    ) -> Result<Option<TextAt>, Error> {
        let broken =
            |err: Error| Error::with_source(err.kind(), "cannot write the transcript", err);
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
        let said = (!text.is_empty())
            .then(|| {
                (entry.messages.iter())
                    .rposition(|message| message.role == Role::User && message.content == text)
            })
            .flatten()
            .and_then(|at| u32::try_from(at).ok());
        let history = self
            .transcripts
            .append(&record.id, record.history.as_ref(), &entry)
            .await
            .map_err(broken)?;
        let entry = history.entries;
        record.history = Some(history);
        context.trace.clear();
        context.expanded = None;
        record.context = Some(Box::new(context));
        Ok(said.map(|message| TextAt { entry, message }))
    }
}

/// Makes `mine` `record`'s running turn, the next one, with the messages
/// carried from interrupted turns before its own.
pub fn begin(record: &mut Conversation, mut mine: TurnMessage) {
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
    record.running = Some(mine);
}

/// Applies the end of `record`'s running turn: the agent that answered a
/// completed turn holds the conversation, unless the turn handed it back
/// to its entry; a turn that ended with a context is the transcript from
/// now on; an interrupted turn that ended without one carries its messages
/// on to the next turn.
pub(crate) fn ended(record: &mut Conversation, end: &Event) {
    let Some(running) = record.running.take() else {
        return;
    };
    // The versions the turn was pinned to: the next turn keeps them. A pin
    // that changed is a move (its old version was being retired).
    for (agent, version) in &end.versions {
        let old = record.versions.insert(agent.clone(), version.clone());
        if let Some(from) = old.filter(|old| old != version) {
            record.moves.push(baton_proto::VersionMove {
                turn: record.turns,
                agent: agent.clone(),
                from,
                to: version.clone(),
            });
        }
    }
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
