//! A configurable agent for tests, benchmarks and experiments: hand off to a
//! fixed next agent or complete, optionally after failing or working a while.

use std::time::Duration;

use baton_proto::{Reason, Value};
use baton_worker::{
    Agent, AgentError, ChildTask, DelegateMode, Need, Outcome, Recover, Results, RetryPolicy, Task,
};

/// What a relay delegates.
#[derive(Debug, Clone)]
pub struct Delegation {
    pub agents: Vec<String>,
    pub mode: String,
    pub recover: Option<String>,
    pub recover_value: Option<String>,
}

impl Delegation {
    fn outcome(&self, name: &str, input: &str) -> Outcome {
        let mode = match self.mode.as_str() {
            "serial" => DelegateMode::Serial,
            "async" => DelegateMode::Async,
            "chain" => DelegateMode::Chain {
                recover: match (&self.recover, &self.recover_value) {
                    (Some(agent), _) => Some(Recover::Agent(agent.clone())),
                    (None, Some(value)) => Some(Recover::Value(Value::from(value.as_str()))),
                    (None, None) => None,
                },
            },
            _ => DelegateMode::Parallel,
        };
        let children = self
            .agents
            .iter()
            .enumerate()
            .map(|(n, agent)| {
                ChildTask::new(
                    agent.clone(),
                    format!("{name} asks {agent} (child {n}): {input}"),
                )
            })
            .collect();
        Outcome::delegate(children, mode)
    }
}

/// Behaviour of a relay agent, set from `baton worker` flags.
#[derive(Debug, Clone)]
pub struct Relay {
    pub name: String,
    pub next: Option<String>,
    /// Hand off by capability instead, through the registry.
    pub next_requires: Option<Vec<String>>,
    /// Delegate instead, and complete with the results.
    pub delegate: Option<Delegation>,
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
        if let Some(delegation) = &self.delegate {
            return Ok(delegation.outcome(&self.name, task.query()));
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

    async fn resume(&self, _task: Task, results: Results) -> Result<Outcome, AgentError> {
        // Each report is logged, so a test sees async results arrive one by one.
        tracing::info!(
            received = results.results.len(),
            total = results.total,
            latest = ?results.latest,
            "{} resumed with {} of {} results",
            self.name,
            results.results.len(),
            results.total
        );
        if !self.work.is_zero() {
            tokio::time::sleep(self.work).await;
        }
        if results.mode == DelegateMode::Async && !results.all_in() {
            return Ok(Outcome::wait());
        }
        let statuses = results
            .results
            .iter()
            .map(|r| Value::from(r.status.as_str()))
            .collect();
        let agents = results
            .results
            .iter()
            .map(|r| Value::from(r.agent.clone().unwrap_or_default()))
            .collect();
        Ok(Outcome::complete(Value::Map(vec![
            (Value::from("results"), results.outputs()),
            (Value::from("statuses"), Value::Array(statuses)),
            (Value::from("agents"), Value::Array(agents)),
            (Value::from("total"), Value::from(results.total)),
        ])))
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
