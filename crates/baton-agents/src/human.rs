//! Human agents: tasks wait in the durable inbox ([`baton_client::Inbox`])
//! until a person answers.

use baton_client::Inbox;
use baton_worker::{AgentError, Outcome, Task};

/// The human agent: puts each task in the inbox and leaves the session waiting.
pub struct HumanRunner {
    inbox: Inbox,
}

impl HumanRunner {
    /// A human agent on `inbox`.
    #[must_use]
    pub fn new(inbox: Inbox) -> Self {
        Self { inbox }
    }

    /// Stores the task for a person.
    ///
    /// # Errors
    ///
    /// Retryable when the inbox does not acknowledge the write.
    pub async fn run(&self, task: &Task) -> Result<Outcome, AgentError> {
        let reason = baton_proto::Reason::InputRequired;
        crate::evaluating::asks_no_person(task, &reason, &format!("{}'s task", task.agent))?;
        // A task published straight to the agent's subject names no `to`:
        // the answer is the agent type's, not an anonymous person's.
        let mut stored;
        let envelope = if task.envelope.to.is_none() {
            stored = task.envelope.clone();
            stored.to = Some(task.agent.clone());
            &stored
        } else {
            &task.envelope
        };
        self.inbox
            .put(envelope)
            .await
            .map_err(|err| AgentError::retryable(baton_nats::error_chain(&err)))?;
        tracing::info!(session = %task.envelope.session, id = %task.envelope.id, "waiting for a person: baton inbox reply {} TEXT", task.envelope.id);
        Ok(Outcome::wait().parked().into())
    }
}
