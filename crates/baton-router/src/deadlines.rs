//! The deadline watch: every session with a deadline has one timer message,
//! held by the router (Nak with a delay) until the deadline. Then, unless
//! the session has ended, the router ends it with a `failed` event
//! (`deadline_exceeded`), wherever its task is: waiting in a queue, running,
//! waiting on a join or for a person. The event's id is shared with the
//! workers' own deadline failures, so the session ends once. The watch acts
//! one second after the deadline: a worker that holds the task ends it at
//! the deadline itself, and the watch then finds it ended.

use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use baton_proto::{
    AgentName, DeadlineTimer, Event, EventType, Reason, Subjects, Wire, deadline_event_id, now_ms,
};
use bytes::Bytes;

use baton_nats::nats::publish::{Class, Outgoing, Publisher};
use baton_nats::pipeline::delivery::Delivery;
use baton_nats::pipeline::plan::Settle;
use baton_nats::pipeline::settle::finish;
use baton_nats::state::session::last_event;

/// How long after the deadline the watch acts, so that a worker holding the
/// task ends the session first.
const GRACE_MS: u64 = 1000;

/// How long to hold a timer that is due in `ms`: never longer than a
/// deadline may lie ahead (a timer from the wire may carry any number), so
/// the delay always fits the server's nanosecond count and a timer is never
/// redelivered at once for want of a valid delay.
fn hold(ms: u64) -> Duration {
    Duration::from_millis(ms.clamp(1, baton_proto::MAX_DEADLINE_AHEAD_MS + GRACE_MS))
}

/// The wait before the `delivered`-th check of a due timer is tried again:
/// doubling from one second to a minute, so a store that cannot be read
/// does not spin the timer through its deliveries.
fn retry_delay(delivered: i64) -> Duration {
    let doublings = u32::try_from(delivered.saturating_sub(1).clamp(0, 6)).unwrap_or(6);
    Duration::from_secs(1u64 << doublings).min(Duration::from_secs(60))
}

/// Handles one timer message: holds it until the deadline, then ends the
/// session unless it has ended.
pub(crate) async fn on_timer(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    publisher: &Publisher,
    me: &AgentName,
    message: jetstream::Message,
) {
    let timer = match DeadlineTimer::from_msgpack(&message.payload) {
        Ok(timer) => timer,
        Err(err) => {
            // Dead-lettered under the router's name, like any unreadable task.
            tracing::warn!(error = %err, "unreadable deadline timer; dead-lettering it");
            let span = tracing::info_span!("baton.deadline");
            let delivery = Delivery::new(message, span, subjects, me);
            let outgoing = delivery.unreadable(&err.reason(), err.detail());
            finish(publisher, &delivery, &outgoing, Settle::Term).await;
            return;
        }
    };
    let now = now_ms();
    let due = timer.deadline.saturating_add(GRACE_MS);
    if now < due {
        let _ = message.ack_with(AckKind::Nak(Some(hold(due - now)))).await;
        return;
    }
    let last = match last_event(jetstream, subjects, timer.session).await {
        Ok(last) => last,
        Err(err) => {
            let delivered = message.info().map_or(1, |info| info.delivered);
            let delay = retry_delay(delivered);
            tracing::warn!(error = %err, ?delay, "deadline check failed; trying again");
            let _ = message.ack_with(AckKind::Nak(Some(delay))).await;
            return;
        }
    };
    if last.as_ref().is_some_and(|event| event.kind.is_terminal()) {
        let _ = message.double_ack().await;
        return;
    }
    let Some(outgoing) = failed_at_deadline(subjects, &timer, last, now) else {
        return;
    };
    match publisher.publish_one(&outgoing).await {
        Ok(()) => {
            tracing::info!(session = %timer.session, "session failed at its deadline");
            let _ = message.double_ack().await;
        }
        Err(err) => tracing::error!(error = %err, "deadline event not durable; the timer stays"),
    }
}

/// The `failed` event of a session whose deadline passed at `now`, its last
/// event `last`, guarded so it lands only while the session runs; `None`
/// (logged) when it cannot be encoded.
fn failed_at_deadline(
    subjects: &Subjects,
    timer: &DeadlineTimer,
    last: Option<Event>,
    now: u64,
) -> Option<Outgoing> {
    let state = match &last {
        None => "its task was still queued".to_owned(),
        Some(event) => format!(
            "its last event was {} by {}",
            event.kind,
            event.agent.as_deref().unwrap_or("?")
        ),
    };
    let mut failed = Event::new(
        deadline_event_id(timer.session, timer.deadline),
        timer.session,
        EventType::Failed,
    );
    failed.agent = Some(baton_proto::AgentName::from_static("deadline"));
    failed.reason = Some(Reason::DeadlineExceeded);
    failed.detail = Some(format!(
        "the deadline passed {} ms ago and the session had not ended: {state}",
        now - timer.deadline
    ));
    // A replay's end says so, as its other events do.
    failed.replay_of = last.as_ref().and_then(|event| event.replay_of);
    failed.path = last.map(|event| event.path).unwrap_or_default();
    match failed.to_msgpack() {
        Ok(payload) => Some(Outgoing {
            // Written only while the session has not ended.
            class: Class::Ending(subjects.events_stream()),
            subject: subjects.events(timer.session),
            id: failed.id,
            payload: Bytes::from(payload),
            headers: Default::default(),
        }),
        Err(err) => {
            tracing::error!(error = %err, "cannot encode a deadline event");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timer_is_held_for_a_bounded_delay_that_the_server_can_express() {
        assert_eq!(hold(0), Duration::from_millis(1));
        assert_eq!(hold(5_000), Duration::from_millis(5_000));
        let longest = hold(u64::MAX);
        assert_eq!(
            longest,
            Duration::from_millis(baton_proto::MAX_DEADLINE_AHEAD_MS + GRACE_MS)
        );
        assert!(
            i64::try_from(longest.as_nanos()).is_ok(),
            "fits a nanosecond i64"
        );
    }

    #[test]
    fn failed_checks_back_off_from_one_second_to_a_minute() {
        let delays: Vec<u64> = (1..=9).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }
}
