//! Forking a conversation: a new conversation that starts where another
//! stood after turn N, with no model or tool call. Its transcript's entries
//! and its listed turns are copies of the first N turns', so its next turn
//! sees exactly what the original's turn N + 1 saw, and its model is asked
//! exactly the same.

use std::collections::BTreeMap;

use baton_proto::{AgentName, Conversation, ConversationTurn, Event, Version, VersionMove};

use super::{Records, owned};
use crate::error::{Error, ErrorKind};

impl Records {
    /// Forks conversation `id` after its turn `at` as conversation `new`,
    /// owned by `caller` (who must own `id`): its turns 1 to `at`, their
    /// transcript, who held it then and the shared variables it had (from
    /// turn `at`'s end, read by `ending`), and the versions turn `at` ran
    /// on, with `onto`'s agent types moved to the versions it names (each
    /// change of a pinned version noted as a move at turn `at + 1`).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotOwner`] for another caller's
    /// conversation; [`ErrorKind::Deleted`] when `id` does not
    /// exist or `new` does; [`ErrorKind::Busy`] when turn `at`
    /// has not ended; [`ErrorKind::JetStream`] when JetStream fails.
    pub async fn fork(
        &self,
        id: &str,
        at: u32,
        new: &str,
        caller: Option<String>,
        onto: &BTreeMap<AgentName, Version>,
        ending: impl AsyncFnOnce(uuid::Uuid) -> Result<Option<Event>, Error>,
    ) -> Result<Conversation, Error> {
        let deleted = |message: String| Error::new(ErrorKind::Deleted, message);
        let Some((source, _)) = self.get(id).await? else {
            return Err(deleted(format!("no conversation {id}")));
        };
        owned(id, &source, &caller)?;
        let turns: Vec<ConversationTurn> = self
            .turns(&source)
            .await?
            .into_iter()
            .filter(|turn| turn.turn <= at)
            .collect();
        let Some(last) = turns.iter().find(|turn| turn.turn == at).cloned() else {
            return Err(Error::new(
                ErrorKind::Busy,
                format!(
                    "turn {at} of conversation {id} has not ended (it has {} turns; `baton conversations show {id}` lists those that ended)",
                    source.turns
                ),
            ));
        };
        let Some(entries) = last.entries else {
            return Err(Error::new(
                ErrorKind::JetStream,
                format!(
                    "turn {at} of conversation {id} was closed by an older version, which did not note its transcript; fork at a later turn"
                ),
            ));
        };
        let key = Conversation::key_of(new);
        if self.read(&key).await?.is_some() {
            return Err(deleted(format!(
                "conversation {new} exists already; fork under another id"
            )));
        }
        // Whatever an earlier conversation of that id left goes first.
        self.clear(&key).await?;
        let history = self
            .transcripts
            .copy(id, new, entries)
            .await
            .map_err(|err| {
                let copying = format!("cannot copy the transcript of {id}");
                Error::with_source(err.kind(), copying, err)
            })?;
        for turn in &turns {
            self.list_turn(new, turn).await?;
        }
        let mut record = Conversation::new(new, caller, source.entry.clone());
        record.turns = at;
        record.holder = last.holder.clone();
        record.transcript = (entries > 0).then_some(last.session);
        record.history = (entries > 0).then_some(history);
        let end = ending(last.session).await?;
        record.versions = end
            .as_ref()
            .map_or_else(|| source.versions.clone(), |end| end.versions.clone());
        onto_versions(&mut record, onto);
        record.context = context_after(end);
        if !self.swap(&key, &record, 0).await? {
            return Err(deleted(format!(
                "conversation {new} was created meanwhile; fork under another id"
            )));
        }
        Ok(record)
    }
}

/// Pins `record`'s next turn to the versions `onto` names, noting each
/// change of a pinned version as a move at that turn.
fn onto_versions(record: &mut Conversation, onto: &BTreeMap<AgentName, Version>) {
    for (agent, to) in onto {
        match record.versions.insert(agent.clone(), to.clone()) {
            Some(from) if from != *to => record.moves.push(VersionMove {
                turn: record.turns + 1,
                agent: agent.clone(),
                from,
                to: to.clone(),
            }),
            _ => {}
        }
    }
}

/// What a turn after the one that ended with `end` starts from besides the
/// messages: its shared variables, state and metadata (none once its
/// events expired).
fn context_after(end: Option<Event>) -> Option<Box<baton_proto::Context>> {
    end.and_then(|end| end.context).map(|mut context| {
        context.messages.clear();
        context.history = None;
        context.expanded = None;
        context.trace.clear();
        context
    })
}
