//! A configurable agent for tests, benchmarks and experiments: hand off to a
//! fixed next agent or complete, optionally after failing or working a while.

use std::time::Duration;

use baton_proto::{Reason, Value};
use baton_worker::{Agent, AgentError, Need, Outcome, RetryPolicy, Task};

/// Behaviour of a relay agent, set from `baton worker` flags.
#[derive(Debug, Clone)]
pub struct Relay {
    pub name: String,
    pub next: Option<String>,
    /// Hand off by capability instead, through the registry.
    pub next_requires: Option<Vec<String>>,
    pub fail_attempts: u32,
    pub fatal: bool,
    pub reject: bool,
    pub escalate: bool,
    pub work: Duration,
    pub retry: RetryPolicy,
    pub timeout: Duration,
    pub concurrency: usize,
    /// Keep the context untouched (benchmarks measure the runtime, not the agent).
    pub quiet: bool,
}

impl Agent for Relay {
    async fn handle(&self, task: Task) -> Result<Outcome, AgentError> {
        if !self.work.is_zero() {
            tokio::time::sleep(self.work).await;
        }
        if self.fatal {
            return Err(AgentError::fatal(format!(
                "{} is configured to fail fatally",
                self.name
            )));
        }
        if self.reject {
            return Err(AgentError::reject(format!(
                "{} is configured to reject",
                self.name
            )));
        }
        if task.attempt <= self.fail_attempts {
            return Err(AgentError::retryable(format!(
                "{} failed attempt {} on purpose",
                self.name, task.attempt
            )));
        }
        let mut outcome = if self.escalate {
            Outcome::escalate(Reason::UserEscalation)
        } else {
            match (&self.next, &self.next_requires) {
                (Some(next), _) => Outcome::handoff(next.clone(), Reason::OutOfScope)
                    .next_action(format!("continue after {}", self.name)),
                (None, Some(requires)) => {
                    Outcome::handoff_to(Need::capabilities(requires.clone()), Reason::KnowledgeGap)
                        .next_action(format!("continue after {}", self.name))
                }
                (None, None) => Outcome::complete(summary(&task)),
            }
        };
        if !self.quiet {
            outcome = outcome
                .say(format!("{} was here", self.name))
                .set_var(format!("{}_attempt", self.name), task.attempt)
                .set_state("last", self.name.clone())
                .step("relay", "passed on", format!("{} relays", self.name));
        }
        Ok(outcome)
    }

    fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn concurrency(&self) -> usize {
        self.concurrency
    }
}

/// The context as received by the last agent, so a test can check what arrived.
fn summary(task: &Task) -> Value {
    let context = &task.envelope.context;
    let text = |s: &str| Value::from(s);
    let messages = context.messages.iter().map(|m| text(&m.content)).collect();
    let trace = context
        .trace
        .iter()
        .map(|s| text(&format!("{}:{}", s.agent, s.action)))
        .collect();
    let map =
        |m: &baton_proto::Map| Value::Map(m.iter().map(|(k, v)| (text(k), v.clone())).collect());
    Value::Map(vec![
        (text("messages"), Value::Array(messages)),
        (text("variables"), map(&context.variables)),
        (text("state"), map(&context.state)),
        (text("trace"), Value::Array(trace)),
        (text("attempt"), Value::from(task.attempt)),
    ])
}
