use std::future::Future;
use std::time::Duration;

use baton_proto::{AgentName, Envelope, Map, Message, Reason, Role, Step, Value};

use crate::delegate::{ChildTask, DelegateMode, Results};

/// One agent type's behaviour. Implement [`Agent::handle`]; the other methods
/// are policies with defaults.
///
/// # Examples
///
/// ```
/// use baton_worker::{Agent, AgentError, Outcome, Task};
/// use baton_proto::Reason;
///
/// struct Triage;
///
/// impl Agent for Triage {
///     async fn handle(&self, task: Task) -> Result<Outcome, AgentError> {
///         if task.query().contains("refund") {
///             Ok(Outcome::handoff("refund", Reason::KnowledgeGap).say("Passing you to refunds."))
///         } else {
///             Ok(Outcome::complete("Hello!"))
///         }
///     }
/// }
/// ```
pub trait Agent: Send + Sync + 'static {
    /// Handles one delivery of a task and says what comes next.
    ///
    /// The same envelope may be delivered more than once (after a crash or a
    /// retry): an agent with side effects uses [`Task::idempotency_key`].
    ///
    /// # Errors
    ///
    /// An [`AgentError`] says whether to retry, give up, or decline.
    fn handle(&self, task: Task) -> impl Future<Output = Result<Outcome, AgentError>> + Send;

    /// Retries and their backoff.
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::default()
    }

    /// How long one call of [`Agent::handle`] may run; past it the attempt counts as a retryable failure.
    fn timeout(&self) -> Duration {
        Duration::from_secs(60)
    }

    /// How many tasks one worker process handles at once.
    fn concurrency(&self) -> usize {
        8
    }

    /// Continues after an [`Outcome::Delegate`]: `task` is the delegating
    /// envelope (with the agent's update applied) and `results` the
    /// children's answers, failed ones marked as failed. It may return any
    /// outcome, including another delegation. The default completes with the
    /// children's outputs, in order.
    ///
    /// # Errors
    ///
    /// As for [`Agent::handle`].
    fn resume(
        &self,
        task: Task,
        results: Results,
    ) -> impl Future<Output = Result<Outcome, AgentError>> + Send {
        let _ = task;
        std::future::ready(Ok(Outcome::complete(results.outputs())))
    }
}

/// How often and how fast a retryable failure is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Deliveries in all, the first included; the last failure dead-letters.
    pub max_attempts: u32,
    /// Delay before the second attempt.
    pub min_backoff: Duration,
    /// Upper bound of the doubling delay.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            min_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The delay after failed attempt number `attempt` (counting from 1): doubling, capped.
    #[must_use]
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        self.min_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }
}

/// One delivery of an envelope to an agent.
#[derive(Debug, Clone)]
pub struct Task {
    /// The envelope, with the full context.
    pub envelope: Envelope,
    /// Delivery attempt, counting from 1.
    pub attempt: u32,
    /// The agent type handling it.
    pub agent: AgentName,
    /// The worker instance handling it.
    pub instance: String,
}

impl Task {
    /// What the user first asked.
    #[must_use]
    pub fn query(&self) -> &str {
        &self.envelope.context.initial_query
    }

    /// The latest user message, or the initial query.
    #[must_use]
    pub fn last_user_message(&self) -> &str {
        self.envelope
            .context
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map_or(self.query(), |m| m.content.as_str())
    }

    /// A shared context variable.
    #[must_use]
    pub fn variable(&self, key: &str) -> Option<&Value> {
        self.envelope.context.variables.get(key)
    }

    /// A stable key for side effects: the envelope id, the same on every redelivery.
    #[must_use]
    pub fn idempotency_key(&self) -> String {
        self.envelope.id.to_string()
    }
}

/// What an agent did to the context; applied before the envelope moves on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContextUpdate {
    /// Messages to append to the conversation.
    pub messages: Vec<Message>,
    /// Variables to set (merged into the shared variables).
    pub variables: Map,
    /// Steps to append to the reasoning trace.
    pub trace: Vec<Step>,
    /// Internal state entries to set for the receiver.
    pub state: Map,
    /// The problem as this agent now understands it.
    pub problem: Option<String>,
}

/// Where control goes next.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Target {
    /// An agent type, by name.
    Agent(String),
    /// Whichever agent type the registry ranks best for these needs; agents
    /// already on the session's path are excluded.
    Capabilities(Need),
    /// An agent type of a higher tier than this one (the registry is asked for
    /// at least this agent's tier + 1); the fallback when none fits.
    Escalate(Need),
    /// The fallback agent of this worker.
    Fallback,
}

/// What the receiving agent must offer: resolved through the registry.
///
/// # Examples
///
/// ```
/// use baton_worker::Need;
///
/// let need = Need::capabilities(["refunds"]).in_domains(["billing"]).min_tier(2);
/// assert_eq!(need.requires, ["refunds"]);
/// assert_eq!(need.min_tier, Some(2));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Need {
    /// Capabilities the agent must have, every one.
    pub requires: Vec<String>,
    /// Knowledge domains of which the agent must have at least one (when any are given).
    pub domains: Vec<String>,
    /// Lowest acceptable tier.
    pub min_tier: Option<u32>,
}

impl Need {
    /// An agent with every one of `capabilities`.
    #[must_use]
    pub fn capabilities<I, S>(capabilities: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            requires: capabilities.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Also requires at least one of `domains`.
    #[must_use]
    pub fn in_domains<I, S>(mut self, domains: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.domains = domains.into_iter().map(Into::into).collect();
        self
    }

    /// Also requires a tier of at least `tier`.
    #[must_use]
    pub fn min_tier(mut self, tier: u32) -> Self {
        self.min_tier = Some(tier);
        self
    }

    /// This need, escalated from an agent of tier `tier`: at least one tier higher.
    #[must_use]
    pub(crate) fn above(self, tier: u32) -> Self {
        let min_tier = Some(self.min_tier.unwrap_or(0).max(tier + 1));
        Self { min_tier, ..self }
    }

    /// The registry lookup for this need, leaving out the agent types in `exclude`.
    pub(crate) fn lookup(self, exclude: Vec<String>) -> baton_proto::LookupRequest {
        baton_proto::LookupRequest {
            requires: self.requires,
            domains: self.domains,
            min_tier: self.min_tier,
            exclude,
            extra: baton_proto::Map::new(),
        }
    }
}

/// How much of the conversation a route passes on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContextPolicy {
    /// Every message (the default).
    #[default]
    Full,
    /// Only the last `n` messages.
    LastN(usize),
    /// No messages.
    None,
}

impl ContextPolicy {
    /// How many of `len` messages this policy keeps.
    #[must_use]
    pub fn keeps(self, len: usize) -> usize {
        match self {
            Self::Full => len,
            Self::LastN(n) => n.min(len),
            Self::None => 0,
        }
    }
}

impl std::fmt::Display for ContextPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Full => f.write_str("full"),
            Self::LastN(n) => write!(f, "last_n {n}"),
            Self::None => f.write_str("none"),
        }
    }
}

/// Options of one route: how often its target may be visited, and how much
/// context it passes on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteOptions {
    /// How many times the target may appear on the session's path, this
    /// visit included. `None` means once: a revisit is a loop. A bounded
    /// cycle (planner ↔ reviewer) declares its budget here.
    pub max_visits: Option<u32>,
    /// How much of the conversation goes along.
    pub context: ContextPolicy,
}

/// What an agent decided.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Outcome {
    /// The session is done; `output` is the answer.
    Complete {
        /// The answer.
        output: Value,
        /// Context changes.
        update: ContextUpdate,
    },
    /// Control moves to another agent.
    Handoff {
        /// Where to.
        target: Target,
        /// Why.
        reason: Reason,
        /// Advice for the receiver.
        suggested_next_action: Option<String>,
        /// Context changes.
        update: ContextUpdate,
        /// Visit budget of the target and context policy of the route.
        options: RouteOptions,
    },
    /// Child tasks go out and the agent waits for their results without
    /// holding a worker; [`Agent::resume`] continues with them.
    Delegate {
        /// The children, in order.
        children: Vec<ChildTask>,
        /// Serial, parallel, async, or a chain.
        mode: DelegateMode,
        /// Context changes, applied before the children go out.
        update: ContextUpdate,
    },
    /// The task now waits outside the runtime, in a person's inbox: the
    /// delivery is acked with a `waiting` event and the session stays open.
    Wait {
        /// Context changes (kept for the record; the waiting copy is the agent's to store).
        update: ContextUpdate,
    },
}

impl Outcome {
    /// Completes the session with `output`.
    #[must_use]
    pub fn complete(output: impl Into<Value>) -> Self {
        Self::Complete {
            output: output.into(),
            update: ContextUpdate::default(),
        }
    }

    /// Hands off to agent type `agent` for `reason`.
    #[must_use]
    pub fn handoff(agent: impl Into<String>, reason: Reason) -> Self {
        Self::Handoff {
            target: Target::Agent(agent.into()),
            reason,
            suggested_next_action: None,
            update: ContextUpdate::default(),
            options: RouteOptions::default(),
        }
    }

    /// Hands off to the agent type the registry ranks best for `need`.
    #[must_use]
    pub fn handoff_to(need: Need, reason: Reason) -> Self {
        Self::Handoff {
            target: Target::Capabilities(need),
            reason,
            suggested_next_action: None,
            update: ContextUpdate::default(),
            options: RouteOptions::default(),
        }
    }

    /// Escalates to a higher tier for `reason`: the registry's best agent of at
    /// least this agent's tier + 1, else the fallback agent.
    #[must_use]
    pub fn escalate(reason: Reason) -> Self {
        Self::escalate_to(Need::default(), reason)
    }

    /// Escalates to a higher-tier agent that also meets `need`, else the fallback agent.
    #[must_use]
    pub fn escalate_to(need: Need, reason: Reason) -> Self {
        Self::Handoff {
            target: Target::Escalate(need),
            reason,
            suggested_next_action: None,
            update: ContextUpdate::default(),
            options: RouteOptions::default(),
        }
    }

    /// Hands straight to the fallback agent (a person, usually) for `reason`.
    #[must_use]
    pub fn fallback(reason: Reason) -> Self {
        Self::Handoff {
            target: Target::Fallback,
            reason,
            suggested_next_action: None,
            update: ContextUpdate::default(),
            options: RouteOptions::default(),
        }
    }

    /// Delegates `children` in `mode` (see [`Outcome::Delegate`]).
    #[must_use]
    pub fn delegate(children: Vec<ChildTask>, mode: DelegateMode) -> Self {
        Self::Delegate {
            children,
            mode,
            update: ContextUpdate::default(),
        }
    }

    /// A sequential chain through `agents`: `input` goes to the first, each
    /// output to the next; the first failure stops it.
    #[must_use]
    pub fn chain<I, S>(agents: I, input: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let input = input.into();
        let children = agents
            .into_iter()
            .enumerate()
            .map(|(n, agent)| {
                ChildTask::new(agent, if n == 0 { input.clone() } else { String::new() })
            })
            .collect();
        Self::delegate(children, DelegateMode::Chain { recover: None })
    }

    /// For a chain: what to do when a step fails.
    #[must_use]
    pub fn recover(mut self, with: crate::delegate::Recover) -> Self {
        if let Self::Delegate { mode, .. } = &mut self {
            *mode = DelegateMode::Chain {
                recover: Some(with),
            };
        }
        self
    }

    /// Parks the task (see [`Outcome::Wait`]).
    #[must_use]
    pub fn wait() -> Self {
        Self::Wait {
            update: ContextUpdate::default(),
        }
    }

    /// The context changes of this outcome.
    pub fn update_mut(&mut self) -> &mut ContextUpdate {
        match self {
            Self::Complete { update, .. }
            | Self::Handoff { update, .. }
            | Self::Delegate { update, .. }
            | Self::Wait { update } => update,
        }
    }

    /// Lets the target be visited up to `visits` times in the session (a bounded cycle).
    #[must_use]
    pub fn max_visits(mut self, visits: u32) -> Self {
        if let Self::Handoff { options, .. } = &mut self {
            options.max_visits = Some(visits);
        }
        self
    }

    /// Sets how much of the conversation the handoff passes on.
    #[must_use]
    pub fn context_policy(mut self, policy: ContextPolicy) -> Self {
        if let Self::Handoff { options, .. } = &mut self {
            options.context = policy;
        }
        self
    }

    /// Appends an agent message to the conversation.
    #[must_use]
    pub fn say(mut self, text: impl Into<String>) -> Self {
        self.update_mut()
            .messages
            .push(Message::new(Role::Agent, text));
        self
    }

    /// Appends a message to the conversation.
    #[must_use]
    pub fn message(mut self, message: Message) -> Self {
        self.update_mut().messages.push(message);
        self
    }

    /// Sets a shared context variable.
    #[must_use]
    pub fn set_var(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.update_mut().variables.insert(key.into(), value.into());
        self
    }

    /// Sets an internal state entry for the receiver.
    #[must_use]
    pub fn set_state(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.update_mut().state.insert(key.into(), value.into());
        self
    }

    /// Appends a reasoning step (the agent field is filled in by the runtime).
    #[must_use]
    pub fn step(
        mut self,
        action: impl Into<String>,
        outcome: impl Into<String>,
        reasoning: impl Into<String>,
    ) -> Self {
        self.update_mut()
            .trace
            .push(Step::new("", action, outcome).with_reasoning(reasoning));
        self
    }

    /// Restates the problem for the next agent.
    #[must_use]
    pub fn problem(mut self, problem: impl Into<String>) -> Self {
        self.update_mut().problem = Some(problem.into());
        self
    }

    /// Advice for the receiver of a handoff; ignored on completion.
    #[must_use]
    pub fn next_action(mut self, advice: impl Into<String>) -> Self {
        if let Self::Handoff {
            suggested_next_action,
            ..
        } = &mut self
        {
            *suggested_next_action = Some(advice.into());
        }
        self
    }
}

/// Why an agent could not produce an outcome. Each kind maps to one ack action.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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

    /// A refusal.
    pub fn reject(detail: impl Into<String>) -> Self {
        Self::Reject(detail.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let policy = RetryPolicy {
            max_attempts: 10,
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(500),
        };
        assert_eq!(policy.backoff(1), Duration::from_millis(100));
        assert_eq!(policy.backoff(2), Duration::from_millis(200));
        assert_eq!(policy.backoff(3), Duration::from_millis(400));
        assert_eq!(policy.backoff(4), Duration::from_millis(500));
        assert_eq!(policy.backoff(60), Duration::from_millis(500));
    }

    #[test]
    fn builders_fill_the_update() {
        let outcome = Outcome::handoff("refund", Reason::KnowledgeGap)
            .say("over to refunds")
            .set_var("order", "ABC-123")
            .set_state("checked", true)
            .step("lookup", "found", "order exists")
            .next_action("check the refund window");
        let Outcome::Handoff {
            target,
            suggested_next_action,
            update,
            ..
        } = outcome
        else {
            panic!("not a handoff")
        };
        assert_eq!(target, Target::Agent("refund".into()));
        assert_eq!(
            suggested_next_action.as_deref(),
            Some("check the refund window")
        );
        assert_eq!(update.messages.len(), 1);
        assert_eq!(update.variables.get("order"), Some(&Value::from("ABC-123")));
        assert_eq!(update.state.get("checked"), Some(&Value::from(true)));
        assert_eq!(update.trace[0].action, "lookup");
    }
}
