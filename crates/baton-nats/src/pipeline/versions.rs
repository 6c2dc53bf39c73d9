//! Which subject a task for an agent type goes to. An agent type without a
//! rollout keeps its one subject, `baton.agent.<A>`, as ever. A versioned
//! one has a subject per version, `baton.agent.<A>.<V>`: a session goes to
//! the version it is pinned to (the envelope's `versions`), and the first
//! time it reaches the type it is pinned to the version its rollout chooses
//! for its id (the conversation's, for a turn), so every later visit, by any
//! process, goes to the same version.

use baton_proto::{AgentName, Envelope, Subjects, Version};

use crate::state::rollouts::Rollouts;

/// The id a session's choice of version sticks to: its conversation's for
/// a turn, else its own.
#[must_use]
pub(crate) fn sticky(envelope: &Envelope) -> String {
    envelope.conversation.as_ref().map_or_else(
        || envelope.session.to_string(),
        |turn| format!("conversation/{}", turn.id),
    )
}

/// Pins `envelope` at agent type `to` to the version `rollouts` choose for
/// it, unless it is pinned there already or `to` is not versioned. `true`
/// when it pinned.
pub(crate) fn pin(rollouts: &Rollouts, to: &AgentName, envelope: &mut Envelope) -> bool {
    if !pins(rollouts, to, envelope) {
        return false;
    }
    let Some(version) = rollouts.choose(to, &sticky(envelope)) else {
        return false;
    };
    envelope.versions.insert(to.clone(), version);
    true
}

/// Whether [`pin`] would pin `envelope` at `to`: `to` is versioned and the
/// envelope is not pinned there yet. Unversioned types (most) cost one
/// lookup and no allocation, so a sender that copies an envelope to pin it
/// asks first.
#[must_use]
pub(crate) fn pins(rollouts: &Rollouts, to: &AgentName, envelope: &Envelope) -> bool {
    !envelope.versions.contains_key(to.as_str()) && rollouts.is_versioned(to)
}

/// Addresses `envelope` to agent type `to`: pins it to the version its
/// rollout chooses there (as [`pin`]) and returns the subject it goes to
/// (as [`subject_of`]). Every sender reaches it through the seam
/// ([`address::addressed`](super::address::addressed)); a worker's
/// delivery names the subject of an output the seam pinned with
/// [`subject_of`]. Either way a versioned type is reached at its pinned
/// subject in one hop.
pub(crate) fn address(
    rollouts: &Rollouts,
    subjects: &Subjects,
    to: &AgentName,
    envelope: &mut Envelope,
) -> String {
    pin(rollouts, to, envelope);
    subject_of(subjects, to, envelope)
}

/// The subject of `envelope` for agent type `to`: the version it is pinned
/// to there, else the agent type's own subject.
pub fn subject_of(subjects: &Subjects, to: &AgentName, envelope: &Envelope) -> String {
    if let Some(pinned) = envelope.versions.get(to.as_str()) {
        if let Ok(version) = Version::new(pinned.as_str()) {
            return subjects.agent_version(to, &version);
        }
        tracing::warn!(agent = %to, version = %pinned, "a pin that is not a version is ignored");
    }
    subjects.agent(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unversioned_type_keeps_its_subject_and_a_pin_wins() {
        let subjects = Subjects::default();
        let helper = AgentName::new("helper").unwrap();
        let mut task = Envelope::task("hi");
        assert!(!pin(&Rollouts::default(), &helper, &mut task));
        assert_eq!(subject_of(&subjects, &helper, &task), "baton.agent.helper");
        assert!(task.versions.is_empty(), "nothing pinned without a rollout");
        task.versions.insert(
            baton_proto::AgentName::from_static("helper"),
            baton_proto::Version::from_static("2"),
        );
        assert_eq!(
            subject_of(&subjects, &helper, &task),
            "baton.agent.helper.2"
        );
        // A turn's choice sticks to its conversation, not its session.
        let mut turn = Envelope::task("again");
        turn.conversation = Some(baton_proto::TurnOf {
            id: "c-1".into(),
            turn: 2,
            hand_back: false,
            extra: baton_proto::Map::new(),
        });
        assert_eq!(sticky(&turn), "conversation/c-1");
        assert_eq!(sticky(&task), task.session.to_string());
    }
}
