//! A session's deadline timer: the message a sender publishes beside a
//! task with a deadline, which the router's deadline watch
//! (`baton-router`'s `deadlines.rs`) holds until then.

use baton_proto::{DeadlineTimer, Envelope, Subjects, Wire};
use bytes::Bytes;

use crate::nats::publish::{Class, Outgoing};

/// The timer of `envelope`'s session, if it has a deadline.
pub fn timer_for(subjects: &Subjects, envelope: &Envelope) -> Option<Outgoing> {
    let deadline = envelope.deadline?;
    let timer = DeadlineTimer::new(envelope.session, deadline);
    let payload = timer.to_msgpack().ok()?;
    Some(Outgoing {
        class: Class::Plain,
        subject: subjects.deadline_timers(),
        id: timer.id(),
        payload: Bytes::from(payload),
        headers: Default::default(),
    })
}
