use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::uuid_text;
use crate::{Hop, Map, PROTOCOL_VERSION, Reason, Value, now_ms};

wire_enum! {
    /// What happened in a session.
    pub enum EventType {
        /// A worker took the envelope.
        Accepted = "accepted",
        /// The worker declined it.
        Rejected = "rejected",
        /// Control moved `agent` → `to`.
        Handoff = "handoff",
        /// A parent delegated to a child.
        Delegated = "delegated",
        /// A retryable failure; the envelope will be delivered again.
        Retrying = "retrying",
        /// The loop guard refused a route.
        LoopDetected = "loop_detected",
        /// The session went to the fallback agent.
        Escalated = "escalated",
        /// An envelope was copied to the dead-letter stream.
        DeadLettered = "dead_lettered",
        /// Terminal: `output` holds the answer, `path` the agents visited.
        Completed = "completed",
        /// Terminal: `reason` says why.
        Failed = "failed",
        /// Extension: the session waits for a person (a human agent's inbox).
        Waiting = "waiting",
        /// Extension: a delegated child's result reached its parent (`detail`
        /// says whether it was recorded or dropped, and why).
        Result = "result",
        /// Extension: a dead letter of the session was replayed; the session
        /// runs again, and a later terminal event supersedes an earlier one.
        Reopened = "reopened",
        /// Extension: an LLM agent called a tool within its hop (`output`:
        /// `tool`, `call`, `outcome`, `duration_ms`).
        ToolCalled = "tool_called",
        /// Extension: a piece of an answer a model is writing, live only
        /// (never stored), for a session that asked for it (`stream` in the
        /// envelope); `output`: `step`, `offset`, `text`.
        Delta = "delta",
        /// Extension: a replayable session's first hop took its task
        /// (`context`: the context it started with; `output`: the rest of
        /// the task, see `Start`).
        Started = "started",
        /// Extension: an LLM agent's tool call waits in the inbox for a
        /// person's approval (`output`: `tool`, `arguments`, `entry`).
        ToolApprovalRequested = "tool_approval_requested",
        /// Extension: a person approved a waiting tool call.
        ToolApproved = "tool_approved",
        /// Extension: a person denied a waiting tool call (`detail`: their note).
        ToolDenied = "tool_denied",
    }
}

impl EventType {
    /// Whether this event ends its session.
    #[must_use]
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::Completed | Self::Failed)
    }
}

/// A lifecycle event, published to `baton.events.<session>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(
    title = "Event",
    description = "Published to `baton.events.<session>`."
)]
pub struct Event {
    /// Protocol major version: `1`, or `2` for an event that uses `refs`
    /// or `path_from` (which a reader of version 1 would misread).
    pub v: u64,
    /// Unique id of this event; equals the `Nats-Msg-Id` header.
    #[serde(with = "uuid_text")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub id: Uuid,
    /// The session it belongs to.
    #[serde(with = "uuid_text")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub session: Uuid,
    /// When, unix ms.
    pub at: u64,
    /// What happened.
    #[serde(rename = "type")]
    pub kind: EventType,
    /// Agent type that reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<crate::AgentName>,
    /// Worker instance that reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Extension: the version of the agent type that reports it, when its
    /// worker names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<crate::Version>,
    /// Id of the envelope it is about.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "uuid_text::option"
    )]
    #[schemars(with = "Option<String>", extend("format" = "uuid"))]
    pub envelope: Option<Uuid>,
    /// Where control went (`handoff`, `escalated`, `loop_detected`, `delegated`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<crate::AgentName>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// Human-readable detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// `completed`: the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub output: Option<Value>,
    /// Extension (optional): on a terminal event, what the session spent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::Usage>,
    /// The agents visited so far (from the `path_from`th, when it is set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path: Vec<Hop>,
    /// Extension (optional, opt-in): `path` holds only the hops after the
    /// first `path_from`, which the session's earlier events carry
    /// ([`Event::keep_new_hops`], [`Event::follow_path`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_from: Option<u32>,
    /// Extension (optional): the delivery attempt the event belongs to, counting from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// Extension (optional): parts kept in the claim-check store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<crate::Claim>,
    /// Extension (optional): parts left empty because this event holds
    /// them elsewhere ([`Event::refer`]); decoding puts them back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refs: Vec<crate::Ref>,
    /// Extension (optional): the hop's `accepted` event, folded into this
    /// one instead of stored on its own. A reader restores it just before
    /// this event ([`Event::unfold`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<Folded>,
    /// Extension (optional, version 2): the hop's `started` event, folded
    /// into this one ([`Event::fold_start`]). A reader restores it after
    /// the folded `accepted` event and before this one ([`Event::unfold`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<crate::FoldedStart>,
    /// Extension (optional): the `tool_called` events of the steps a
    /// program ran early in the hop (`ctx.step`), folded into this one
    /// instead of stored each on its own. A reader restores them, in
    /// order, after the folded `accepted` and `started` events and before
    /// this one ([`Event::unfold`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<crate::FoldedStep>,
    /// Extension (optional): on a session's terminal event, the context it
    /// ended with (conversation, variables, trace, state), so a reader can
    /// show what led to the outcome after the envelope is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Box<crate::Context>>,
    /// Extension (optional): on the terminal event of a conversation's
    /// turn, the turn (the envelope's `conversation`), which says whether
    /// it hands the conversation back to its entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<crate::conversation_ref::TurnOf>,
    /// Extension: on a terminal event, the versions the session was pinned
    /// to, by agent type (the envelope's `versions`), so a conversation's
    /// next turn keeps them.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub versions: std::collections::BTreeMap<crate::AgentName, crate::Version>,
    /// Extension: on an event of a replayed session, the session it
    /// replays (the envelope's `replay.of`): its outcome is not a live one,
    /// and gated rollouts and the registry leave it out.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "uuid_text::option"
    )]
    #[schemars(with = "Option<String>", extend("format" = "uuid"))]
    pub replay_of: Option<Uuid>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// An `accepted` event folded into the next event of its hop: what that
/// event does not already say. The restored event takes `session`, `agent`,
/// `instance`, `version` and `envelope` from the event that carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Folded {
    /// Id of the `accepted` event.
    #[serde(with = "uuid_text")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub id: Uuid,
    /// When the worker took the envelope, unix ms.
    pub at: u64,
    /// The delivery attempt, counting from 1.
    pub attempt: u32,
    /// Why control came to the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

impl Event {
    /// An event of `kind` in `session` with id `id`, now; other fields empty.
    #[must_use]
    pub fn new(id: Uuid, session: Uuid, kind: EventType) -> Self {
        Self {
            v: PROTOCOL_VERSION,
            id,
            session,
            at: now_ms(),
            kind,
            agent: None,
            instance: None,
            version: None,
            envelope: None,
            to: None,
            reason: None,
            detail: None,
            output: None,
            usage: None,
            path: Vec::new(),
            path_from: None,
            attempt: None,
            claims: Vec::new(),
            refs: Vec::new(),
            accepted: None,
            started: None,
            steps: Vec::new(),
            context: None,
            conversation: None,
            versions: std::collections::BTreeMap::new(),
            replay_of: None,
            extra: Map::new(),
        }
    }

    /// Folds `accepted`, an `accepted` event of the same hop, into this
    /// event: one stored message instead of two, nothing lost.
    pub fn fold(&mut self, accepted: &Event) {
        self.accepted = Some(Folded {
            id: accepted.id,
            at: accepted.at,
            attempt: accepted.attempt.unwrap_or(1),
            reason: accepted.reason.clone(),
            extra: Map::new(),
        });
    }
}
