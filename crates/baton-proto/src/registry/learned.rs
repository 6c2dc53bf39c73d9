//! What the registry learned from outcomes, as it answers it (an optional
//! extension): why a candidate ranks where it does, an agent type's
//! notebook, and the feedback and notebook requests.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{Map, uuid_text};

/// How a candidate's score came about (`why` on a lookup's candidate).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Why {
    /// Capability and domain fit, 0 to 1.
    pub fit: f64,
    /// Tier fit, 0 to 1 (1 for the lowest tier that qualifies).
    pub tier: f64,
    /// Free capacity, 0 to 1 (1 when idle).
    pub free: f64,
    /// The success ratio of its hops, 0 to 1.
    pub success: f64,
    /// The score from the four above, before anything learned.
    pub base: f64,
    /// What outcomes taught about this agent type for this kind of work;
    /// absent when learning is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned: Option<Learned>,
    /// Past sessions most like this task that this agent type was part of.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub similar: Vec<Similar>,
    /// What the `prefer` agent's notebook says of this agent type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notebook: Option<Collaborator>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// The learned estimate of how well an agent type resolves a kind of work.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Learned {
    /// The kind of work: its capabilities, then `@` and its domains when it
    /// has any (`solve`, `refunds,orders@billing`).
    pub key: String,
    /// Outcomes it has seen of this agent type for this kind of work (the
    /// most recent ones only: see the registry's `--learning-window`).
    pub observations: u32,
    /// The estimated share of sessions it resolves, 0 to 1.
    pub mean: f64,
    /// The estimate's standard deviation: large while little is known.
    pub sd: f64,
    /// What similar past tasks added, as a number of sessions.
    pub votes: f64,
    /// The draw from the estimate this lookup used (Thompson sampling).
    pub sample: f64,
}

/// A past session like the task at hand.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Similar {
    /// The session.
    #[serde(with = "uuid_text")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub session: Uuid,
    /// How alike the two questions are, 0 to 1.
    pub similarity: f64,
    /// How much its vote counts: its similarity, halved for every
    /// learning window of newer sessions of the same work.
    pub weight: f64,
    /// How well it went, 0 to 1.
    pub reward: f64,
}

/// One collaborator in an agent type's notebook: the sessions they had
/// together and how those went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Collaborator {
    /// The other agent type.
    pub agent: crate::AgentName,
    /// Sessions both were part of.
    pub sessions: u64,
    /// Of those, the ones that completed (and were not escalated or reopened).
    pub resolved: u64,
    /// The ones that went to a person.
    pub escalated: u64,
    /// The ones that failed.
    pub failed: u64,
    /// The ones opened again after they ended.
    pub reopened: u64,
    /// The mean reward of those sessions, 0 to 1.
    pub reward: f64,
    /// The mean time those sessions took, in ms.
    pub mean_duration_ms: u64,
    /// What those sessions spent in all, in millionths of the price unit.
    pub cost_micros: u64,
    /// Sessions someone gave feedback on.
    pub feedback: u64,
    /// The mean feedback score, when there was any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback_score: Option<f64>,
    /// When they last worked together, unix ms.
    pub last_at: u64,
}

/// An agent type's notebook: its collaborators, best first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Notebook {
    /// The agent type.
    pub agent: crate::AgentName,
    /// Sessions it was part of.
    pub sessions: u64,
    /// Its collaborators, by mean reward, then sessions together.
    #[serde(default)]
    pub collaborators: Vec<Collaborator>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// A request for an agent type's notebook, on `baton.registry.notebook`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NotebookRequest {
    /// The agent type.
    pub agent: crate::AgentName,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// Feedback on a session, on `baton.registry.feedback`. The registry
/// checks it and stores it as a `feedback` outcome.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FeedbackRequest {
    /// The session.
    pub session: String,
    /// How well it went, 0 (not at all) to 1 (fully).
    pub score: f64,
    /// What the person would like to say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// The registry's answer to feedback that it stored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FeedbackReply {
    /// The stored record's id.
    pub id: String,
    /// The agents of the session it is credited to.
    #[serde(default)]
    pub credited: Vec<crate::AgentName>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}
