//! The latest sessions, kept up to date from the events stream by one
//! consumer per console process (not one per browser).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use async_nats::jetstream::{self, consumer};
use baton_nats::live;
use baton_proto::{Event, EventType, Hop, Subjects, Value, Wire};
use futures::StreamExt;
use tokio::sync::broadcast;
use uuid::Uuid;

mod versions;

pub use versions::{Versioned, Versions};

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// An agent has it, or it is queued for one.
    Running,
    /// A person must answer it (the human inbox).
    Waiting,
    /// It ended with an answer.
    Completed,
    /// It ended without one.
    Failed,
}

impl State {
    /// The name shown and used in filters.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Waiting => "waiting",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }

    /// The state of filter value `name`.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Running, Self::Waiting, Self::Completed, Self::Failed]
            .into_iter()
            .find(|state| state.as_str() == name)
    }
}

/// What the console knows of one session.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The session id.
    pub id: Uuid,
    /// Where it stands.
    pub state: State,
    /// The agent that has it, or had it last.
    pub agent: Option<String>,
    /// The agents it visited so far.
    pub path: Vec<Hop>,
    /// When its first known event happened, unix ms.
    pub started: u64,
    /// When its latest event happened, unix ms.
    pub updated: u64,
    /// `completed`: the answer.
    pub output: Option<Value>,
    /// `failed` (or the latest problem): the reason code.
    pub reason: Option<String>,
    /// Human-readable detail of the latest event that has one.
    pub detail: Option<String>,
    /// The trace id of its latest event's `traceparent` header.
    pub trace_id: Option<String>,
    /// The answer an agent is writing, while the session runs (from its
    /// live `delta` events).
    pub writing: Option<Writing>,
    /// The conversation it is a turn of, and which turn.
    pub conversation: Option<(String, u32)>,
    /// The versions its agents ran at, as its events name them.
    pub versions: Versions,
}

pub use baton_gateway::turn::labelled as label;

/// An answer being written: who writes it, which model call of which hop,
/// and the text so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writing {
    /// The agent writing it.
    pub agent: String,
    /// The hop's envelope.
    pub envelope: Uuid,
    /// The model call within the hop, from 1.
    pub step: u32,
    /// The text so far.
    pub text: String,
}

impl Writing {
    /// Takes a piece of an answer: the text beyond what is here, of this
    /// answer; a piece of another answer starts that one.
    fn take(writing: &mut Option<Self>, agent: &str, delta: &baton_proto::Delta) {
        let same = writing
            .as_ref()
            .is_some_and(|w| (w.envelope, w.step) == (delta.envelope, delta.step));
        if !same {
            *writing = Some(Self {
                agent: agent.to_owned(),
                envelope: delta.envelope,
                step: delta.step,
                text: String::new(),
            });
        }
        let Some(writing) = writing.as_mut() else {
            return;
        };
        let fresh = delta.beyond(writing.text.len() as u64);
        writing.text.push_str(fresh);
    }
}

impl Summary {
    /// A session of which nothing is known yet.
    #[must_use]
    pub fn new(id: Uuid, at: u64) -> Self {
        Self {
            id,
            state: State::Running,
            agent: None,
            path: Vec::new(),
            started: at,
            updated: at,
            output: None,
            reason: None,
            detail: None,
            trace_id: None,
            writing: None,
            conversation: None,
            versions: Versions::default(),
        }
    }

    /// The agent that has it (or had it last) as `TYPE@VERSION` (see
    /// [`label`]).
    #[must_use]
    pub fn agent_label(&self) -> Option<String> {
        self.agent
            .as_deref()
            .map(|agent| self.versions.label(agent))
    }

    /// Whether it has ended.
    #[must_use]
    pub fn ended(&self) -> bool {
        matches!(self.state, State::Completed | State::Failed)
    }

    /// Takes `event` into account (`versioned`: the agent types whose
    /// versions it names). Once a session has ended, only a `reopened`
    /// event (a replayed dead letter) makes it run again; a progress event
    /// that arrives late changes nothing.
    pub fn apply(&mut self, event: &Event, versioned: &Versioned) {
        self.started = self.started.min(event.at);
        if let Some(first) = event.path.first() {
            self.started = self.started.min(first.accepted_at.unwrap_or(first.at));
        }
        self.updated = self.updated.max(event.at);
        if let (None, Some(turn)) = (&self.conversation, &event.conversation) {
            self.conversation = Some((turn.id.clone(), turn.turn));
        }
        if event.path_from.is_some() {
            // A compact handoff: its new hop after the path so far.
            Event::follow_path(&mut self.path, event);
        } else if event.path.len() >= self.path.len() && !event.path.is_empty() {
            self.path.clone_from(&event.path);
        }
        if let Some(detail) = &event.detail {
            self.detail = Some(detail.clone());
        }
        // Even a late event says truly which version ran.
        self.versions.take(event, versioned);
        if self.ended() && event.kind != EventType::Reopened && !event.kind.is_terminal() {
            return;
        }
        if event.kind.is_terminal() {
            self.writing = None;
        }
        match event.kind {
            EventType::Delta => {
                self.state = State::Running;
                self.agent = event.agent.as_ref().map(ToString::to_string);
                if let Some(delta) = baton_proto::Delta::of(event) {
                    let agent = event.agent.as_deref().unwrap_or("?");
                    Writing::take(&mut self.writing, agent, &delta);
                }
            }
            EventType::Accepted | EventType::Retrying | EventType::Result => {
                self.state = State::Running;
                self.agent = event.agent.as_ref().map(ToString::to_string);
            }
            EventType::Handoff | EventType::Escalated | EventType::Rejected => {
                self.state = State::Running;
                self.agent = (event.to.as_ref().or(event.agent.as_ref())).map(ToString::to_string);
            }
            EventType::Waiting => {
                self.state = State::Waiting;
                self.agent = event.agent.as_ref().map(ToString::to_string);
            }
            EventType::Reopened => {
                self.state = State::Running;
                self.output = None;
                self.reason = None;
            }
            EventType::Completed => {
                self.state = State::Completed;
                self.output.clone_from(&event.output);
                self.reason = None;
                if event.agent.is_some() {
                    self.agent = event.agent.as_ref().map(ToString::to_string);
                }
            }
            EventType::Failed => {
                self.state = State::Failed;
                self.reason = event.reason.as_ref().map(|r| r.as_str().to_owned());
                if event.agent.is_some() {
                    self.agent = event.agent.as_ref().map(ToString::to_string);
                }
            }
            _ => {
                if let Some(reason) = &event.reason {
                    self.reason = Some(reason.as_str().to_owned());
                }
            }
        }
    }

    /// The summary of a session from its events, in order.
    #[must_use]
    pub fn of(id: Uuid, events: &[Event], versioned: &Versioned) -> Self {
        let mut summary = Self::new(id, events.first().map_or(0, |e| e.at));
        for event in events {
            summary.apply(event, versioned);
        }
        summary
    }
}

/// The sessions a console knows, newest first on demand, with a channel
/// that says which one changed.
#[derive(Clone)]
pub struct Index {
    sessions: Arc<RwLock<HashMap<Uuid, Summary>>>,
    capacity: usize,
    changed: broadcast::Sender<Uuid>,
    versioned: Versioned,
}

impl Index {
    /// An empty index of at most `capacity` sessions (the oldest go first).
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self {
            sessions: Arc::default(),
            capacity: capacity.max(1),
            changed: broadcast::channel(1024).0,
            versioned: Versioned::default(),
        }
    }

    /// The agent types that are versioned, as far as it knows.
    #[must_use]
    pub fn versioned(&self) -> &Versioned {
        &self.versioned
    }

    /// Ids of the sessions that change, as they change.
    #[must_use]
    pub fn subscribe(&self) -> broadcast::Receiver<Uuid> {
        self.changed.subscribe()
    }

    /// One session's summary.
    #[must_use]
    pub fn get(&self, id: Uuid) -> Option<Summary> {
        self.read().get(&id).cloned()
    }

    /// The sessions, most recently updated first.
    #[must_use]
    pub fn latest(&self) -> Vec<Summary> {
        let mut all: Vec<Summary> = self.read().values().cloned().collect();
        all.sort_by(|a, b| b.updated.cmp(&a.updated).then(b.id.cmp(&a.id)));
        all
    }

    /// How many sessions it holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether it holds none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Uuid, Summary>> {
        self.sessions
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes `event` (with its message's trace id) into account.
    pub fn apply(&self, event: &Event, trace_id: Option<String>) {
        {
            let mut sessions = self
                .sessions
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let summary = sessions
                .entry(event.session)
                .or_insert_with(|| Summary::new(event.session, event.at));
            summary.apply(event, &self.versioned);
            if trace_id.is_some() {
                summary.trace_id = trace_id;
            }
            if sessions.len() > self.capacity {
                let oldest = sessions
                    .values()
                    .min_by_key(|s| (s.updated, s.id))
                    .map(|s| s.id);
                if let Some(oldest) = oldest.filter(|id| *id != event.session) {
                    sessions.remove(&oldest);
                }
            }
        }
        // Nobody listening is fine.
        let _ = self.changed.send(event.session);
    }
}

/// Stops a task when the owner goes.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The trace id in a `traceparent` header value (`00-<trace>-<span>-<flags>`).
#[must_use]
pub fn trace_id(traceparent: &str) -> Option<String> {
    let trace = traceparent.split('-').nth(1)?;
    let valid = trace.len() == 32
        && trace.bytes().all(|b| b.is_ascii_hexdigit())
        && trace.bytes().any(|b| b != b'0');
    valid.then(|| trace.to_ascii_lowercase())
}

/// The trace id of a message's headers.
pub(crate) fn trace_of(headers: Option<&async_nats::HeaderMap>) -> Option<String> {
    headers
        .and_then(|h| h.get(baton_proto::headers::TRACEPARENT))
        .and_then(|value| trace_id(value.as_str()))
}

/// Starts following which agent types are versioned, and waits a moment
/// for what is stored: before the sessions that name them are read. The
/// watch stops when the returned guard is dropped.
async fn versioned_first(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    index: &Index,
) -> AbortOnDrop {
    let (known, rollouts_read) = tokio::sync::oneshot::channel();
    let rollouts = tokio::spawn(versions::follow_rollouts(
        jetstream.clone(),
        subjects.rollouts_bucket(),
        index.versioned.clone(),
        known,
    ));
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), rollouts_read).await;
    AbortOnDrop(rollouts)
}

/// The latest stored event of each session, then every new one stored.
async fn latest_per_session(
    stream: &mut jetstream::stream::Stream,
    subjects: &Subjects,
) -> Result<consumer::pull::Ordered, crate::Error> {
    let name = subjects.events_stream();
    let unread = |err: &dyn std::fmt::Display| {
        crate::Error::store(format!("cannot read stream {name}: {err}"))
    };
    stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: subjects.all_events(),
            deliver_policy: consumer::DeliverPolicy::LastPerSubject,
            ..Default::default()
        })
        .await
        .map_err(|err| unread(&err))?
        .messages()
        .await
        .map_err(|err| unread(&err))
}

/// Feeds `index` until the connection closes: the latest event of each
/// stored session first (the stream's last message per subject), then
/// every new event, stored or live (`--events lean` progress).
///
/// # Errors
///
/// When the events stream cannot be read or followed.
pub async fn follow(
    jetstream: jetstream::Context,
    subjects: Subjects,
    index: Index,
    ready: tokio::sync::oneshot::Sender<()>,
) -> Result<(), crate::Error> {
    let _rollouts = versioned_first(&jetstream, &subjects, &index).await;
    let name = subjects.events_stream();
    let mut stream = jetstream
        .get_stream(&name)
        .await
        .map_err(|err| crate::Error::store(format!("cannot open stream {name}: {err}")))?;
    let stored_now = stream
        .info()
        .await
        .map_err(|err| crate::Error::store(format!("cannot read stream {name}: {err}")))?
        .state
        .messages;
    // Ready once every session stored now is in: at once on an empty
    // stream, else with the stored message that has none pending after it.
    let mut ready = Some(ready);
    if stored_now == 0 {
        ready.take().map(|ready| ready.send(()));
    }
    let live = jetstream
        .client()
        .subscribe(subjects.all_live())
        .await
        .map_err(|err| crate::Error::store(format!("cannot follow the live events: {err}")))?;
    // While the index lives, `lean` workers publish every session's progress.
    let _following = live::follow(&jetstream.client(), &subjects, live::Scope::All).await;
    let stored = latest_per_session(&mut stream, &subjects).await?;
    let stored = stored.filter_map(|message| async move {
        let message = message
            .inspect_err(|err| tracing::warn!(error = %err, "events stream"))
            .ok()?;
        let caught_up = message.info().is_ok_and(|info| info.pending == 0);
        Some((
            message.payload.clone(),
            trace_of(message.headers.as_ref()),
            caught_up,
        ))
    });
    let live = live.map(|message| (message.payload, trace_of(message.headers.as_ref()), false));
    let mut all = futures::stream::select(stored.boxed(), live.boxed());
    while let Some((payload, trace, caught_up)) = all.next().await {
        // A large output stays claim-checked: the summary does not need it.
        match Event::from_msgpack(&payload) {
            Ok(event) => {
                let mut events = event.unfold();
                let last = events.pop();
                for folded in &events {
                    index.apply(folded, None);
                }
                if let Some(event) = last {
                    index.apply(&event, trace);
                }
            }
            Err(err) => tracing::debug!(error = %err, "skipping an unreadable event"),
        }
        if caught_up {
            ready.take().map(|ready| ready.send(()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_proto::Reason;

    fn event(kind: EventType, agent: &str, at: u64) -> Event {
        let mut event = Event::new(Uuid::new_v4(), Uuid::nil(), kind);
        event.agent = Some(baton_proto::AgentName::unchecked(agent));
        event.at = at;
        event
    }

    #[test]
    fn an_answer_grows_once_each_piece_and_ends_with_the_session() {
        let mut summary = Summary::new(Uuid::nil(), 10);
        let envelope = Uuid::new_v4();
        let piece = |offset: u64, text: &str, step: u32| {
            baton_proto::Delta {
                envelope,
                step,
                offset,
                text: text.to_owned(),
            }
            .event(Uuid::nil(), &baton_proto::AgentName::from_static("writer"))
        };
        summary.apply(&piece(0, "The answer ", 1), &Versioned::default());
        summary.apply(&piece(11, "is ", 1), &Versioned::default());
        // A stream cut and asked again sends its pieces from 0 again.
        summary.apply(&piece(0, "The answer is ", 1), &Versioned::default());
        summary.apply(&piece(14, "42.", 1), &Versioned::default());
        let writing = summary.writing.clone().unwrap();
        assert_eq!(
            (writing.agent.as_str(), writing.text.as_str()),
            ("writer", "The answer is 42.")
        );
        assert_eq!(summary.state, State::Running);
        summary.apply(&piece(0, "Next", 2), &Versioned::default());
        assert_eq!(summary.writing.as_ref().unwrap().text, "Next");
        summary.apply(
            &event(EventType::Completed, "writer", 50),
            &Versioned::default(),
        );
        assert_eq!(summary.writing, None);
    }

    #[test]
    fn a_session_runs_waits_ends_and_reopens() {
        let mut summary = Summary::new(Uuid::nil(), 10);
        summary.apply(
            &event(EventType::Accepted, "front", 10),
            &Versioned::default(),
        );
        assert_eq!(
            (summary.state, summary.agent.as_deref()),
            (State::Running, Some("front"))
        );
        let mut handoff = event(EventType::Handoff, "front", 20);
        handoff.to = Some(baton_proto::AgentName::from_static("back"));
        handoff.path = vec![Hop::new(
            baton_proto::AgentName::from_static("front"),
            "f1",
            None,
        )];
        summary.apply(&handoff, &Versioned::default());
        assert_eq!(summary.agent.as_deref(), Some("back"));
        summary.apply(
            &event(EventType::Waiting, "human", 30),
            &Versioned::default(),
        );
        assert_eq!(summary.state, State::Waiting);
        let mut failed = event(EventType::Failed, "human", 40);
        failed.reason = Some(Reason::DeadlineExceeded);
        summary.apply(&failed, &Versioned::default());
        assert_eq!(summary.state, State::Failed);
        assert_eq!(summary.reason.as_deref(), Some("deadline_exceeded"));
        // A late progress event does not revive it; a replay does.
        summary.apply(
            &event(EventType::Accepted, "back", 35),
            &Versioned::default(),
        );
        assert_eq!(summary.state, State::Failed);
        summary.apply(
            &event(EventType::Reopened, "dlq", 50),
            &Versioned::default(),
        );
        assert_eq!(summary.state, State::Running);
        let mut done = event(EventType::Completed, "back", 60);
        done.output = Some(Value::from("ok"));
        summary.apply(&done, &Versioned::default());
        assert_eq!(summary.state, State::Completed);
        assert_eq!((summary.started, summary.updated), (10, 60));
        assert_eq!(summary.path.len(), 1);
    }

    #[test]
    fn a_compact_handoff_adds_its_hop_to_the_path_so_far() {
        let mut summary = Summary::new(Uuid::nil(), 10);
        let mut first = event(EventType::Handoff, "front", 20);
        first.path = vec![Hop::new(
            baton_proto::AgentName::from_static("front"),
            "f1",
            None,
        )];
        summary.apply(&first, &Versioned::default());
        let mut second = event(EventType::Handoff, "middle", 30);
        second.path = vec![Hop::new(
            baton_proto::AgentName::from_static("middle"),
            "m1",
            None,
        )];
        second.path_from = Some(1);
        summary.apply(&second, &Versioned::default());
        let agents: Vec<&str> = summary.path.iter().map(|h| h.agent.as_str()).collect();
        assert_eq!(agents, ["front", "middle"]);
    }

    #[test]
    fn the_index_keeps_the_newest_sessions_and_says_which_changed() {
        let index = Index::new(2);
        let mut changes = index.subscribe();
        for (n, at) in [(1u128, 100), (2, 200), (3, 300)] {
            let mut e = event(EventType::Accepted, "a", at);
            e.session = Uuid::from_u128(n);
            index.apply(&e, None);
        }
        let ids: Vec<Uuid> = index.latest().iter().map(|s| s.id).collect();
        assert_eq!(ids, [Uuid::from_u128(3), Uuid::from_u128(2)]);
        assert_eq!(changes.try_recv().ok(), Some(Uuid::from_u128(1)));
    }

    #[test]
    fn versions_come_from_versioned_reporters_and_from_the_pins_on_the_end() {
        let helper = Versioned::of(["helper"]);
        let mut summary = Summary::new(Uuid::nil(), 10);
        let mut accepted = event(EventType::Accepted, "helper", 10);
        accepted.version = Some(baton_proto::Version::from_static("1"));
        accepted.instance = Some("w1".into());
        summary.apply(&accepted, &helper);
        assert_eq!(summary.agent_label().as_deref(), Some("helper@1"));
        // A router's event names no version, and changes none.
        summary.apply(&event(EventType::Retrying, "helper", 20), &helper);
        assert_eq!(summary.agent_label().as_deref(), Some("helper@1"));
        // A spec's hash labels the events of a type that has no rollout.
        let mut handoff = event(EventType::Handoff, "plain", 30);
        handoff.version = Some(baton_proto::Version::from_static("e07de5fa828a"));
        handoff.to = Some(baton_proto::AgentName::from_static("helper"));
        summary.apply(&handoff, &helper);
        assert_eq!(summary.versions.label("plain"), "plain");
        assert_eq!(summary.versions.event_label(&handoff), "plain");
        assert_eq!(summary.versions.event_label(&accepted), "helper@1");
        assert_eq!(
            summary.versions.hop_label(&Hop::new(
                baton_proto::AgentName::from_static("helper"),
                "w1",
                None
            )),
            "helper@1"
        );
        // Only the end of a session stored before the console started (or
        // of a type no longer versioned): its pins.
        let mut end = event(EventType::Completed, "plain", 40);
        end.versions.insert(
            baton_proto::AgentName::from_static("helper"),
            baton_proto::Version::from_static("2"),
        );
        end.version = Some(baton_proto::Version::from_static("e07de5fa828a"));
        let late = Summary::of(Uuid::nil(), &[end], &Versioned::default());
        assert_eq!(late.versions.label("helper"), "helper@2");
        assert_eq!(late.agent_label().as_deref(), Some("plain"));
        let hop = Hop::new(baton_proto::AgentName::from_static("helper"), "w9", None);
        assert_eq!(late.versions.hop_label(&hop), "helper@2");
    }

    #[test]
    fn trace_ids_come_from_valid_traceparents_only() {
        assert_eq!(
            trace_id("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01").as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert_eq!(
            trace_id("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
            None
        );
        assert_eq!(trace_id("garbage"), None);
    }
}
