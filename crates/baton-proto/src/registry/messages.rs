use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Map;

/// A worker instance's periodic report, on `baton.registry.heartbeat.<agent>.<instance>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Heartbeat {
    /// Agent type.
    pub agent: crate::AgentName,
    /// Worker instance id.
    pub instance: String,
    /// What the agent can do.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Knowledge domains.
    #[serde(default)]
    pub domains: Vec<String>,
    /// Tier: 1 is the first line; higher tiers take harder work.
    #[serde(default)]
    pub tier: u32,
    /// Messages being handled now.
    #[serde(default)]
    pub in_flight: u32,
    /// Concurrency limit of the instance.
    #[serde(default)]
    pub max_concurrency: u32,
    /// Messages handled since start.
    #[serde(default)]
    pub processed: u64,
    /// Messages that failed since start.
    #[serde(default)]
    pub failed: u64,
    /// When, unix ms.
    pub at: u64,
    /// Extension: how often this instance sends heartbeats, in ms. The registry
    /// drops the instance after three intervals without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
    /// Extension: what the agent type does, in a sentence (a spec's
    /// `description`); gateways show it as a skill or tool description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Extension: the JSON Schema (as JSON text) of the arguments the agent
    /// type takes as an MCP tool (a spec's `tool_schema`); absent for the
    /// gateway's own (`question`, `variables`, budgets, `conversation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_schema: Option<String>,
    /// Extension: the version of the agent type this instance runs (a
    /// spec's `version`, `baton worker --version`, or a short hash of the
    /// spec file). Absent for a worker that names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<crate::Version>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// A best-agent lookup, on `baton.registry.lookup`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LookupRequest {
    /// Capabilities the agent must have.
    #[serde(default)]
    pub requires: Vec<String>,
    /// Domains of which the agent must have at least one (when any are given).
    #[serde(default)]
    pub domains: Vec<String>,
    /// Lowest acceptable tier.
    #[serde(default)]
    pub min_tier: Option<u32>,
    /// Agent types to leave out: the session's path.
    #[serde(default)]
    pub exclude: Vec<crate::AgentName>,
    /// Extension: the task's text, so that similar past tasks can vote for
    /// the agents that resolved them (the registry hashes it, see `features`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Extension: the task's hashed n-grams (`features`), instead of its text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<u32>,
    /// Extension: an agent type whose notebook counts: its past
    /// collaborators rank higher, the more so the better it went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefer: Option<String>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// The answer to a [`LookupRequest`]: candidates, best first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LookupResponse {
    /// Candidates, best first; empty when nothing fits.
    #[serde(default)]
    pub candidates: Vec<Candidate>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// One agent type that fits a lookup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Candidate {
    /// Agent type.
    pub agent: crate::AgentName,
    /// Tier.
    pub tier: u32,
    /// Capabilities.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Domains.
    #[serde(default)]
    pub domains: Vec<String>,
    /// Live instances.
    pub instances: u32,
    /// Load, 0 idle; 1 at capacity; above 1 with a backlog.
    pub load: f64,
    /// Ranking score; higher is better.
    pub score: f64,
    /// Extension: messages in flight across the live instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<u64>,
    /// Extension: summed concurrency limit of the live instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    /// Extension: messages waiting in the agent type's consumer (pending plus ack-pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog: Option<u64>,
    /// Extension: share of handled messages that did not fail, 0 to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_ratio: Option<f64>,
    /// Extension: what the agent type does (the newest heartbeat's `description`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Extension: the JSON Schema (as JSON text) of the arguments the agent
    /// type takes as an MCP tool (the newest heartbeat's `tool_schema`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_schema: Option<String>,
    /// Extension: the versions its live instances run, each with how many
    /// instances run it, by version; empty when none names a version.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub versions: std::collections::BTreeMap<crate::Version, u32>,
    /// Extension: how the score came about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<crate::Why>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}
