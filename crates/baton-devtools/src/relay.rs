//! A configurable agent for tests, benchmarks and experiments: hand off to a
//! fixed next agent or complete, optionally after failing or working a while.

use std::time::Duration;

use baton_proto::{Message, Reason, Role, Step, Value};
use baton_worker::{
    Agent, AgentError, AgentName, ChildTask, DelegateMode, Need, Outcome, Recover, Results,
    RetryPolicy, Task,
};

/// What a relay delegates.
#[derive(Debug, Clone)]
pub struct Delegation {
    /// The children's agent types, in order.
    pub agents: Vec<AgentName>,
    /// `parallel`, `serial`, `async` or `chain`.
    pub mode: String,
    /// A chain's recovery agent.
    pub recover: Option<AgentName>,
    /// A chain's stand-in value for a failed step.
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
        Outcome::delegate(children, mode).into()
    }
}

/// Behaviour of a relay agent, set from `baton worker` flags.
#[derive(Debug, Clone)]
pub struct Relay {
    /// The agent type it serves.
    pub name: String,
    /// Hand off to this agent type; `None` completes.
    pub next: Option<AgentName>,
    /// Hand off by capability instead, through the registry.
    pub next_requires: Option<Vec<String>>,
    /// Delegate instead, and complete with the results.
    pub delegate: Option<Delegation>,
    /// Fail this many attempts (retryably) before succeeding.
    pub fail_attempts: u32,
    /// Fail fatally on every task.
    pub fatal: bool,
    /// Decline every task.
    pub reject: bool,
    /// Escalate every task to a higher tier.
    pub escalate: bool,
    /// How long each task takes.
    pub work: Duration,
    /// Retries and their backoff.
    pub retry: RetryPolicy,
    /// How long one run may take.
    pub timeout: Duration,
    /// Tasks at once per process.
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
        let advice = || format!("continue after {}", self.name);
        let mut outcome: Outcome = if self.escalate {
            Outcome::escalate(Reason::UserEscalation).into()
        } else {
            match (&self.next, &self.next_requires) {
                (Some(next), _) => Outcome::handoff(next.clone(), Reason::OutOfScope)
                    .next_action(advice())
                    .into(),
                (None, Some(requires)) => {
                    Outcome::handoff(Need::capabilities(requires.clone()), Reason::KnowledgeGap)
                        .next_action(advice())
                        .into()
                }
                (None, None) => Outcome::complete(summary(&task)).into(),
            }
        };
        if !self.quiet {
            let update = outcome.update_mut();
            let name = &self.name;
            update
                .messages
                .push(Message::new(Role::Agent, format!("{name} was here")));
            update
                .variables
                .insert(format!("{name}_attempt"), Value::from(task.attempt));
            update
                .state
                .insert("last".into(), Value::from(name.as_str()));
            update.trace.push(
                Step::new(None, "relay", "passed on").with_reasoning(format!("{name} relays")),
            );
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
            return Ok(Outcome::wait().into());
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
        ]))
        .into())
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
        .map(|s| {
            text(&format!(
                "{}:{}",
                s.agent.as_deref().unwrap_or_default(),
                s.action
            ))
        })
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
