use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::hop::Hop;
pub use crate::reason::Reason;
use crate::uuid_text;
pub use crate::value::{Map, Value};
use crate::{PROTOCOL_VERSION, now_ms};

pub(crate) mod exec;
mod expanded;
mod forward;
pub(crate) mod gate;
pub(crate) mod hop;
mod presence;
pub(crate) mod reason;
pub(crate) mod replay;
pub(crate) mod start;
mod step;
pub(crate) mod usage;
pub use expanded::Expanded;
pub use forward::{Head, Rewrite};
use presence::Absent;
pub use step::Step;

/// The hop budget of a session whose envelope does not set `max_hops`.
pub const DEFAULT_MAX_HOPS: u32 = 16;

wire_enum! {
    /// What an envelope is for.
    pub enum Kind {
        /// A new task from outside.
        Task = "task",
        /// Control moved from one agent to another.
        Handoff = "handoff",
        /// A parent asks a child for a result.
        Delegate = "delegate",
        /// A child's answer to a `delegate`.
        Result = "result",
    }
}

wire_enum! {
    /// Who wrote a conversation message.
    pub enum Role {
        /// The person the system serves.
        User = "user",
        /// An agent.
        Agent = "agent",
        /// System instructions.
        System = "system",
        /// A tool's answer.
        Tool = "tool",
    }
}

wire_enum! {
    /// How a delegated child ended (`result` envelopes only).
    pub enum ResultStatus {
        /// The child produced an output.
        Completed = "completed",
        /// The child failed.
        Failed = "failed",
        /// Extension: not an end, a note from a team member that took an
        /// asynchronous assignment (`output`: what it says); the join adds
        /// it to the group conversation.
        Progress = "progress",
    }
}

/// The unit of work that moves between agents: a task, a handoff, a delegation or a result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(
    title = "Envelope",
    description = "Published to `baton.ingress` or `baton.agent.<agent>`."
)]
pub struct Envelope {
    /// Protocol major version: `1`.
    pub v: u64,
    /// Unique id of this message; equals the `Nats-Msg-Id` header.
    #[serde(with = "uuid_text")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub id: Uuid,
    /// Id shared by every hop of one task.
    #[serde(with = "uuid_text")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub session: Uuid,
    /// `task`, `handoff`, `delegate` or `result`.
    pub kind: Kind,
    /// Target agent type; nil on ingress means "route by `requires`, else the default entry agent".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<crate::AgentName>,
    /// Agent type that sent it; nil for tasks from outside.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<crate::AgentName>,
    /// Capabilities the receiving agent must have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
    /// Extension (optional): knowledge domains the route asked for, of
    /// which the receiving agent has at least one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domains: Vec<String>,
    /// Why control moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// Advice from the sender to the receiver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggested_next_action: Option<String>,
    /// Agents that handled this session so far, oldest first.
    pub path: Vec<Hop>,
    /// Hop budget for the session (default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_hops: Option<u32>,
    /// Creation time, unix ms.
    pub created_at: u64,
    /// Unix ms after which the session fails with `deadline_exceeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<u64>,
    /// `delegate`: subject the `result` goes to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    /// `delegate`/`result`: the delegating envelope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<Parent>,
    /// `result` only: `completed` or `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ResultStatus>,
    /// `result` only: the child's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub output: Option<Value>,
    /// The full context that travels with the task.
    pub context: Context,
    /// Extension (optional): parts kept in the claim-check store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<crate::Claim>,
    /// Extension (optional): the most the session may spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::Budget>,
    /// Extension (optional): what the session spent before this envelope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::Usage>,
    /// Extension (optional): the sender follows the session live and asks
    /// for the answers as they are written (`delta` events on
    /// `baton.live.<session>`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// Extension (optional): the session may be replayed, so its first hop
    /// stores a `started` event with the task as it arrived.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayable: bool,
    /// Extension (optional): the session replays another, reusing what that
    /// one recorded in the hop journal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<crate::Replay>,
    /// Extension (optional): on an envelope parked in the inbox by an LLM
    /// agent's hop, the tool call that waits for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<crate::Gate>,
    /// Extension (optional): the envelope went back to its agent after a
    /// person's decision on a waiting tool call; its hop continues the
    /// journal named here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed: Option<crate::Resumed>,
    /// Extension (optional): the envelope belongs to a turn of a
    /// conversation. Absent: a one-shot task, as always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<crate::conversation_ref::TurnOf>,
    /// Extension (optional): the version of each versioned agent type the
    /// session was pinned to when it first reached it, by agent type. Every
    /// later visit goes to that version's subject.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub versions: std::collections::BTreeMap<crate::AgentName, crate::Version>,
    /// Fields this version does not know; written back unchanged.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// The delegating envelope of a `delegate` or `result`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Parent {
    /// Id of the delegating envelope.
    #[serde(with = "uuid_text")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub id: Uuid,
    /// Agent type that delegated.
    pub agent: crate::AgentName,
    /// Delegation depth of the child (1 for a direct child).
    pub depth: u32,
    /// Extension: which of the delegating envelope's children this is,
    /// counting from 0; absent on a join's deadline timer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// Extension: `async` when the child is a team member's asynchronous
    /// assignment: its worker confirms receipt with a `progress` result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignment: Option<String>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// The full context that travels with a task from agent to agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Context {
    /// What the user first asked.
    #[serde(default)]
    pub initial_query: String,
    /// The current problem as the last agent understood it.
    #[serde(default)]
    pub problem: String,
    /// The whole conversation.
    #[serde(default)]
    pub messages: Vec<Message>,
    /// Shared context variables every agent may read and write.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub variables: Map,
    /// Reasoning trace.
    #[serde(default)]
    pub trace: Vec<Step>,
    /// Internal state the sender hands to the receiver.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub state: Map,
    /// User id, locale, priority and other extensions.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub metadata: Map,
    /// Extension (optional), on a conversation's turn: the conversation's
    /// messages before `messages` are its transcript's first entries, as
    /// referred to here. Absent: `messages` is the whole conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<crate::conversation_ref::History>,
    /// In a worker's memory only: the first messages came from a
    /// `history`, which publishing refers to again (see
    /// [`Context::collapse`]).
    #[serde(skip)]
    #[schemars(skip)]
    pub expanded: Option<Expanded>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// One message of the conversation.
///
/// Encoding writes back what a decoded message held: a defaulted field
/// (`content`, `at`) that the sender left out is not added, so a context
/// never grows on its way through the workers.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
pub struct Message {
    /// `user`, `agent`, `system` or `tool`.
    pub role: Role,
    /// The text.
    #[serde(default)]
    pub content: String,
    /// Who wrote it (an agent type, a tool name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// When, unix ms.
    #[serde(default)]
    pub at: u64,
    /// Tool calls the message made, as the model wrote them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub tool_calls: Option<Value>,
    /// The tool call this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Extension (optional): in a team's conversation, what kind of
    /// coordination message this is (`team_up`, `discussion`,
    /// `assign_sync`, `assign_async`, `progress`, `result`, `pause`,
    /// `conclude`); its speaker is `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordination: Option<String>,
    /// Extension (optional): the message stands for older messages of its
    /// conversation, summarised in its `content` or dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<crate::conversation_ref::Compaction>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
    /// The defaulted fields the sender left out.
    #[schemars(skip)]
    absent: Absent,
}

impl Envelope {
    /// A new `task` with a fresh id and session, whose conversation is the user's `query`.
    #[must_use]
    pub fn task(query: impl Into<String>) -> Self {
        let query = query.into();
        let now = now_ms();
        Self {
            v: PROTOCOL_VERSION,
            id: Uuid::new_v4(),
            session: Uuid::new_v4(),
            kind: Kind::Task,
            to: None,
            from: None,
            requires: Vec::new(),
            domains: Vec::new(),
            reason: None,
            suggested_next_action: None,
            path: Vec::new(),
            max_hops: None,
            created_at: now,
            deadline: None,
            reply_to: None,
            parent: None,
            status: None,
            output: None,
            context: Context {
                initial_query: query.clone(),
                messages: vec![Message::new(Role::User, query)],
                ..Context::default()
            },
            claims: Vec::new(),
            budget: None,
            usage: None,
            stream: false,
            replayable: false,
            replay: None,
            gate: None,
            resumed: None,
            conversation: None,
            versions: std::collections::BTreeMap::new(),
            extra: Map::new(),
        }
    }

    /// This envelope sent on as a new message: under `id`, of `kind`, to
    /// agent type `to`, stamped now, at this protocol version. Context,
    /// path, session, deadline and parent carry over; the caller sets the
    /// reason and whatever else the new message changes.
    #[must_use]
    pub fn resent(mut self, id: Uuid, kind: Kind, to: crate::AgentName) -> Self {
        self.v = PROTOCOL_VERSION;
        self.id = id;
        self.kind = kind;
        self.to = Some(to);
        self.created_at = now_ms();
        // A waiting call and a resumed journal belong to one hop.
        self.gate = None;
        self.resumed = None;
        self
    }

    /// Sets the target agent type.
    #[must_use]
    pub fn with_to(mut self, agent: crate::AgentName) -> Self {
        self.to = Some(agent);
        self
    }

    /// Sets a shared context variable.
    #[must_use]
    pub fn with_variable(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.context.variables.insert(key.into(), value.into());
        self
    }

    /// Whether this envelope is a session's own first task: a root `task`,
    /// not a resumed hop (sent back after a person's decision) and not a
    /// conversation's turn.
    #[must_use]
    pub fn opens_session(&self) -> bool {
        self.kind == Kind::Task
            && self.parent.is_none()
            && self.resumed.is_none()
            && self.conversation.is_none()
    }

    /// Why this envelope's deadline is refused at `now` (unix ms): it lies
    /// more than [`crate::MAX_DEADLINE_AHEAD_MS`] ahead. `None` without a
    /// deadline, or with one in range or passed.
    #[must_use]
    pub fn deadline_out_of_range(&self, now: u64) -> Option<String> {
        self.deadline
            .and_then(|deadline| crate::deadline_out_of_range(deadline, now))
    }

    /// Sets the deadline, unix ms.
    #[must_use]
    pub fn with_deadline(mut self, deadline_ms: u64) -> Self {
        self.deadline = Some(deadline_ms);
        self
    }

    /// Sets the hop budget.
    #[must_use]
    pub fn with_max_hops(mut self, max_hops: u32) -> Self {
        self.max_hops = Some(max_hops);
        self
    }

    /// The hop budget in force: `max_hops`, or [`DEFAULT_MAX_HOPS`].
    #[must_use]
    pub fn hop_budget(&self) -> u32 {
        self.max_hops.unwrap_or(DEFAULT_MAX_HOPS)
    }

    /// Whether `agent` already handled this session.
    #[must_use]
    pub fn visited(&self, agent: &str) -> bool {
        self.path.iter().any(|hop| hop.agent == agent)
    }
}
impl Message {
    /// A message with `role` and `content`, now.
    #[must_use]
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            name: None,
            at: now_ms(),
            tool_calls: None,
            tool_call_id: None,
            coordination: None,
            compaction: None,
            extra: Map::new(),
            absent: Absent::NONE,
        }
    }

    /// Sets who wrote it.
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

fn nil() -> Value {
    Value::Nil
}
