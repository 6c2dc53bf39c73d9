//! Delegation: an agent hands out child tasks and waits for their results
//! without holding a worker, then continues with them.

use baton_proto::{ResultStatus, Value};
use serde::{Deserialize, Serialize};

use baton_proto::AgentName;

use crate::policy::ContextPolicy;
use crate::target::Target;

/// How a delegating agent waits for its children.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DelegateMode {
    /// One child after another; each sees the results before it
    /// (`state.results` of its envelope).
    Serial,
    /// All children at once; the parent continues when every one answered.
    Parallel,
    /// All children at once; the parent's continuation runs as each result
    /// arrives, and ends the join by returning anything but [`crate::Outcome::wait`].
    Async,
    /// A sequential chain: each child's output is the next one's input; a
    /// failure stops the chain unless `recover` says what to do instead.
    Chain {
        /// On a failure: run this agent on the error, or use this value as the step's output.
        recover: Option<Recover>,
    },
}

/// What a chain does when a step fails.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recover {
    /// Run this agent type on the failure; its output stands in for the step's.
    Agent(#[serde(deserialize_with = "AgentName::deserialize_checked")] AgentName),
    /// Use this value as the failed step's output and go on.
    #[serde(with = "value_as_json")]
    Value(Value),
}

mod value_as_json {
    use baton_proto::Value;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(
        value: &Value,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        value.serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Value, D::Error> {
        Value::deserialize(deserializer)
    }
}

/// One child task.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildTask {
    /// Who does it: an agent type or a capability set.
    pub target: Target,
    /// What to do: becomes the child's `problem` and a message in its conversation.
    pub input: String,
    /// How much of the parent's conversation the child gets.
    pub context: ContextPolicy,
    /// An opaque label that comes back with the result (an LLM's tool call id).
    pub tag: Option<String>,
    /// A team's asynchronous assignment: its worker confirms receipt (set
    /// by [`crate::Team`] for a child tagged `async`).
    #[doc(hidden)]
    pub asynchronous: bool,
}

impl ChildTask {
    /// A child task for `target`: an [`AgentName`], a [`crate::Need`] or a [`Target`].
    #[must_use]
    pub fn new(target: impl Into<Target>, input: impl Into<String>) -> Self {
        Self {
            target: target.into(),
            input: input.into(),
            context: ContextPolicy::Full,
            tag: None,
            asynchronous: false,
        }
    }

    /// Sets how much of the conversation the child gets.
    #[must_use]
    pub fn context_policy(mut self, policy: ContextPolicy) -> Self {
        self.context = policy;
        self
    }

    /// Sets the tag that comes back with the result.
    #[must_use]
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tag = Some(tag.into());
        self
    }
}

/// A child's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildResult {
    /// Which child, counting from 0 in the order they were listed.
    pub index: u32,
    /// The agent type that answered last in the child's branch.
    pub agent: Option<String>,
    /// The child's tag.
    pub tag: Option<String>,
    /// `completed` or `failed`.
    #[serde(with = "status_text")]
    pub status: ResultStatus,
    /// The output (on failure, the reason text).
    pub output: Value,
    /// Why it failed.
    pub detail: Option<String>,
}

mod status_text {
    use baton_proto::ResultStatus;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(status: &ResultStatus, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(status.as_str())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ResultStatus, D::Error> {
        Ok(ResultStatus::parse(&String::deserialize(d)?))
    }
}

impl ChildResult {
    /// Whether the child completed.
    #[must_use]
    pub fn completed(&self) -> bool {
        self.status == ResultStatus::Completed
    }
}

/// The results a continuation gets.
#[derive(Debug, Clone, PartialEq)]
pub struct Results {
    /// The mode the children ran in.
    pub mode: DelegateMode,
    /// The results that arrived, in child order; failed ones are marked as failed.
    pub results: Vec<ChildResult>,
    /// How many children there were.
    pub total: usize,
    /// In async mode, the result that triggered this call.
    pub latest: Option<u32>,
}

impl Results {
    /// Whether every child has answered.
    #[must_use]
    pub fn all_in(&self) -> bool {
        self.results.len() >= self.total
    }

    /// The outputs as one value: a list in child order, failed ones as
    /// `{"failed": detail}` maps.
    #[must_use]
    pub fn outputs(&self) -> Value {
        Value::Array(
            self.results
                .iter()
                .map(|result| {
                    if result.completed() {
                        result.output.clone()
                    } else {
                        Value::Map(vec![(
                            Value::from("failed"),
                            Value::from(result.detail.clone().unwrap_or_default()),
                        )])
                    }
                })
                .collect(),
        )
    }
}

/// A child's position as the protocol writes it (`parent.index`, `ChildResult::index`).
#[doc(hidden)]
pub fn slot_index(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// A value as text (a step's input, a result in a conversation): strings
/// as they are, anything else as JSON.
#[doc(hidden)]
pub fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.as_str().unwrap_or_default().to_owned(),
        other => other.to_string(),
    }
}
