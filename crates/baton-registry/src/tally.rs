//! Sums over sessions, for a notebook entry: one session counted as
//! a tally, which can be added and taken back when the session's outcome
//! changes (feedback, a reopening, a later end).

use baton_proto::Collaborator;

/// Sessions summed up.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Tally {
    pub(crate) sessions: u64,
    pub(crate) resolved: u64,
    pub(crate) escalated: u64,
    pub(crate) failed: u64,
    pub(crate) reopened: u64,
    pub(crate) reward: f64,
    pub(crate) duration_ms: u64,
    pub(crate) cost_micros: u64,
    pub(crate) feedback: u64,
    pub(crate) feedback_sum: f64,
    pub(crate) last_at: u64,
}

impl Tally {
    pub(crate) fn add(&mut self, one: &Self) {
        self.sessions += one.sessions;
        self.resolved += one.resolved;
        self.escalated += one.escalated;
        self.failed += one.failed;
        self.reopened += one.reopened;
        self.reward += one.reward;
        self.duration_ms += one.duration_ms;
        self.cost_micros += one.cost_micros;
        self.feedback += one.feedback;
        self.feedback_sum += one.feedback_sum;
        self.last_at = self.last_at.max(one.last_at);
    }

    /// Takes back `one`, added before (the latest time stays).
    pub(crate) fn remove(&mut self, one: &Self) {
        self.sessions = self.sessions.saturating_sub(one.sessions);
        self.resolved = self.resolved.saturating_sub(one.resolved);
        self.escalated = self.escalated.saturating_sub(one.escalated);
        self.failed = self.failed.saturating_sub(one.failed);
        self.reopened = self.reopened.saturating_sub(one.reopened);
        self.reward = (self.reward - one.reward).max(0.0);
        self.duration_ms = self.duration_ms.saturating_sub(one.duration_ms);
        self.cost_micros = self.cost_micros.saturating_sub(one.cost_micros);
        self.feedback = self.feedback.saturating_sub(one.feedback);
        self.feedback_sum = (self.feedback_sum - one.feedback_sum).max(0.0);
    }

    /// As a notebook entry about `agent`.
    pub(crate) fn collaborator(&self, agent: &baton_proto::AgentName) -> Collaborator {
        let n = self.sessions.max(1);
        Collaborator {
            agent: agent.clone(),
            sessions: self.sessions,
            resolved: self.resolved,
            escalated: self.escalated,
            failed: self.failed,
            reopened: self.reopened,
            reward: self.reward / n as f64,
            mean_duration_ms: self.duration_ms / n,
            cost_micros: self.cost_micros,
            feedback: self.feedback,
            feedback_score: (self.feedback > 0).then(|| self.feedback_sum / self.feedback as f64),
            last_at: self.last_at,
        }
    }
}
