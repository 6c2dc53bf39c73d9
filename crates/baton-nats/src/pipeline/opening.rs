//! A root task's ended-session check, riding on its first write.
//!
//! A session runs one task and ends once: a second root task for a session
//! that has ended (a careless client, a task delivered again after a server
//! lost its acks) must not write a second story into it. The check costs no
//! read: the first event the task's hop stores carries
//! `Nats-Expected-Last-Subject-Sequence: 0`, so the server stores it only
//! while the session has no events, and every later write of the hop
//! follows once it is stored. Only when the server refuses it is the
//! session read: ended, and the hop's outcome is dropped (the task is
//! dead-lettered as `session_ended`); events written by others first (the
//! router's `escalated`, a `reopened` from a dead letter's replay), and the
//! outcome is written as usual. A hop that stores no event of its own (a
//! handoff at the `lean` level) reads the session before its writes instead.
//!
//! The server checks the expectation before it looks for a duplicate id, so
//! a root task delivered again on its first attempt (a server lost its
//! acks) has its repeated first write refused too: the read then finds the
//! session ended (dead-lettered, as before) or running (its outputs are
//! written again under the same ids, and dropped as duplicates).
//!
//! The router, which writes no event of a hop, reads the session instead
//! ([`ended_before`]).

use async_nats::jetstream;
use baton_proto::{Event, Subjects, Wire};
use tokio::sync::Mutex;
use uuid::Uuid;

use crate::error::Error;
use crate::nats::events;
use crate::nats::publish::{Failure, Outgoing, Publisher, failed};
use crate::state::session::last_event;

/// The first write of a root task's hop: whether it has been made, and
/// what it found.
#[derive(Debug)]
pub struct Opening {
    /// The task's envelope.
    pub envelope: Uuid,
    pub session: Uuid,
    /// The events stream, and the session's subject in it.
    stream: String,
    subject: String,
    /// Held across the first write, so that the hop's other writes wait for it.
    state: Mutex<State>,
}

#[derive(Debug)]
enum State {
    Unwritten,
    Open,
    Ended(Box<Event>),
}

/// What a write through an [`Opening`] found.
#[derive(Debug)]
pub enum Opened {
    /// The message was written, as the session's first event.
    Written,
    /// The session runs: the message was not written by the opening; the
    /// caller writes it as usual.
    Open,
    /// The session ended with this event before the task arrived: nothing
    /// of the hop is to be written.
    Ended(Box<Event>),
}

impl Opening {
    /// The opening of root task `envelope` of `session`.
    pub(crate) fn new(subjects: &Subjects, envelope: Uuid, session: Uuid) -> Self {
        Self {
            envelope,
            session,
            stream: subjects.events_stream(),
            subject: subjects.events(session),
            state: Mutex::new(State::Unwritten),
        }
    }

    /// The session's events subject.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// Writes `message`, an event of the session, as its first one, if the
    /// hop has written none yet; see [`Opened`].
    ///
    /// # Errors
    ///
    /// As [`Publisher::publish_one`]; the opening is then still to make.
    pub async fn write(&self, publisher: &Publisher, message: &Outgoing) -> Result<Opened, Error> {
        let mut state = self.state.lock().await;
        match &*state {
            State::Open => return Ok(Opened::Open),
            State::Ended(end) => return Ok(Opened::Ended(end.clone())),
            State::Unwritten => {}
        }
        // Stored only while the session has no event (and refused for a
        // repeat of a stored first write too: see above).
        match publisher.publish_retrying(message, Some(0)).await {
            Ok(_) => {
                *state = State::Open;
                return Ok(Opened::Written);
            }
            Err(Failure::Raced) => {}
            Err(err) => return Err(failed(message, err)),
        }
        let opened = self.read(publisher).await;
        *state = opened.state();
        Ok(opened)
    }

    /// For a hop that stores no event of its own: whether the session
    /// ended, read.
    pub async fn check(&self, publisher: &Publisher) -> Opened {
        let mut state = self.state.lock().await;
        match &*state {
            State::Open => Opened::Open,
            State::Ended(end) => Opened::Ended(end.clone()),
            State::Unwritten => {
                let opened = self.read(publisher).await;
                *state = opened.state();
                opened
            }
        }
    }

    /// Whether the session's last event ends it. A session that cannot be
    /// read counts as open, as it always has.
    async fn read(&self, publisher: &Publisher) -> Opened {
        let last = events::last_message(publisher.jetstream(), &self.stream, &self.subject).await;
        match last {
            Ok(last) => {
                let last = last.and_then(|message| Event::from_msgpack(&message.payload).ok());
                match last.filter(|event| event.kind.is_terminal()) {
                    Some(end) => Opened::Ended(Box::new(end)),
                    None => Opened::Open,
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot tell whether the session ended; writing the outcome");
                Opened::Open
            }
        }
    }
}

/// For the router (a worker's check rides on the first event its hop
/// writes): the terminal event of `session` when the message that `opens`
/// it (see
/// `Envelope::opens_session`: a root task, not sent back after a person's
/// decision, not a conversation's turn) is on its first delivery (`attempt`
/// of 1) and the session has ended already: a careless client's second
/// task. A redelivery is not judged here: its outputs are republished under
/// the same ids, as always. Nor is a conversation's turn: it is sent only
/// while its conversation's record says it runs, which closing a turn reads the
/// session's end before changing, under an id derived from the turn (so a
/// repeat is a JetStream duplicate). A session that cannot be read counts
/// as open.
pub async fn ended_before(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    (session, opens): (Uuid, bool),
    attempt: u32,
) -> Option<Event> {
    if !opens || attempt != 1 {
        return None;
    }
    match last_event(jetstream, subjects, session).await {
        Ok(last) => last.filter(|event| event.kind.is_terminal()),
        Err(err) => {
            tracing::warn!(error = %err, "cannot tell whether the session ended; running the task");
            None
        }
    }
}

impl Opened {
    fn state(&self) -> State {
        match self {
            Opened::Written | Opened::Open => State::Open,
            Opened::Ended(end) => State::Ended(end.clone()),
        }
    }
}
