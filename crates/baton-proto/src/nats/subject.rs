use uuid::Uuid;

use super::name::{AgentName, NAME_RULE, Version, broken, is_valid_name};
use crate::Error;

/// Subject and stream names under one prefix (`baton` by default).
///
/// # Examples
///
/// ```
/// use baton_proto::{AgentName, Subjects};
///
/// let subjects = Subjects::default();
/// let refund: AgentName = "refund".parse().unwrap();
/// assert_eq!(subjects.agent(&refund), "baton.agent.refund");
/// assert_eq!(subjects.tasks_stream(), "BATON_TASKS");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subjects {
    prefix: String,
    stream_prefix: String,
}

impl Default for Subjects {
    fn default() -> Self {
        Self::new("baton").expect("the default prefix is valid")
    }
}

impl Subjects {
    /// Subjects under `prefix`, which follows the agent naming rule.
    ///
    /// # Errors
    ///
    /// When `prefix` breaks the naming rule.
    pub fn new(prefix: impl Into<String>) -> Result<Self, Error> {
        let prefix = prefix.into();
        if !is_valid_name(&prefix) {
            return Err(broken("subject prefix", &prefix, NAME_RULE));
        }
        let stream_prefix = prefix.to_ascii_uppercase().replace('-', "_");
        Ok(Self {
            prefix,
            stream_prefix,
        })
    }

    /// The prefix.
    #[must_use]
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `baton.ingress`: new tasks from outside.
    #[must_use]
    pub fn ingress(&self) -> String {
        format!("{}.ingress", self.prefix)
    }

    /// `baton.agent._deadline`: deadline timers (no agent type can be named
    /// `_deadline`, so no worker pulls them).
    #[must_use]
    pub fn deadline_timers(&self) -> String {
        format!("{}.agent._deadline", self.prefix)
    }

    /// `baton.agent.<agent>`: work for one agent type.
    #[must_use]
    pub fn agent(&self, agent: &AgentName) -> String {
        format!("{}.agent.{agent}", self.prefix)
    }

    /// `baton.agent.<A>.<V>`: work for version `version` of agent type
    /// `agent`, which only that version's workers take.
    #[must_use]
    pub fn agent_version(&self, agent: &AgentName, version: &Version) -> String {
        format!("{}.agent.{agent}.{version}", self.prefix)
    }

    /// The agent type whose work `subject` is (`baton.agent.<A>` or
    /// `baton.agent.<A>.<V>`); `None` for any other subject.
    #[must_use]
    pub fn agent_of(&self, subject: &str) -> Option<AgentName> {
        let rest = subject
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix(".agent.")?;
        let agent = rest.split('.').next()?;
        AgentName::new(agent).ok()
    }

    /// `baton.agent.>`: work for every agent type.
    #[must_use]
    pub fn all_agents(&self) -> String {
        format!("{}.agent.>", self.prefix)
    }

    /// `baton.events.<session>`: lifecycle events of one session.
    #[must_use]
    pub fn events(&self, session: Uuid) -> String {
        format!("{}.events.{session}", self.prefix)
    }

    /// `baton.live.<session>`: progress events that are not stored
    /// (`accepted` and `handoff` at the `lean` event level), core NATS only.
    #[must_use]
    pub fn live(&self, session: Uuid) -> String {
        format!("{}.live.{session}", self.prefix)
    }

    /// `baton.live.*`: every session's unstored progress events.
    #[must_use]
    pub fn all_live(&self) -> String {
        format!("{}.live.*", self.prefix)
    }

    /// `baton.events.>`: every session's events.
    #[must_use]
    pub fn all_events(&self) -> String {
        format!("{}.events.>", self.prefix)
    }

    /// `baton.session.read.<session>`: requests for one session's events,
    /// answered by the router for clients that may not read the events
    /// stream themselves.
    #[must_use]
    pub fn session_read(&self, session: Uuid) -> String {
        format!("{}.session.read.{session}", self.prefix)
    }

    /// `baton.session.cancel.<session>`: requests to cancel one session,
    /// answered by the router.
    #[must_use]
    pub fn session_cancel(&self, session: Uuid) -> String {
        format!("{}.session.cancel.{session}", self.prefix)
    }

    /// `baton.session.read.*`: a read of any one session.
    #[must_use]
    pub fn session_read_any(&self) -> String {
        format!("{}.session.read.*", self.prefix)
    }

    /// `baton.session.cancel.*`: a cancel of any one session.
    #[must_use]
    pub fn session_cancel_any(&self) -> String {
        format!("{}.session.cancel.*", self.prefix)
    }

    /// `baton.session.*.*`: every session request the router answers.
    #[must_use]
    pub fn all_session_requests(&self) -> String {
        format!("{}.session.*.*", self.prefix)
    }

    /// `baton.dlq.<agent>`: dead letters of one agent type.
    #[must_use]
    pub fn dlq(&self, agent: &AgentName) -> String {
        format!("{}.dlq.{agent}", self.prefix)
    }

    /// `baton.dlq.>`: every dead letter.
    #[must_use]
    pub fn all_dlq(&self) -> String {
        format!("{}.dlq.>", self.prefix)
    }

    /// `baton.registry.heartbeat.<agent>.<instance>`.
    #[must_use]
    pub fn heartbeat(&self, agent: &AgentName, instance: &str) -> String {
        format!("{}.registry.heartbeat.{agent}.{instance}", self.prefix)
    }

    /// `baton.registry.heartbeat.>`.
    #[must_use]
    pub fn all_heartbeats(&self) -> String {
        format!("{}.registry.heartbeat.>", self.prefix)
    }

    /// `baton.registry.lookup`.
    #[must_use]
    pub fn lookup(&self) -> String {
        format!("{}.registry.lookup", self.prefix)
    }

    /// `baton.registry.feedback`: feedback on a session, request/reply.
    #[must_use]
    pub fn feedback(&self) -> String {
        format!("{}.registry.feedback", self.prefix)
    }

    /// `baton.registry.notebook`: an agent type's notebook, request/reply.
    #[must_use]
    pub fn notebook(&self) -> String {
        format!("{}.registry.notebook", self.prefix)
    }

    /// `baton.outcomes.<session>`: the outcome records of one session.
    #[must_use]
    pub fn outcomes(&self, session: Uuid) -> String {
        format!("{}.outcomes.{session}", self.prefix)
    }

    /// `baton.outcomes.>`.
    #[must_use]
    pub fn all_outcomes(&self) -> String {
        format!("{}.outcomes.>", self.prefix)
    }

    /// `baton.decisions.<agent>`: the decisions of an agent type's gated
    /// rollouts.
    #[must_use]
    pub fn decisions(&self, agent: &str) -> String {
        format!("{}.decisions.{agent}", self.prefix)
    }

    /// `baton.decisions.>`.
    #[must_use]
    pub fn all_decisions(&self) -> String {
        format!("{}.decisions.>", self.prefix)
    }

    /// `BATON_DECISIONS`: the stream of gated rollouts' decisions.
    #[must_use]
    pub fn decisions_stream(&self) -> String {
        format!("{}_DECISIONS", self.stream_prefix)
    }

    /// `BATON_OUTCOMES`: the stream of outcome records.
    #[must_use]
    pub fn outcomes_stream(&self) -> String {
        format!("{}_OUTCOMES", self.stream_prefix)
    }

    /// `BATON_TASKS`: the work-queue stream of ingress and agent subjects.
    #[must_use]
    pub fn tasks_stream(&self) -> String {
        format!("{}_TASKS", self.stream_prefix)
    }

    /// `BATON_EVENTS`: the events stream.
    #[must_use]
    pub fn events_stream(&self) -> String {
        format!("{}_EVENTS", self.stream_prefix)
    }

    /// `BATON_DLQ`: the dead-letter stream.
    #[must_use]
    pub fn dlq_stream(&self) -> String {
        format!("{}_DLQ", self.stream_prefix)
    }

    /// `BATON_INBOX`: the key-value bucket where tasks wait for a person.
    #[must_use]
    pub fn inbox_bucket(&self) -> String {
        format!("{}_INBOX", self.stream_prefix)
    }

    /// `BATON_CLAIMS`: the object store bucket of the claim-check.
    #[must_use]
    pub fn claims_bucket(&self) -> String {
        format!("{}_CLAIMS", self.stream_prefix)
    }

    /// `BATON_CONVERSATIONS`: the key-value bucket of conversations' records.
    #[must_use]
    pub fn conversations_bucket(&self) -> String {
        format!("{}_CONVERSATIONS", self.stream_prefix)
    }

    /// `BATON_TRANSCRIPTS`: the key-value bucket of conversations'
    /// transcripts, apart from their records (workers read transcripts, and
    /// only them).
    #[must_use]
    pub fn transcripts_bucket(&self) -> String {
        format!("{}_TRANSCRIPTS", self.stream_prefix)
    }

    /// `BATON_JOINS`: the key-value bucket of delegations waiting for their children.
    #[must_use]
    pub fn joins_bucket(&self) -> String {
        format!("{}_JOINS", self.stream_prefix)
    }

    /// `BATON_JOURNAL`: the key-value bucket of hop journals (what an LLM
    /// agent's model calls and tool calls returned within one hop).
    #[must_use]
    pub fn journal_bucket(&self) -> String {
        format!("{}_JOURNAL", self.stream_prefix)
    }

    /// `BATON_LIMITS`: the key-value bucket of shared model rate limits, one
    /// entry per model endpoint and model.
    #[must_use]
    pub fn limits_bucket(&self) -> String {
        format!("{}_LIMITS", self.stream_prefix)
    }

    /// `BATON_FOLLOWERS`: the key-value bucket of who follows live events,
    /// one short-lived key per follower (`all.<id>` or `<session>.<id>`).
    #[must_use]
    pub fn followers_bucket(&self) -> String {
        format!("{}_FOLLOWERS", self.stream_prefix)
    }

    /// `BATON_CANCELLED`: the key-value bucket of cancelled sessions.
    #[must_use]
    pub fn cancelled_bucket(&self) -> String {
        format!("{}_CANCELLED", self.stream_prefix)
    }

    /// `BATON_A2A`: the key-value bucket of the sessions `baton a2a serve`
    /// started, with their A2A context ids.
    #[must_use]
    pub fn a2a_bucket(&self) -> String {
        format!("{}_A2A", self.stream_prefix)
    }

    /// `BATON_MCP_AUTH`: OAuth sign-ins to MCP servers (`baton mcp
    /// login`), a key per server.
    #[must_use]
    pub fn mcp_auth_bucket(&self) -> String {
        format!("{}_MCP_AUTH", self.stream_prefix)
    }

    /// `BATON_ROLLOUTS`: each agent type's versions and how new work is
    /// shared between them, a key per agent type.
    #[must_use]
    pub fn rollouts_bucket(&self) -> String {
        format!("{}_ROLLOUTS", self.stream_prefix)
    }

    /// The router's durable consumer of deadline timers.
    pub const DEADLINES_CONSUMER: &'static str = "deadlines";

    /// `agent-<agent>`: the durable consumer every replica of an agent type shares.
    #[must_use]
    pub fn agent_consumer(agent: &AgentName) -> String {
        format!("agent-{agent}")
    }

    /// `agent-<A>@<V>`: the durable consumer of version `version` of agent
    /// type `agent`, shared by that version's workers.
    #[must_use]
    pub fn version_consumer(agent: &AgentName, version: &Version) -> String {
        format!("agent-{agent}@{version}")
    }

    /// `ingress`: the ingress router's durable consumer.
    pub const INGRESS_CONSUMER: &'static str = "ingress";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_names_follow_the_rule() {
        for good in ["a", "0", "order_management", "x-1", &"a".repeat(64)] {
            assert!(AgentName::new(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "_a",
            "-a",
            "A",
            "a.b",
            "a b",
            "a>",
            "a*",
            &"a".repeat(65),
            "é",
        ] {
            let err = AgentName::new(bad).unwrap_err();
            assert!(err.to_string().contains("a-z, 0-9"), "{err}");
        }
    }

    #[test]
    fn subjects_under_a_custom_prefix() {
        let subjects = Subjects::new("acme-prod").unwrap();
        let agent = AgentName::new("refund").unwrap();
        let session = Uuid::nil();
        assert_eq!(subjects.ingress(), "acme-prod.ingress");
        assert_eq!(subjects.agent(&agent), "acme-prod.agent.refund");
        assert_eq!(
            subjects.events(session),
            format!("acme-prod.events.{session}")
        );
        assert_eq!(subjects.dlq(&agent), "acme-prod.dlq.refund");
        assert_eq!(
            subjects.heartbeat(&agent, "i1"),
            "acme-prod.registry.heartbeat.refund.i1"
        );
        assert_eq!(subjects.lookup(), "acme-prod.registry.lookup");
        assert_eq!(subjects.tasks_stream(), "ACME_PROD_TASKS");
        assert_eq!(Subjects::agent_consumer(&agent), "agent-refund");
        assert!(Subjects::new("a.b").is_err());
    }
}
