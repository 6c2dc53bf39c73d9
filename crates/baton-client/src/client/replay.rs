//! Replaying a finished session: a new session that starts with the task
//! the old one started with (its `started` event), sent to the same agent
//! type, and whose envelopes carry `replay`, so that its LLM agents reuse
//! what the old one recorded in the hop journal.

use baton_proto::{AgentName, Envelope, Event, EventType, Replay, Start, Value};
use uuid::Uuid;

use super::Client;
use baton_nats::{Error, ErrorKind};

/// How to replay a session.
#[derive(Debug, Clone, Default)]
pub struct SessionReplay {
    /// Run again from this hop of the old session's path (from 1): the
    /// answers the hops before it got are reused, it and the hops after it
    /// call the model again. `None`: reuse every answer that was recorded.
    pub from: Option<usize>,
    /// Variables set (or replaced) in the task the replay starts with.
    pub set: Vec<(String, Value)>,
    /// The model every LLM agent of the replay calls instead of its own.
    pub model: Option<String>,
    /// Call tools again instead of reusing their recorded results.
    pub call_tools: bool,
    /// Ask for the answers as they are written (`stream`).
    pub stream: bool,
    /// Versions to run agent types on instead of those the session
    /// recorded (agent type to version). The replay is otherwise pinned
    /// to the versions the old session ran on.
    pub onto: std::collections::BTreeMap<AgentName, baton_proto::Version>,
}

impl Client {
    /// The first envelope of a replay of the finished session `session`
    /// (its `session` is the replay's), and the agent type to send it to
    /// with [`Client::submit_to`]: the one the session started at. The
    /// caller follows the replay first, if it wants to see it.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Config`] when nothing of `session` is stored, when it
    /// has not finished, when it was not started replayable, or when
    /// `from` is not one of its hops; when its events cannot be read.
    pub async fn replay_of(
        &self,
        session: Uuid,
        options: &SessionReplay,
    ) -> Result<(Envelope, AgentName), Error> {
        let history = self.history(session).await?;
        replay_from(session, &history, options)
    }
}

/// As [`Client::replay_of`], for `session` whose stored events are
/// `history`.
///
/// # Errors
///
/// As [`Client::replay_of`].
pub(crate) fn replay_from(
    session: Uuid,
    history: &[Event],
    options: &SessionReplay,
) -> Result<(Envelope, AgentName), Error> {
    let task = replay_task(session, history, options)?;
    let agent = AgentName::new(task.to.as_deref().unwrap_or_default()).map_err(|err| {
        Error::new(
            ErrorKind::Config,
            format!("session {session} started at an agent type that is not valid: {err}"),
        )
    })?;
    Ok((task, agent))
}

/// The first envelope of a replay of `session`, whose stored events are
/// `history`.
///
/// # Errors
///
/// As [`Client::replay_of`].
pub(crate) fn replay_task(
    session: Uuid,
    history: &[Event],
    options: &SessionReplay,
) -> Result<Envelope, Error> {
    let refuse = |why: String| Error::new(ErrorKind::Config, why);
    if history.is_empty() {
        return Err(refuse(format!(
            "no session {session} is stored (it never ran here, or its events have expired)"
        )));
    }
    let Some(end) = ending(history) else {
        return Err(refuse(format!(
            "session {session} has not finished: replay it once it has (`baton watch {session}` follows it)"
        )));
    };
    let Some((started, start)) = history
        .iter()
        .find_map(|event| Start::from_event(event).map(|start| (event, start)))
    else {
        return Err(refuse(format!(
            "session {session} cannot be replayed: its task did not ask to be (`replayable`); \
             sessions sent by `baton send` and the MCP and A2A gateways are, and so are replays"
        )));
    };
    let mut task = start.task(started);
    // The versions the session ran on, whatever the rollout now says.
    task.versions.clone_from(&end.versions);
    task.versions.extend(options.onto.clone());
    for (name, value) in &options.set {
        task.context.variables.insert(name.clone(), value.clone());
    }
    let mut replay = Replay::of(session);
    replay.before = match options.from {
        None => None,
        Some(hop) => Some(hop_began(end, hop).ok_or_else(|| {
            refuse(format!(
                "--from {hop}: session {session} has hops 1 to {}",
                end.path.len()
            ))
        })?),
    };
    replay.model.clone_from(&options.model);
    replay.call_tools = options.call_tools;
    replay.turn = end.conversation.is_some();
    task.replay = Some(replay);
    task.stream = options.stream;
    Ok(task)
}

/// The event a finished session ended with: its last terminal event that
/// no `reopened` follows.
#[must_use]
pub fn ending(history: &[Event]) -> Option<&Event> {
    let last = history
        .iter()
        .rposition(|event| event.kind.is_terminal() || event.kind == EventType::Reopened)?;
    Some(&history[last]).filter(|event| event.kind.is_terminal())
}

/// When hop `hop` (from 1) of the path `end` names began, unix ms: when its
/// worker took the envelope, or else when the hop before it ended.
fn hop_began(end: &Event, hop: usize) -> Option<u64> {
    let index = hop.checked_sub(1)?;
    let this = end.path.get(index)?;
    match (this.accepted_at, index.checked_sub(1)) {
        (Some(at), _) => Some(at),
        (None, Some(before)) => Some(end.path[before].at.saturating_add(1)),
        (None, None) => Some(0),
    }
}

#[cfg(test)]
mod tests {
    use baton_proto::Hop;

    use super::*;

    fn started(session: Uuid) -> Event {
        let mut task = Envelope::task("refund order 42");
        task.replayable = true;
        let mut event = Event::new(Uuid::new_v4(), session, EventType::Started);
        event.agent = Some(baton_proto::AgentName::from_static("triage"));
        event.context = Some(Box::new(task.context.clone()));
        event.output = Some(Start::of(&task).unwrap().to_value());
        event
    }

    fn completed(session: Uuid) -> Event {
        let mut event = Event::new(Uuid::new_v4(), session, EventType::Completed);
        let mut first = Hop::new(baton_proto::AgentName::from_static("triage"), "w1", None);
        first.accepted_at = Some(1_000);
        first.at = 1_500;
        let mut second = Hop::new(baton_proto::AgentName::from_static("billing"), "w2", None);
        second.accepted_at = None;
        second.at = 2_500;
        event.path = vec![first, second];
        event
    }

    #[test]
    fn a_finished_replayable_session_gives_a_linked_task() {
        let session = Uuid::new_v4();
        let history = [started(session), completed(session)];
        let options = SessionReplay {
            set: vec![("tier".to_owned(), Value::from("gold"))],
            model: Some("other-model".to_owned()),
            ..SessionReplay::default()
        };
        let task = replay_task(session, &history, &options).unwrap();
        assert_ne!(task.session, session);
        assert_eq!(task.to.as_deref(), Some("triage"));
        assert_eq!(task.context.initial_query, "refund order 42");
        assert_eq!(task.context.variables["tier"], Value::from("gold"));
        let replay = task.replay.unwrap();
        assert_eq!(replay.of, session);
        assert_eq!(replay.before, None);
        assert_eq!(replay.model.as_deref(), Some("other-model"));
    }

    #[test]
    fn from_a_hop_reuses_what_came_before_it() {
        let session = Uuid::new_v4();
        let history = [started(session), completed(session)];
        let from = |hop| SessionReplay {
            from: Some(hop),
            ..SessionReplay::default()
        };
        let before = |hop| {
            replay_task(session, &history, &from(hop))
                .map(|task| task.replay.unwrap().before.unwrap())
        };
        assert_eq!(before(1).unwrap(), 1_000);
        // No `accepted_at`: just after the hop before it ended.
        assert_eq!(before(2).unwrap(), 1_501);
        let err = before(3).unwrap_err().to_string();
        assert!(
            err.contains("--from 3") && err.contains("hops 1 to 2"),
            "{err}"
        );
    }

    #[test]
    fn unfinished_unknown_and_unreplayable_sessions_are_refused() {
        let session = Uuid::new_v4();
        let options = SessionReplay::default();
        let none = replay_task(session, &[], &options).unwrap_err();
        assert!(none.to_string().contains("no session"), "{none}");
        let running = replay_task(session, &[started(session)], &options).unwrap_err();
        assert!(
            running.to_string().contains("has not finished"),
            "{running}"
        );
        let plain = replay_task(session, &[completed(session)], &options).unwrap_err();
        assert!(plain.to_string().contains("replayable"), "{plain}");
        let mut reopened = vec![started(session), completed(session)];
        reopened.push(Event::new(Uuid::new_v4(), session, EventType::Reopened));
        let again = replay_task(session, &reopened, &options).unwrap_err();
        assert!(again.to_string().contains("has not finished"), "{again}");
    }

    #[test]
    fn a_replay_keeps_the_versions_its_session_ran_on_unless_told_otherwise() {
        let session = Uuid::new_v4();
        let mut end = completed(session);
        end.versions.insert(
            baton_proto::AgentName::from_static("triage"),
            baton_proto::Version::from_static("1"),
        );
        end.versions.insert(
            baton_proto::AgentName::from_static("billing"),
            baton_proto::Version::from_static("7"),
        );
        let history = [started(session), end];
        let task = replay_task(session, &history, &SessionReplay::default()).unwrap();
        let pinned = |task: &Envelope| {
            (task.versions.iter())
                .map(|(a, v)| format!("{a}@{v}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(pinned(&task), ["billing@7", "triage@1"]);
        let onto = SessionReplay {
            onto: [(
                AgentName::from_static("triage"),
                baton_proto::Version::from_static("2"),
            )]
            .into(),
            ..SessionReplay::default()
        };
        let task = replay_task(session, &history, &onto).unwrap();
        assert_eq!(pinned(&task), ["billing@7", "triage@2"]);
    }
}
