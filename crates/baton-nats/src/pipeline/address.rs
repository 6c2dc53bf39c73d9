//! The one seam that addresses a message to an agent type. Every sender
//! goes through it: the router forwarding a task, a sender past the router
//! (a conversation's turn), the client sending to a named type, the inbox
//! handing a session on, the worker moving a task from its type's own
//! subject to its version's, and a dead letter sent again. How it is sent
//! ([`Sending`]) decides the rest: the id it goes under, the router's
//! defaults, the version (pinned, or chosen now: [`versions`](super::versions)),
//! the subject, and whether its deadline is watched from now on.

use baton_proto::{AgentName, Envelope, Subjects, derive_id, derive_id_labelled};
use uuid::Uuid;

use super::defaults::Defaults;
use super::{timer, versions};
use crate::nats::publish::Outgoing;
use crate::state::rollouts::Rollouts;

/// How a message is sent on to an agent type.
#[derive(Debug, Clone, Copy)]
pub enum Sending<'a> {
    /// Forwarded as the router forwards a task, by the router or by a
    /// sender past it: under an id derived from the one it came with, with
    /// the router's defaults where it sets none, its deadline watched from
    /// now on.
    Routed(&'a Defaults),
    /// Sent by a caller to the agent type it names, not through the
    /// router: under its own id, its deadline watched from now on.
    Direct,
    /// Handed on within a session (a person's answer, a decided tool
    /// call): under its own id; its deadline is watched already.
    HandedOn,
    /// Moved from the agent type's own subject to its version's: under an
    /// id of its own (the first is in the stream's duplicate window); its
    /// deadline is watched already.
    Moved,
    /// A dead letter sent again (`baton dlq replay`), with its sequence in
    /// the dead-letter stream: under an id derived from its own and the
    /// sequence, its deadline watched anew.
    Replayed(u64),
}

/// Where a message goes and under what id, once addressed.
#[derive(Debug)]
pub struct Addressed {
    /// The id it is published under.
    pub id: Uuid,
    /// The subject: its version's when the session is pinned at the type.
    pub subject: String,
    /// Its deadline's timer, to publish beside it when its deadline is
    /// watched from now on.
    pub timer: Option<Outgoing>,
}

/// Addresses `envelope` to agent type `to`, sent as `sending` says: the
/// router's defaults applied and the session pinned at `to` in
/// `envelope`; the id, subject and timer returned.
pub fn addressed(
    (rollouts, subjects): (&Rollouts, &Subjects),
    sending: Sending<'_>,
    to: &AgentName,
    envelope: &mut Envelope,
) -> Addressed {
    if let Sending::Routed(defaults) = sending {
        defaults.apply(envelope);
    }
    let subject = versions::address(rollouts, subjects, to, envelope);
    let id = id_of(sending, envelope);
    let timer = match sending {
        Sending::Routed(_) | Sending::Direct | Sending::Replayed(_) => {
            timer::timer_for(subjects, envelope)
        }
        Sending::HandedOn | Sending::Moved => None,
    };
    Addressed { id, subject, timer }
}

/// Addresses a dead letter sent again (`baton dlq replay`) that was stored
/// from `subject`, with its sequence `seq`: to the agent type the subject
/// names (pinned now, when it was not), else back to the subject (the
/// router's ingress), under the replay's id and with its deadline watched
/// anew.
pub fn replayed(
    (rollouts, subjects): (&Rollouts, &Subjects),
    seq: u64,
    subject: &str,
    envelope: &mut Envelope,
) -> Addressed {
    let sending = Sending::Replayed(seq);
    match subjects.agent_of(subject) {
        Some(to) => addressed((rollouts, subjects), sending, &to, envelope),
        None => Addressed {
            id: id_of(sending, envelope),
            subject: subject.to_owned(),
            timer: timer::timer_for(subjects, envelope),
        },
    }
}

/// The id `envelope` goes under, sent as `sending` says.
fn id_of(sending: Sending<'_>, envelope: &Envelope) -> Uuid {
    match sending {
        Sending::Routed(_) => derive_id(envelope.id, 0),
        Sending::Moved => derive_id_labelled(envelope.id, "version", 0),
        Sending::Replayed(seq) => derive_id_labelled(
            envelope.id,
            "replay",
            u32::try_from(seq).unwrap_or(u32::MAX),
        ),
        Sending::Direct | Sending::HandedOn => envelope.id,
    }
}

/// Pins `envelope` at agent type `to` as [`addressed`] would, for a
/// message whose id its sender gave and whose subject is named from the pin
/// when it is sent: a worker's planned handoffs and children (its delivery
/// names the subject), a join's children and continuation. `true` when it
/// pinned.
pub fn pin_ahead(rollouts: &Rollouts, to: &AgentName, envelope: &mut Envelope) -> bool {
    versions::pin(rollouts, to, envelope)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn how_a_task_is_sent_decides_its_id_defaults_and_watch() {
        let subjects = Subjects::default();
        let rollouts = Rollouts::default();
        let helper = AgentName::new("helper").unwrap();
        let defaults = Defaults {
            deadline: Some(Duration::from_secs(60)),
            ..Defaults::default()
        };
        let task = Envelope::task("hi");

        let mut routed = task.clone();
        let sent = addressed(
            (&rollouts, &subjects),
            Sending::Routed(&defaults),
            &helper,
            &mut routed,
        );
        assert_eq!(sent.id, derive_id(task.id, 0));
        assert_eq!(sent.subject, "baton.agent.helper");
        assert!(routed.deadline.is_some(), "the router's default deadline");
        assert!(sent.timer.is_some(), "its deadline is watched");

        let mut direct = task.clone();
        let sent = addressed(
            (&rollouts, &subjects),
            Sending::Direct,
            &helper,
            &mut direct,
        );
        assert_eq!(sent.id, task.id);
        assert_eq!(direct.deadline, None, "no defaults past a named send");
        assert!(sent.timer.is_none(), "no deadline, nothing to watch");

        let mut moved = task.clone();
        moved.deadline = Some(baton_proto::now_ms() + 60_000);
        let sent = addressed((&rollouts, &subjects), Sending::Moved, &helper, &mut moved);
        assert_eq!(sent.id, derive_id_labelled(task.id, "version", 0));
        assert!(sent.timer.is_none(), "watched already");

        let mut planned = task.clone();
        planned.deadline = Some(baton_proto::now_ms() + 60_000);
        // A planned message keeps its id; an unversioned type pins nothing.
        assert!(!pin_ahead(&rollouts, &helper, &mut planned));
        assert_eq!((planned.id, planned.versions.len()), (task.id, 0));

        let mut again = planned.clone();
        let sent = addressed(
            (&rollouts, &subjects),
            Sending::Replayed(7),
            &helper,
            &mut again,
        );
        assert_eq!(sent.id, derive_id_labelled(task.id, "replay", 7));
        assert!(sent.timer.is_some(), "its deadline is watched anew");

        let ingress = subjects.ingress();
        let mut back = planned.clone();
        let sent = replayed((&rollouts, &subjects), 7, &ingress, &mut back);
        assert_eq!(sent.id, derive_id_labelled(task.id, "replay", 7));
        assert_eq!(sent.subject, ingress, "back where it was stored from");
        let mut again = planned.clone();
        let three = baton_proto::Version::from_static("3");
        again.versions.insert(helper.clone(), three);
        let sent = replayed(
            (&rollouts, &subjects),
            7,
            "baton.agent.helper.3",
            &mut again,
        );
        assert_eq!(
            sent.subject, "baton.agent.helper.3",
            "to the version it is pinned to"
        );

        let mut handed = moved.clone();
        let sent = addressed(
            (&rollouts, &subjects),
            Sending::HandedOn,
            &helper,
            &mut handed,
        );
        assert_eq!(sent.id, task.id);
        assert!(sent.timer.is_none(), "watched already");
    }
}
