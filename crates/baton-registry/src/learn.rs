//! What the registry learns from outcomes: for each kind of work and agent
//! type, how often the sessions it was part of were resolved, with the
//! sessions' questions for similarity; and each agent type's notebook.
//!
//! Every registry replica reads the whole `BATON_OUTCOMES` stream, so each
//! learns the same; a restarted replica reads it again.

use std::collections::{BTreeSet, HashMap, VecDeque};

use baton_proto::{
    AgentName, Collaborator, Learned, Notebook, Outcome, OutcomeHop, OutcomeKind, Similar,
    similarity,
};
use uuid::Uuid;

use crate::tally::Tally;

/// How the registry learns; see `baton registry --help`.
#[derive(Debug, Clone, PartialEq)]
pub struct LearningConfig {
    /// Whether lookups use what was learned (outcomes and notebooks are
    /// kept either way).
    pub enabled: bool,
    /// How many of an agent type's most recent sessions of a kind of work
    /// its estimate is made of: smaller forgets faster, so the registry
    /// notices sooner when an agent type gets worse.
    pub window: usize,
    /// How many similar past sessions vote.
    pub neighbours: usize,
    /// How alike a past question must be to vote, 0 to 1.
    pub min_similarity: f64,
    /// How many sessions a perfectly similar past session counts as.
    pub vote_weight: f64,
}

impl Default for LearningConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            window: 30,
            neighbours: 5,
            min_similarity: 0.3,
            vote_weight: 3.0,
        }
    }
}

/// Sessions remembered (the oldest are forgotten first).
const SESSIONS_KEPT: usize = 50_000;
/// Past sessions of one kind of work compared with a new question.
const RECENT_PER_KEY: usize = 500;

/// One session as the outcomes tell it.
#[derive(Debug, Clone, Default)]
struct Session {
    path: Vec<OutcomeHop>,
    features: Vec<u32>,
    status: Option<OutcomeKind>,
    escalated: bool,
    reopened: bool,
    feedback: Option<f64>,
    duration_ms: u64,
    cost_micros: u64,
    at: u64,
    /// The notebook entries this session is counted in, and as what.
    credited: Vec<(AgentName, AgentName)>,
    tally: Tally,
}

impl Session {
    /// How well the session went, 0 to 1: the feedback score when someone
    /// gave one, else 1 when it completed without going to a person (0
    /// otherwise); then up to 10 % less for taking long or costing much.
    fn reward(&self) -> f64 {
        let resolved = self.feedback.unwrap_or(
            if self.status == Some(OutcomeKind::Completed) && !self.escalated {
                1.0
            } else {
                0.0
            },
        );
        let fast = 1.0 / (1.0 + self.duration_ms as f64 / 60_000.0);
        let cheap = 1.0 / (1.0 + self.cost_micros as f64 / 1_000_000.0);
        resolved * (0.9 + 0.05 * fast + 0.05 * cheap)
    }

    /// The session counted as one, for the notebook.
    fn tally(&self, reward: f64) -> Tally {
        let completed = self.status == Some(OutcomeKind::Completed);
        Tally {
            sessions: 1,
            resolved: u64::from(baton_proto::succeeded(
                completed,
                (self.escalated, true),
                self.feedback,
            )),
            escalated: u64::from(self.escalated),
            failed: u64::from(self.status == Some(OutcomeKind::Failed)),
            reopened: u64::from(self.reopened),
            reward,
            duration_ms: self.duration_ms,
            cost_micros: self.cost_micros,
            feedback: u64::from(self.feedback.is_some()),
            feedback_sum: self.feedback.unwrap_or(0.0),
            last_at: self.at,
        }
    }

    fn agents(&self) -> BTreeSet<&AgentName> {
        self.path.iter().map(|hop| &hop.agent).collect()
    }
}

/// Rewards of an agent type's most recent sessions of one kind of work.
#[derive(Debug, Clone, Default)]
struct Arm {
    window: VecDeque<(Uuid, f64)>,
}

impl Arm {
    fn set(&mut self, session: Uuid, reward: f64, window: usize) {
        if let Some(entry) = self.window.iter_mut().find(|(id, _)| *id == session) {
            entry.1 = reward;
            return;
        }
        self.window.push_back((session, reward));
        while self.window.len() > window {
            self.window.pop_front();
        }
    }
}

/// The kind of work a lookup or a hop is about: its capabilities, then `@`
/// and its domains when it has any.
#[must_use]
pub fn key(requires: &[String], domains: &[String]) -> String {
    let sorted = |items: &[String]| {
        let set: BTreeSet<&str> = items.iter().map(String::as_str).collect();
        set.into_iter().collect::<Vec<_>>().join(",")
    };
    if domains.is_empty() {
        sorted(requires)
    } else {
        format!("{}@{}", sorted(requires), sorted(domains))
    }
}

/// What the registry learned from outcomes.
#[derive(Debug, Default)]
pub struct Learner {
    config: LearningConfig,
    sessions: HashMap<Uuid, Session>,
    order: VecDeque<Uuid>,
    arms: HashMap<(String, AgentName), Arm>,
    recent: HashMap<String, VecDeque<Uuid>>,
    notebook: HashMap<AgentName, HashMap<AgentName, Tally>>,
    totals: HashMap<AgentName, Tally>,
    /// Feedback on sessions whose end is not read yet, by session.
    early: HashMap<Uuid, f64>,
    records: u64,
}

/// Feedback kept for sessions whose end is not read yet.
const EARLY_KEPT: usize = 10_000;

impl Learner {
    /// An empty learner.
    #[must_use]
    pub fn new(config: LearningConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// How it learns.
    #[must_use]
    pub fn config(&self) -> &LearningConfig {
        &self.config
    }

    /// Outcome records read so far.
    #[must_use]
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Whether `session` has an outcome.
    #[must_use]
    pub fn knows_session(&self, session: Uuid) -> bool {
        self.sessions.contains_key(&session)
    }

    /// The agents a session's outcome is credited to.
    #[must_use]
    pub fn credited(&self, session: Uuid) -> Vec<AgentName> {
        self.sessions
            .get(&session)
            .map_or_else(Vec::new, |s| s.agents().into_iter().cloned().collect())
    }

    /// Whether any outcome named `agent`.
    #[must_use]
    pub fn knows_agent(&self, agent: &str) -> bool {
        self.totals.contains_key(agent)
    }

    /// How many of `agent`'s recent sessions of work `key` its estimate holds.
    #[must_use]
    pub fn observations(&self, key: &str, agent: &AgentName) -> u32 {
        self.arms
            .get(&(key.to_owned(), agent.clone()))
            .map_or(0, |arm| u32::try_from(arm.window.len()).unwrap_or(u32::MAX))
    }

    /// Takes one outcome record into account. Feedback on a session it
    /// has no outcome of is ignored (the registry refuses such feedback).
    pub fn apply(&mut self, outcome: &Outcome) {
        self.records += 1;
        let id = outcome.session;
        if !self.sessions.contains_key(&id) {
            match outcome.kind {
                // The registry checked that the session ended; its end
                // may be stored after the feedback.
                OutcomeKind::Feedback => {
                    if let Some(score) = outcome.score.filter(|s| (0.0..=1.0).contains(s)) {
                        if self.early.len() >= EARLY_KEPT {
                            self.early.clear();
                        }
                        self.early.insert(id, score);
                    }
                    return;
                }
                OutcomeKind::Reopened => return,
                _ => self.remember(id),
            }
        }
        let Some(session) = self.sessions.get_mut(&id) else {
            return;
        };
        match &outcome.kind {
            OutcomeKind::Feedback => {
                session.feedback = outcome.score.filter(|s| (0.0..=1.0).contains(s));
            }
            OutcomeKind::Reopened => {
                session.reopened = true;
                session.status = Some(OutcomeKind::Reopened);
            }
            kind => {
                if outcome.path.len() >= session.path.len() {
                    session.path.clone_from(&outcome.path);
                }
                if session.features.is_empty() {
                    session.features.clone_from(&outcome.features);
                }
                session.escalated |= *kind == OutcomeKind::Escalated;
                session.status = Some(kind.clone());
                session.duration_ms = outcome.duration_ms.unwrap_or(session.duration_ms);
                session.cost_micros = outcome.cost_micros.unwrap_or(session.cost_micros);
            }
        }
        session.at = session.at.max(outcome.at);
        self.credit(id);
    }

    fn remember(&mut self, id: Uuid) {
        let session = Session {
            feedback: self.early.remove(&id),
            ..Session::default()
        };
        self.sessions.insert(id, session);
        self.order.push_back(id);
        while self.order.len() > SESSIONS_KEPT {
            if let Some(old) = self.order.pop_front() {
                // Its notebook entries and estimates stay; only the detail goes.
                self.sessions.remove(&old);
            }
        }
    }

    /// Credits session `id`'s current reward to its agents, replacing what
    /// it was credited before.
    fn credit(&mut self, id: Uuid) {
        let Some(session) = self.sessions.get_mut(&id) else {
            return;
        };
        let reward = session.reward();
        let window = self.config.window;
        let mut keys = BTreeSet::new();
        for hop in &session.path {
            let key = key(&hop.requires, &hop.domains);
            let arm = self
                .arms
                .entry((key.clone(), hop.agent.clone()))
                .or_default();
            arm.set(id, reward, window);
            keys.insert(key);
        }
        if !session.features.is_empty() {
            for key in keys {
                let recent = self.recent.entry(key).or_default();
                if !recent.contains(&id) {
                    recent.push_back(id);
                    if recent.len() > RECENT_PER_KEY {
                        recent.pop_front();
                    }
                }
            }
        }
        // The notebook: take back what the session counted as, count it anew.
        for (agent, other) in std::mem::take(&mut session.credited) {
            let old = &session.tally;
            if let Some(entry) = self
                .notebook
                .get_mut(&agent)
                .and_then(|n| n.get_mut(&other))
            {
                entry.remove(old);
            }
            if agent == other {
                self.totals.entry(agent).or_default().remove(old);
            }
        }
        session.tally = session.tally(reward);
        let agents: Vec<AgentName> = session.agents().into_iter().cloned().collect();
        for agent in &agents {
            for other in &agents {
                if agent == other {
                    self.totals
                        .entry(agent.clone())
                        .or_default()
                        .add(&session.tally);
                } else {
                    let book = self.notebook.entry(agent.clone()).or_default();
                    book.entry(other.clone()).or_default().add(&session.tally);
                }
                session.credited.push((agent.clone(), other.clone()));
            }
        }
    }

    /// `agent`'s notebook: its collaborators, best first.
    #[must_use]
    pub fn notebook(&self, agent: &AgentName) -> Notebook {
        let mut collaborators: Vec<Collaborator> = self
            .notebook
            .get(agent)
            .into_iter()
            .flatten()
            .filter(|(_, tally)| tally.sessions > 0)
            .map(|(other, tally)| tally.collaborator(other))
            .collect();
        collaborators.sort_by(|a, b| {
            b.reward
                .total_cmp(&a.reward)
                .then(b.sessions.cmp(&a.sessions))
                .then_with(|| a.agent.cmp(&b.agent))
        });
        Notebook {
            agent: agent.clone(),
            sessions: self.totals.get(agent).map_or(0, |t| t.sessions),
            collaborators,
            extra: baton_proto::Map::new(),
        }
    }

    /// What `prefer`'s notebook says of `agent`, if they worked together.
    #[must_use]
    pub fn collaborator(&self, prefer: &str, agent: &AgentName) -> Option<Collaborator> {
        let tally = self.notebook.get(prefer)?.get(agent)?;
        (tally.sessions > 0).then(|| tally.collaborator(agent))
    }

    /// The learned estimate for `agent` on work `key`, with the votes of
    /// those of `neighbours` (see [`Learner::neighbours`]) it was part of,
    /// and a draw from it.
    pub fn estimate(
        &self,
        key: &str,
        agent: &AgentName,
        neighbours: &[Similar],
        rng: &mut impl rand::Rng,
    ) -> (Learned, Vec<Similar>) {
        let arm = self.arms.get(&(key.to_owned(), agent.clone()));
        let rewards = arm.into_iter().flat_map(|arm| arm.window.iter());
        let (mut alpha, mut beta, mut observations) = (1.0, 1.0, 0u32);
        for (_, reward) in rewards {
            alpha += reward;
            beta += 1.0 - reward;
            observations += 1;
        }
        let similar: Vec<Similar> = neighbours
            .iter()
            .filter(|one| {
                self.sessions
                    .get(&one.session)
                    .is_some_and(|session| session.path.iter().any(|hop| hop.agent == *agent))
            })
            .cloned()
            .collect();
        let mut votes = 0.0;
        for one in &similar {
            let weight = self.config.vote_weight * one.weight;
            alpha += weight * one.reward;
            beta += weight * (1.0 - one.reward);
            votes += weight;
        }
        let total = alpha + beta;
        let sample =
            rand_distr::Beta::new(alpha, beta).map_or(alpha / total, |beta| rng.sample(beta));
        let learned = Learned {
            key: key.to_owned(),
            observations,
            mean: alpha / total,
            sd: (alpha * beta / (total * total * (total + 1.0))).sqrt(),
            votes,
            sample,
        };
        (learned, similar)
    }

    /// The past sessions of work `key` most like `features`, strongest
    /// vote first; found once per lookup, each candidate's estimate takes
    /// those it was part of. A vote's weight is its similarity, halved for
    /// every `window` newer sessions of the same work, so that what an
    /// agent type did long ago fades as it does in its estimate.
    #[must_use]
    pub fn neighbours(&self, key: &str, features: &[u32]) -> Vec<Similar> {
        if features.is_empty() || self.config.neighbours == 0 {
            return Vec::new();
        }
        let Some(recent) = self.recent.get(key) else {
            return Vec::new();
        };
        let half_life = self.config.window.max(1) as f64;
        let mut alike: Vec<Similar> = recent
            .iter()
            .rev()
            .enumerate()
            .filter_map(|(age, id)| {
                let session = self.sessions.get(id)?;
                let similarity = similarity(features, &session.features);
                (similarity >= self.config.min_similarity).then(|| Similar {
                    session: *id,
                    similarity,
                    weight: similarity * 0.5_f64.powf(age as f64 / half_life),
                    reward: session.reward(),
                })
            })
            .collect();
        alike.sort_by(|a, b| b.weight.total_cmp(&a.weight));
        alike.truncate(self.config.neighbours);
        alike
    }
}

#[cfg(test)]
#[path = "learn_tests.rs"]
mod tests;
