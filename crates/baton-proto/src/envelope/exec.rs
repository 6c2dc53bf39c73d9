use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What an exec agent's program printed on stdout: one JSON object.
///
/// The program reads the envelope as JSON on stdin. It answers with this
/// object and exit code 0; exit code 75 means "failed, try again later" and
/// any other non-zero code "failed for good".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "ExecReply",
    description = "The JSON object an exec agent prints on stdout."
)]
pub struct ExecReply {
    /// What the agent decided. Absent: it gave its answer (`output`) and the
    /// spec's routing decides what comes next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<ExecAction>,
    /// The answer, when the session completes here. A map with an `a2a`
    /// entry answers in A2A's terms through `baton a2a serve`: `artifacts`
    /// (text, file and data parts; `append` and `lastChunk` for chunks),
    /// `message` (the parts of a direct answer, a Message not a Task) or
    /// `reject` (why the task is declined: `TASK_STATE_REJECTED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
    /// `handoff`: the agent type to hand off to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<crate::AgentName>,
    /// `handoff` or `escalate`: capabilities the receiver must have (instead of `to`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
    /// With `requires`: domains of which the receiver must have one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domains: Vec<String>,
    /// With `requires`: lowest acceptable tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_tier: Option<u32>,
    /// Why control moves (`knowledge_gap`, `out_of_scope`, `tool_failure`, ... or free text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Advice for the receiver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggested_next_action: Option<String>,
    /// A message from the agent to append to the conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub say: Option<String>,
    /// A question for the user (with no `action`): the hop waits for the
    /// answer (`input_required`; an A2A task is `TASK_STATE_INPUT_REQUIRED`),
    /// then the program runs again with the question and the answer last in
    /// `context.messages`, every question and answer of the hop in
    /// `context.state.answers` (`[{question, answer}]`, in order), and the
    /// variables that came with the answer (`a2a`). It may ask again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask: Option<String>,
    /// With `ask`: the answer asked for, as a JSON Schema of an object with
    /// flat properties (strings, numbers, integers, booleans, enums: MCP's
    /// elicitation schema). An MCP client that answers elicitations is
    /// asked with it, and the answer is then the client's result as JSON,
    /// `{"action": "accept"|"decline"|"cancel", "content": {...}}`; any
    /// other answer is the person's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<serde_json::Value>,
    /// Messages to append to the conversation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<ExecMessage>,
    /// Shared context variables to set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub variables: BTreeMap<String, serde_json::Value>,
    /// Internal state entries to set for the receiver.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub state: BTreeMap<String, serde_json::Value>,
    /// Reasoning steps to append to the trace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trace: Vec<ExecStep>,
    /// The problem as the agent now understands it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// In a conversation's turn: when the turn ends, the conversation goes
    /// back to its entry (the user's next message starts there).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hand_back: bool,
    /// `fail` and `reject`: what went wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `fail`: whether trying again may help (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    /// `delegate`: the child tasks. The program runs again when they have
    /// answered, with `BATON_RESUME=1` and their results in the envelope's
    /// `context.state.results`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ExecChild>,
    /// `delegate`: `parallel` (default), `serial`, `async` or `chain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// A child task of an exec agent's delegation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecChild {
    /// The agent type to ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<crate::AgentName>,
    /// Or: capabilities of the agent to ask, resolved through the registry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
    /// What the child should do.
    pub input: String,
    /// Extension: in a team, `sync` (the default: the discussion waits for
    /// it) or `async` (the team goes on meanwhile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignment: Option<String>,
}

/// The decision of an exec agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecAction {
    /// Hand off to `to`, or to the best agent for `requires`.
    Handoff,
    /// End the session now with `output`, whatever the routing rules say.
    Terminate,
    /// Escalate to a higher tier (or the fallback).
    Escalate,
    /// Straight to the fallback agent.
    Fallback,
    /// Decline the task; it is routed elsewhere.
    Reject,
    /// The attempt failed (`retryable` says whether to try again).
    Fail,
    /// Hand out `children` and run again when they have answered.
    Delegate,
    /// Extension, in a team: wait for the outstanding asynchronous
    /// assignments, then run again.
    Pause,
}

/// A conversation message from an exec agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecMessage {
    /// `agent` (default), `user`, `system` or `tool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The text.
    pub content: String,
    /// Who wrote it (defaults to the agent type for agent messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A reasoning step from an exec agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecStep {
    /// What it did.
    pub action: String,
    /// What came of it.
    #[serde(default)]
    pub outcome: String,
    /// Why.
    #[serde(default)]
    pub reasoning: String,
    /// Anything else worth keeping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

/// One task sent to a persistent exec program: a line of JSON on its stdin.
///
/// A program started with `exec.mode = "persistent"` runs for the life of
/// its worker. It reads these lines, one per task, and may have several
/// in flight (up to the worker's concurrency); it answers each with an
/// [`ExecResponse`] line carrying the same `id`, in any order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(
    title = "ExecRequest",
    description = "One line on a persistent exec program's stdin: a task."
)]
pub struct ExecRequest {
    /// The request's id, unique for the program's life; the reply repeats it.
    pub id: String,
    /// The envelope, as the per-task mode writes it on stdin.
    #[schemars(with = "serde_json::Value")]
    pub envelope: serde_json::Value,
    /// The delivery attempt, from 1 (`BATON_ATTEMPT` in the per-task mode).
    pub attempt: u32,
    /// Whether the agent runs again after a delegation (`BATON_RESUME`); the
    /// results are in `envelope.context.state.results`.
    #[serde(default)]
    pub resume: bool,
    /// Extension: this worker answers calls from the program while the
    /// task is in flight ([`ExecCall`], proto-schemas/exec-calls.md).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub calls: bool,
    /// Extension, with `calls`: the conversation so far as OpenAI chat
    /// messages, as an LLM agent's model reads it (without a system prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<serde_json::Value>>,
    /// Extension, with `calls`: this worker takes calls the program does
    /// not wait for ([`ExecCall::wait`] `false`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_wait: bool,
}

/// A call from a persistent exec program to its worker, while a task is in
/// flight: a line of JSON on its stdout (proto-schemas/exec-calls.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(
    title = "ExecCall",
    description = "One line on a persistent exec program's stdout: a call to the worker for the task `task`."
)]
pub struct ExecCall {
    /// The call's id, chosen by the program, unique among its calls in flight.
    pub call: String,
    /// The id of the request (the task) the call belongs to.
    pub task: String,
    /// Extension, for a worker whose request says `no_wait`: `false` on a
    /// `step_done` when the program does not wait for its result. The
    /// worker then writes a result line only for an `error` or an `end`,
    /// makes the task's later calls after this one, and takes the task's
    /// answer only once this call is made.
    #[serde(default = "waits", skip_serializing_if = "waited")]
    pub wait: bool,
    /// What is asked, with its fields.
    #[serde(flatten)]
    pub op: ExecOp,
}

/// A call is waited for unless it says otherwise.
fn waits() -> bool {
    true
}

/// Whether a call's `wait` is the default, which is not written.
#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes a reference
fn waited(wait: &bool) -> bool {
    *wait
}

/// What a call asks of the worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ExecOp {
    /// The spec's MCP tools, in OpenAI's `tools` format.
    Tools,
    /// A call of the spec's `[llm]` model.
    Model {
        /// The chat messages, as OpenAI's API reads them.
        messages: Vec<serde_json::Value>,
        /// The tools offered, in OpenAI's format.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tools: Option<Vec<serde_json::Value>>,
        /// Other request fields: `temperature`, `max_tokens`, `tool_choice`, ...
        #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
        params: serde_json::Map<String, serde_json::Value>,
    },
    /// A call of one of the spec's MCP tools.
    Tool {
        /// The tool, as `tools` names it.
        name: String,
        /// Its arguments: a JSON object.
        #[serde(default)]
        arguments: serde_json::Value,
    },
    /// A step the program runs itself, journaled.
    Step {
        /// The step's name, which the journal keys it by.
        name: String,
        /// Whether a start that left no result may be run again.
        #[serde(default)]
        idempotent: bool,
    },
    /// A step's end: its value, or the error it raised.
    StepDone {
        /// The step's name.
        name: String,
        /// The step's key, as `step` gave it: which of the steps of that
        /// name running at once this is (without it, the oldest).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        /// Its value.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<serde_json::Value>,
        /// What it raised: nothing is kept, and it runs again next time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A question for the user.
    Ask {
        /// The question.
        question: String,
        /// The answer asked for, as a JSON Schema (see [`ExecReply::schema`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schema: Option<serde_json::Value>,
    },
    /// Child tasks whose results the program waits for.
    Delegate {
        /// The children, as an exec reply's.
        children: Vec<ExecChild>,
        /// `parallel` (default), `serial` or `chain`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<String>,
    },
    /// A message to add to the conversation.
    Say {
        /// The text.
        text: String,
    },
}

/// The worker's answer to an [`ExecCall`]: a line of JSON on the program's stdin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(
    title = "ExecCallResult",
    description = "One line on a persistent exec program's stdin: the answer to the call with the same `call` id."
)]
pub struct ExecCallResult {
    /// The id of the call it answers.
    pub call: String,
    /// The call's result (its shape depends on the op).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// The call failed, and the task goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ExecCallError>,
    /// The hop ends here: `waiting` or `failed`. The program stops the
    /// task's handler and sends no answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
    /// With `end: failed`, why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ExecCallError {
    /// `refused` (the spec does not allow it) or `failed` (it could not be made).
    pub kind: String,
    /// What went wrong, naming the fix.
    pub message: String,
}

/// One answer of a persistent exec program: a line of JSON on its stdout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "ExecResponse",
    description = "One line on a persistent exec program's stdout: the answer to the request with the same id."
)]
pub struct ExecResponse {
    /// The id of the request it answers.
    pub id: String,
    /// The decision, as a per-task program prints it. A failure is
    /// `{"action": "fail", "error": "...", "retryable": true|false}`.
    pub reply: ExecReply,
}
