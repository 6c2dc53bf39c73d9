//! The [`Agent`] trait, the [`Task`] a worker hands it, and its
//! [`RetryPolicy`].

use std::future::Future;
use std::time::Duration;

use baton_proto::{AgentName, Envelope, Role, Value};

use crate::delegate::Results;
use crate::outcome::{AgentError, Outcome};
use crate::routing::Routing;

/// One agent type's behaviour. Implement [`Agent::handle`]; the other methods
/// are policies with defaults.
///
/// # Examples
///
/// ```
/// use baton_author::{Agent, AgentError, AgentName, Outcome, Reason, Task};
///
/// struct Triage;
///
/// impl Agent for Triage {
///     async fn handle(&self, task: Task) -> Result<Outcome, AgentError> {
///         Ok(if task.query().contains("refund") {
///             Outcome::handoff(AgentName::new("refund")?, Reason::KnowledgeGap)
///                 .say("Passing you to refunds.")
///                 .into()
///         } else {
///             Outcome::complete("Hello!").into()
///         })
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
    /// outcome, including another delegation. The default answers with the
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
        std::future::ready(Ok(Outcome::answer(results.outputs()).into()))
    }

    /// The routing rules applied to what [`Agent::handle`] and
    /// [`Agent::resume`] return: they decide where an [`Outcome::Answer`]
    /// goes, and give function-driven handoffs to a declared target that
    /// target's options. The default has no rules: an answer completes the
    /// session.
    ///
    /// # Examples
    ///
    /// An agent that hands the session to a person once three attempts have
    /// been counted in the shared variables, and completes it otherwise:
    ///
    /// ```
    /// use baton_author::{Agent, AgentError, Condition, Outcome, Route, Routing, Target, Task};
    ///
    /// struct Solver {
    ///     rules: Routing,
    /// }
    ///
    /// impl Solver {
    ///     fn new() -> Result<Self, baton_author::Error> {
    ///         let give_up = Condition::new("attempts >= 3", Route::to(Target::Fallback))?;
    ///         Ok(Self { rules: Routing { conditions: vec![give_up], ..Routing::default() } })
    ///     }
    /// }
    ///
    /// impl Agent for Solver {
    ///     async fn handle(&self, task: Task) -> Result<Outcome, AgentError> {
    ///         let attempts = task.variable("attempts").and_then(|v| v.as_u64()).unwrap_or(0);
    ///         Ok(Outcome::answer("tried again").set_var("attempts", attempts + 1).into())
    ///     }
    ///
    ///     fn routing(&self) -> Option<&Routing> {
    ///         Some(&self.rules)
    ///     }
    /// }
    /// # Solver::new().unwrap();
    /// ```
    fn routing(&self) -> Option<&Routing> {
        None
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
    /// The envelope, with the full context: shared with the worker, so
    /// reading it copies nothing; changing it makes the agent's own copy.
    pub envelope: crate::shared::Shared<Envelope>,
    /// Delivery attempt, counting from 1.
    pub attempt: u32,
    /// The agent type handling it.
    pub agent: AgentName,
    /// The worker instance handling it.
    pub instance: String,
    /// Where the agent reports what it does during the hop (tool calls).
    pub progress: crate::Progress,
    /// The registry, when the worker uses one (a team's coordinator asks
    /// it for members).
    pub registry: Option<std::sync::Arc<dyn Lookups>>,
}

/// Registry lookups as an agent makes them (a team's coordinator does);
/// `baton_client::RegistryClient` is one.
pub trait Lookups: Send + Sync + std::fmt::Debug {
    /// The candidates for `request`, best first, or why there are none
    /// ([`ErrorKind::Lookup`](crate::ErrorKind::Lookup)).
    fn lookup<'a>(
        &'a self,
        request: &'a baton_proto::LookupRequest,
    ) -> std::pin::Pin<
        Box<dyn Future<Output = Result<baton_proto::LookupResponse, crate::Error>> + Send + 'a>,
    >;
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
}
