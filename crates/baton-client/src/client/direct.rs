//! A task that names its agent type, sent past the router as the router
//! would forward it: what a conversation's next turn to its holder takes,
//! one publish fewer on its way.

use baton_proto::{AgentName, Envelope};

use super::Client;
use baton_nats::Error;
use baton_nats::pipeline::address::{Sending, addressed};

impl Client {
    /// Publishes `envelope`, a task with `to`, straight to that agent
    /// type's subject in the form the router forwards it: under the id the
    /// router derives from the task's, with the router's default deadline
    /// and budget where the task sets none (as the router published them;
    /// see `services::router::defaults`), and with its deadline watch
    /// started. So a task sent both ways, as a conversation's turn sent again
    /// by the router's keeper is, is one JetStream duplicate, not two tasks.
    ///
    /// It goes to `baton.ingress` as [`Client::submit`] sends it when the
    /// router's defaults are not known (no router has started, or one from
    /// before they were published), when it names no agent type, or when
    /// that type has no workers (the router then refuses it with its events).
    ///
    /// # Errors
    ///
    /// As [`Client::submit`].
    pub async fn submit_direct(&self, envelope: &Envelope) -> Result<(), Error> {
        let agent = envelope
            .to
            .as_deref()
            .and_then(|to| AgentName::new(to).ok());
        let Some(agent) = agent else {
            return self.submit(envelope).await;
        };
        let (defaults, served) = tokio::join!(self.defaults.get(), self.served.ask(&agent));
        let Some(defaults) = defaults else {
            tracing::debug!(session = %envelope.session, "the router's defaults are not known; sending through the router");
            return self.submit(envelope).await;
        };
        match served {
            Ok(true) => {}
            Ok(false) => return self.submit(envelope).await,
            // As the router does, when the server cannot be asked.
            Err(err) => tracing::warn!(error = %err, %agent, "assuming the agent type is served"),
        }
        // Sent as the router would send it: stamped now, then given the
        // router's defaults (a default deadline runs from the stamp), pinned,
        // and put under the id the router derives.
        let mut task = (envelope.clone()).resent(envelope.id, envelope.kind.clone(), agent.clone());
        let rollouts = self.rollouts().await;
        let sending = Sending::Routed(&defaults);
        let sent = addressed((rollouts, &self.subjects), sending, &agent, &mut task);
        task.id = sent.id;
        self.publish(sent.subject, &task).await?;
        self.watch_deadline(sent.timer, task.session).await;
        Ok(())
    }
}
