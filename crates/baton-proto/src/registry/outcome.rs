//! Outcomes and feedback (an optional extension): what became of each
//! session, kept in the `BATON_OUTCOMES` stream on
//! `baton.outcomes.<session>`, from which the registry learns which agent
//! types resolve which work, and keeps each agent type's notebook.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::{Event, EventType};
use crate::{Map, PROTOCOL_VERSION, Reason, derive_id_labelled, now_ms, uuid_text};

wire_enum! {
    /// What an outcome record says about its session.
    pub enum OutcomeKind {
        /// The session completed.
        Completed = "completed",
        /// The session failed.
        Failed = "failed",
        /// The session went to a person (it waits in a human agent's inbox).
        Escalated = "escalated",
        /// The session was opened again after it ended (a dead letter replayed):
        /// its earlier end did not resolve it.
        Reopened = "reopened",
        /// Someone said how well the session went (`score`, `note`).
        Feedback = "feedback",
    }
}

/// One agent on a session's path, as an outcome credits it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OutcomeHop {
    /// Agent type.
    pub agent: crate::AgentName,
    /// The capabilities it was chosen for (the `requires` that brought the
    /// session to it); empty when it was named directly.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
    /// The knowledge domains it was chosen for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domains: Vec<String>,
}

impl OutcomeHop {
    /// `agent`, named directly: chosen for no capability or domain.
    #[must_use]
    pub fn of(agent: crate::AgentName) -> Self {
        Self {
            agent,
            requires: Vec::new(),
            domains: Vec::new(),
        }
    }
}

/// A record on `baton.outcomes.<session>`: how a session ended, or what
/// someone said about it. Its `id` is its `Nats-Msg-Id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Outcome {
    /// Protocol major version: `1`.
    pub v: u64,
    /// Unique id; for an end, derived from the event that reports it, so
    /// the record is stored once.
    #[serde(with = "uuid_text")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub id: Uuid,
    /// The session.
    #[serde(with = "uuid_text")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub session: Uuid,
    /// When, unix ms.
    pub at: u64,
    /// What it says.
    pub kind: OutcomeKind,
    /// Why the session failed or was escalated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// The agents the session passed through, oldest first, then those
    /// that spoke in its conversation without a hop of their own
    /// (delegated children, team members) (empty on `reopened` and
    /// `feedback`: the session's earlier record has them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path: Vec<OutcomeHop>,
    /// From the first agent taking the session to this end, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// What the session spent, in millionths of the price tables' unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_micros: Option<u64>,
    /// What the session's first question looks like: its hashed n-grams
    /// ([`features`]), never its text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<u32>,
    /// `feedback`: how well the session went, 0 (not at all) to 1 (fully).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// `feedback`: what the person said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

impl Outcome {
    /// A record of `kind` about `session`, now; other fields empty.
    #[must_use]
    pub fn new(id: Uuid, session: Uuid, kind: OutcomeKind) -> Self {
        Self {
            v: PROTOCOL_VERSION,
            id,
            session,
            at: now_ms(),
            kind,
            reason: None,
            path: Vec::new(),
            duration_ms: None,
            cost_micros: None,
            features: Vec::new(),
            score: None,
            note: None,
            extra: Map::new(),
        }
    }

    /// The outcome `event` reports, if it ends (or re-opens) its session:
    /// `completed`, `failed`, `waiting` (escalated to a person) or
    /// `reopened`. Its id is derived from the event's, so every reader of
    /// the event writes the same record. A replay's end (`replay_of`,
    /// evaluations included) is no live outcome, and reports none.
    #[must_use]
    pub fn of(event: &Event) -> Option<Self> {
        if event.replay_of.is_some() {
            return None;
        }
        let kind = match event.kind {
            EventType::Completed => OutcomeKind::Completed,
            EventType::Failed => OutcomeKind::Failed,
            EventType::Waiting => OutcomeKind::Escalated,
            EventType::Reopened => OutcomeKind::Reopened,
            _ => return None,
        };
        let mut outcome = Self::new(
            derive_id_labelled(event.id, "outcome", 0),
            event.session,
            kind,
        );
        outcome.at = event.at;
        outcome.reason.clone_from(&event.reason);
        outcome.path = event
            .path
            .iter()
            .map(|hop| OutcomeHop {
                agent: hop.agent.clone(),
                requires: hop.requires.clone(),
                domains: hop.domains.clone(),
            })
            .collect();
        let started = event
            .path
            .first()
            .map(|hop| hop.accepted_at.unwrap_or(hop.at));
        outcome.duration_ms = started.map(|start| event.at.saturating_sub(start));
        outcome.cost_micros = event.usage.map(|usage| usage.cost_micros);
        if let Some(context) = &event.context {
            outcome.features = features(&context.initial_query);
            // Agents that took part without a hop of their own (delegated
            // children, team members) spoke in the conversation.
            for message in &context.messages {
                let Some(name) = &message.name else { continue };
                let Ok(agent) = crate::AgentName::new(name.as_str()) else {
                    continue;
                };
                let speaks = message.role == crate::Role::Agent
                    && !outcome.path.iter().any(|hop| hop.agent == agent);
                if speaks {
                    outcome.path.push(OutcomeHop::of(agent));
                }
            }
        }
        Some(outcome)
    }
}

/// Whether the session that `end` ends succeeded, as gated rollouts count
/// it (docs/operators/versions.md): a session succeeds when it completed;
/// it fails when it failed or was dead-lettered, or, when
/// `escalated_fails`, when it was `escalated` to a person on the way. A
/// reader that also has the session's feedback counts one marked wrong
/// (scored below one half) as failed. `None` when `end` does not end a
/// session.
#[must_use]
pub fn session_succeeded(end: &Event, escalated: bool, escalated_fails: bool) -> Option<bool> {
    match end.kind {
        EventType::Completed => Some(succeeded(true, (escalated, escalated_fails), None)),
        EventType::Failed | EventType::DeadLettered => Some(false),
        _ => None,
    }
}

/// A session's outcome, defined once for `baton eval`, gated rollouts,
/// the registry and the console (docs/operators/versions.md): it succeeded
/// when it `completed`, was not escalated to a person on the way (when
/// escalations fail: `(escalated, escalated_fails)`), and no one marked it
/// wrong (its latest `feedback` score, if any, is at least one half).
#[must_use]
pub fn succeeded(
    completed: bool,
    (escalated, escalated_fails): (bool, bool),
    feedback: Option<f64>,
) -> bool {
    completed && !(escalated && escalated_fails) && feedback.is_none_or(|score| score >= 0.5)
}

/// The hashed n-grams of a text, sorted and without repeats: what the
/// registry compares tasks by, so that similar questions find the agents
/// that resolved them. No model is involved, and the text is not kept.
///
/// The text is lower-cased and cut into words of letters and digits. Each
/// word, with a space on either side, gives its character 3-grams (a one-
/// letter word gives one); each 3-gram is hashed with 32-bit FNV-1a and
/// kept in 20 bits. At most the first 4096 characters count, and at most
/// [`MAX_FEATURES`] features are kept.
///
/// # Examples
///
/// ```
/// use baton_proto::{features, similarity};
///
/// let a = features("Refund my order ABC-123");
/// let b = features("please refund the order ABC-124");
/// let c = features("What is the weather in Oslo?");
/// assert!(similarity(&a, &b) > similarity(&a, &c));
/// ```
#[must_use]
pub fn features(text: &str) -> Vec<u32> {
    let text: String = text.chars().take(4096).collect::<String>().to_lowercase();
    let mut out = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        if word.is_empty() {
            continue;
        }
        let padded: Vec<char> = std::iter::once(' ')
            .chain(word.chars())
            .chain(std::iter::once(' '))
            .collect();
        for gram in padded.windows(3) {
            let gram: String = gram.iter().collect();
            out.push(fnv1a(gram.as_bytes()) & 0x000F_FFFF);
        }
    }
    out.sort_unstable();
    out.dedup();
    out.truncate(MAX_FEATURES);
    out
}

/// The most features [`features`] keeps.
pub const MAX_FEATURES: usize = 512;

/// How alike two feature sets are: shared features over all features
/// (Jaccard), 0 (nothing shared) to 1 (the same). Both must be sorted, as
/// [`features`] returns them.
#[must_use]
pub fn similarity(a: &[u32], b: &[u32]) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let (mut i, mut j, mut shared) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                shared += 1;
                i += 1;
                j += 1;
            }
        }
    }
    shared as f64 / (a.len() + b.len() - shared) as f64
}

fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replays_end_is_no_live_outcome() {
        let mut end = Event::new(Uuid::new_v4(), Uuid::new_v4(), EventType::Completed);
        assert!(Outcome::of(&end).is_some());
        end.replay_of = Some(Uuid::new_v4());
        assert_eq!(Outcome::of(&end), None);
    }

    #[test]
    fn features_are_stable_sorted_and_case_blind() {
        let a = features("Refund ORDER 7");
        assert_eq!(a, features("refund, order 7!"));
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        // " r", "ref", "efu", "fun", "und", "nd " + " or", "ord", "rde", "der", "er " + " 7 "
        assert_eq!(a.len(), 12);
        assert_eq!(fnv1a(b"a"), 0xe40c_292c, "FNV-1a's published value");
    }

    #[test]
    fn similarity_is_jaccard() {
        assert!((similarity(&[1, 2, 3], &[2, 3, 4]) - 0.5).abs() < 1e-12);
        assert!((similarity(&[1, 2], &[1, 2]) - 1.0).abs() < 1e-12);
        assert!(similarity(&[1], &[]).abs() < 1e-12);
    }

    #[test]
    fn only_ends_and_reopenings_are_outcomes() {
        let session = Uuid::new_v4();
        let mut waiting = Event::new(Uuid::new_v4(), session, EventType::Waiting);
        let mut hop = crate::Hop::new(crate::AgentName::from_static("solver"), "w1", None);
        hop.requires = vec!["solve".into()];
        hop.accepted_at = Some(waiting.at - 40);
        waiting.path = vec![hop];
        let outcome = Outcome::of(&waiting).unwrap();
        assert_eq!(outcome.kind, OutcomeKind::Escalated);
        assert_eq!(outcome.path[0].requires, ["solve"]);
        assert_eq!(outcome.duration_ms, Some(40));
        assert_eq!(Outcome::of(&waiting).unwrap().id, outcome.id);
        let accepted = Event::new(Uuid::new_v4(), session, EventType::Accepted);
        assert!(Outcome::of(&accepted).is_none());
    }
}
