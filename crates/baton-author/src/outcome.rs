//! What an agent decided, and why it could not decide.
//!
//! Each kind of [`Outcome`] has its own builder type, so an option that makes
//! no sense for it (a visit budget on a completion, a recovery on a parallel
//! delegation) cannot be set: the method does not exist. Every builder turns
//! into an [`Outcome`] with `.into()`.

use std::fmt::Display;
use std::time::Duration;

use baton_proto::{AgentName, Message, Reason, Role, Step, Value};

use crate::delegate::{ChildTask, DelegateMode, Recover};
use crate::policy::{ContextPolicy, RouteOptions};
use crate::target::{Need, Target};
pub use crate::update::{Compacted, ContextUpdate};

/// What an agent decided.
///
/// # Examples
///
/// ```
/// use baton_author::{AgentName, Outcome, Reason};
///
/// # fn main() -> Result<(), baton_author::AgentError> {
/// let done: Outcome = Outcome::complete("Your order ships today.").into();
/// let refunds = AgentName::new("refund")?;
/// let passed: Outcome = Outcome::handoff(refunds, Reason::KnowledgeGap)
///     .say("Passing you to refunds.")
///     .next_action("check the refund window")
///     .into();
/// # let _ = (done, passed);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Outcome {
    /// The session ends here with an answer, whatever the routing rules say.
    Complete(Complete),
    /// The agent's part is done; the routing rules choose what comes next
    /// (context conditions, LLM conditions, after-work) and complete the
    /// session with the answer when none applies.
    Answer(Answer),
    /// Control moves to another agent.
    Handoff(Handoff),
    /// Child tasks go out and the agent waits for their results without
    /// holding a worker; [`crate::Agent::resume`] continues with them.
    Delegate(Delegation),
    /// The task now waits outside the runtime, in a person's inbox: the
    /// delivery is acked with a `waiting` event and the session stays open.
    Wait(Wait),
}

impl Outcome {
    /// Completes the session with `output`.
    #[must_use]
    pub fn complete(output: impl Into<Value>) -> Complete {
        Complete {
            output: output.into(),
            update: ContextUpdate::default(),
        }
    }

    /// Answers with `output` and leaves the next step to the routing rules.
    #[must_use]
    pub fn answer(output: impl Into<Value>) -> Answer {
        Answer {
            output: output.into(),
            update: ContextUpdate::default(),
            judged: None,
        }
    }

    /// Hands off to `target` (an [`AgentName`], a [`Need`] or a [`Target`]) for `reason`.
    #[must_use]
    pub fn handoff(target: impl Into<Target>, reason: Reason) -> Handoff {
        Handoff {
            target: target.into(),
            reason,
            suggested_next_action: None,
            update: ContextUpdate::default(),
            options: RouteOptions::default(),
        }
    }

    /// Escalates to a higher tier for `reason`: the registry's best agent of at
    /// least this agent's tier + 1, else the fallback agent.
    #[must_use]
    pub fn escalate(reason: Reason) -> Handoff {
        Self::escalate_to(Need::default(), reason)
    }

    /// Escalates to a higher-tier agent that also meets `need`, else the fallback agent.
    #[must_use]
    pub fn escalate_to(need: Need, reason: Reason) -> Handoff {
        Self::handoff(Target::Escalate(need), reason)
    }

    /// Hands straight to the fallback agent (a person, usually) for `reason`.
    #[must_use]
    pub fn fallback(reason: Reason) -> Handoff {
        Self::handoff(Target::Fallback, reason)
    }

    /// Delegates `children` in `mode` (see [`Outcome::Delegate`]).
    #[must_use]
    pub fn delegate(children: Vec<ChildTask>, mode: DelegateMode) -> Delegation {
        Delegation {
            children,
            mode,
            update: ContextUpdate::default(),
        }
    }

    /// A sequential chain through `agents`: `input` goes to the first, each
    /// output to the next; the first failure stops it unless
    /// [`Chain::recover`] says otherwise.
    #[must_use]
    pub fn chain(agents: impl IntoIterator<Item = AgentName>, input: impl Into<String>) -> Chain {
        let input = input.into();
        let children = agents
            .into_iter()
            .enumerate()
            .map(|(n, agent)| {
                ChildTask::new(agent, if n == 0 { input.clone() } else { String::new() })
            })
            .collect();
        Chain(Self::delegate(
            children,
            DelegateMode::Chain { recover: None },
        ))
    }

    /// Parks the task (see [`Outcome::Wait`]).
    #[must_use]
    pub fn wait() -> Wait {
        Wait {
            update: ContextUpdate::default(),
            parked: false,
        }
    }

    /// The context changes of this outcome.
    pub fn update_mut(&mut self) -> &mut ContextUpdate {
        match self {
            Self::Complete(Complete { update, .. })
            | Self::Answer(Answer { update, .. })
            | Self::Handoff(Handoff { update, .. })
            | Self::Delegate(Delegation { update, .. })
            | Self::Wait(Wait { update, .. }) => update,
        }
    }
}

/// The session ends with an answer ([`Outcome::complete`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Complete {
    /// The answer.
    pub output: Value,
    /// Context changes.
    pub update: ContextUpdate,
}

/// The agent answered; the routing rules choose what comes next ([`Outcome::answer`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The answer (the session's output if no rule moves control).
    pub output: Value,
    /// Context changes.
    pub update: ContextUpdate,
    /// The LLM condition the agent's model judged true, by index into
    /// [`crate::Routing::llm_conditions`].
    pub judged: Option<usize>,
}

impl Answer {
    /// Says that the agent's model judged LLM condition number `index` true.
    #[must_use]
    pub fn judged(mut self, index: usize) -> Self {
        self.judged = Some(index);
        self
    }
}

/// Control moves to another agent ([`Outcome::handoff`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Handoff {
    /// Where to.
    pub target: Target,
    /// Why.
    pub reason: Reason,
    /// Advice for the receiver.
    pub suggested_next_action: Option<String>,
    /// Context changes.
    pub update: ContextUpdate,
    /// Visit budget of the target and context policy of the route.
    pub options: RouteOptions,
}

impl Handoff {
    /// Lets the target be visited up to `visits` times in the session (a bounded cycle).
    #[must_use]
    pub fn max_visits(mut self, visits: u32) -> Self {
        self.options.max_visits = Some(visits);
        self
    }

    /// Sets how much of the conversation the handoff passes on.
    #[must_use]
    pub fn context_policy(mut self, policy: ContextPolicy) -> Self {
        self.options.context = policy;
        self
    }

    /// Sets the visit budget and context policy together.
    #[must_use]
    pub fn options(mut self, options: RouteOptions) -> Self {
        self.options = options;
        self
    }

    /// Advice for the receiver.
    #[must_use]
    pub fn next_action(mut self, advice: impl Into<String>) -> Self {
        self.suggested_next_action = Some(advice.into());
        self
    }
}

/// Child tasks go out; the agent continues with their results ([`Outcome::delegate`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Delegation {
    /// The children, in order.
    pub children: Vec<ChildTask>,
    /// Serial, parallel, async, or a chain.
    pub mode: DelegateMode,
    /// Context changes, applied before the children go out.
    pub update: ContextUpdate,
}

/// A sequential chain of children ([`Outcome::chain`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Chain(Delegation);

impl Chain {
    /// What to do when a step fails: run an agent on the failure, or use a value.
    #[must_use]
    pub fn recover(mut self, with: Recover) -> Self {
        self.0.mode = DelegateMode::Chain {
            recover: Some(with),
        };
        self
    }
}

/// The task waits in a person's inbox ([`Outcome::wait`]). Its update is
/// kept: the `waiting` event carries it, so watchers see what was said.
#[derive(Debug, Clone, PartialEq)]
pub struct Wait {
    /// Context changes.
    pub update: ContextUpdate,
    /// The agent parked the task in the inbox (a question, an approval, a
    /// call in doubt): it comes back when a person answers. A continuation
    /// may wait so even when every child has answered.
    pub parked: bool,
}

impl Wait {
    /// Says the agent parked the task in the inbox, where a person's
    /// answer sends it back (see [`Wait::parked`]).
    #[must_use]
    pub fn parked(mut self) -> Self {
        self.parked = true;
        self
    }
}

/// The builders every outcome shares: they add to its context update.
macro_rules! context_builders {
    ($($ty:ident => $($field:tt).+;)+) => {$(
        impl $ty {
            /// Appends an agent message to the conversation.
            #[must_use]
            pub fn say(mut self, text: impl Into<String>) -> Self {
                self.$($field).+.messages.push(Message::new(Role::Agent, text));
                self
            }

            /// Appends a message to the conversation.
            #[must_use]
            pub fn message(mut self, message: Message) -> Self {
                self.$($field).+.messages.push(message);
                self
            }

            /// Sets a shared context variable.
            #[must_use]
            pub fn set_var(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
                self.$($field).+.variables.insert(key.into(), value.into());
                self
            }

            /// Sets an internal state entry for the receiver.
            #[must_use]
            pub fn set_state(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
                self.$($field).+.state.insert(key.into(), value.into());
                self
            }

            /// Appends a reasoning step (the runtime fills in the agent).
            #[must_use]
            pub fn step(
                mut self,
                action: impl Into<String>,
                outcome: impl Into<String>,
                reasoning: impl Into<String>,
            ) -> Self {
                self.$($field).+
                    .trace
                    .push(Step::new(None, action, outcome).with_reasoning(reasoning));
                self
            }

            /// Restates the problem for the next agent.
            #[must_use]
            pub fn problem(mut self, problem: impl Into<String>) -> Self {
                self.$($field).+.problem = Some(problem.into());
                self
            }

            /// In a conversation, hands it back to its entry: the user's
            /// next message starts at the entry agent, not at this one.
            #[must_use]
            pub fn hand_back(mut self) -> Self {
                self.$($field).+.hand_back = true;
                self
            }

            /// Replaces the whole context update.
            #[must_use]
            pub fn with_update(mut self, update: ContextUpdate) -> Self {
                self.$($field).+ = update;
                self
            }
        }
    )+};
}

context_builders! {
    Complete => update;
    Answer => update;
    Handoff => update;
    Delegation => update;
    Chain => 0.update;
    Wait => update;
}

macro_rules! into_outcome {
    ($($ty:ident => $variant:ident;)+) => {$(
        impl From<$ty> for Outcome {
            fn from(outcome: $ty) -> Self {
                Self::$variant(outcome)
            }
        }
    )+};
}

into_outcome! {
    Complete => Complete;
    Answer => Answer;
    Handoff => Handoff;
    Delegation => Delegate;
    Wait => Wait;
}

impl From<Chain> for Outcome {
    fn from(chain: Chain) -> Self {
        Self::Delegate(chain.0)
    }
}

/// Why an agent could not produce an outcome. Each kind maps to one ack action.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    /// A transient failure: the task is delivered again after a backoff, until attempts run out.
    #[error("retryable: {0}")]
    Retryable(String),
    /// The task can never succeed: dead-lettered at once.
    #[error("fatal: {0}")]
    Fatal(String),
    /// The agent declines the task (overloaded, wrong skills): it is routed elsewhere.
    #[error("rejected: {0}")]
    Reject(String),
    /// A transient failure with a delay the other side asked for (a rate
    /// limit's `Retry-After`): retried no sooner than that.
    #[error("retryable after {1:?}: {0}")]
    RetryAfter(String, Duration),
    /// The session fails with this reason: dead-lettered, and never handed
    /// to the fallback agent (a person already decided it should fail).
    #[error("failed ({0}): {1}")]
    Fail(Reason, String),
}

impl AgentError {
    /// A transient failure.
    pub fn retryable(detail: impl Into<String>) -> Self {
        Self::Retryable(detail.into())
    }

    /// A transient failure, retried no sooner than `after`.
    pub fn retry_after(detail: impl Into<String>, after: Duration) -> Self {
        Self::RetryAfter(detail.into(), after)
    }

    /// A permanent failure.
    pub fn fatal(detail: impl Into<String>) -> Self {
        Self::Fatal(detail.into())
    }

    /// The session's end, as a failure with `reason`, without the fallback.
    pub fn fail(reason: Reason, detail: impl Into<String>) -> Self {
        Self::Fail(reason, detail.into())
    }

    /// A refusal.
    pub fn reject(detail: impl Into<String>) -> Self {
        Self::Reject(detail.into())
    }
}

/// An agent type name that breaks the naming rule can never be routed to.
impl From<baton_proto::Error> for AgentError {
    fn from(err: baton_proto::Error) -> Self {
        Self::fatal(err.to_string())
    }
}

/// Classifies any error as an [`AgentError`] with `?`.
///
/// # Examples
///
/// ```
/// use baton_author::{AgentError, ResultExt};
///
/// fn parse(text: &str) -> Result<u32, AgentError> {
///     text.parse::<u32>().fatal()
/// }
/// assert!(matches!(parse("x"), Err(AgentError::Fatal(_))));
/// ```
pub trait ResultExt<T> {
    /// A failure worth retrying.
    ///
    /// # Errors
    ///
    /// [`AgentError::Retryable`] with the error's text.
    fn retryable(self) -> Result<T, AgentError>;

    /// A failure no retry can fix.
    ///
    /// # Errors
    ///
    /// [`AgentError::Fatal`] with the error's text.
    fn fatal(self) -> Result<T, AgentError>;
}

impl<T, E: Display> ResultExt<T> for Result<T, E> {
    fn retryable(self) -> Result<T, AgentError> {
        self.map_err(|err| AgentError::retryable(err.to_string()))
    }

    fn fatal(self) -> Result<T, AgentError> {
        self.map_err(|err| AgentError::fatal(err.to_string()))
    }
}

#[cfg(test)]
mod tests;
