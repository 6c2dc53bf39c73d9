//! The ranking: which agent types fit a lookup, best first.

use baton_proto::{Candidate, LookupRequest, Map, Why};

/// One agent type as the registry sees it: its live instances summed up.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSummary {
    /// Agent type.
    pub agent: baton_proto::AgentName,
    /// Tier.
    pub tier: u32,
    /// Capabilities.
    pub capabilities: Vec<String>,
    /// Knowledge domains.
    pub domains: Vec<String>,
    /// Live instances.
    pub instances: u32,
    /// Messages in flight, summed over the instances.
    pub in_flight: u64,
    /// Concurrency limits, summed over the instances.
    pub capacity: u64,
    /// Messages waiting in the consumer, not yet delivered to any instance.
    pub pending: u64,
    /// Messages delivered and not yet acknowledged.
    pub ack_pending: u64,
    /// Messages handled, summed over the instances.
    pub processed: u64,
    /// Messages that failed, summed over the instances.
    pub failed: u64,
    /// What the agent type does (the newest heartbeat's description).
    pub description: Option<String>,
    /// The JSON Schema of its arguments as an MCP tool (the newest
    /// heartbeat's `tool_schema`).
    pub tool_schema: Option<String>,
    /// The versions its live instances run, with how many run each, by
    /// version (instances that name none are not counted).
    pub versions: std::collections::BTreeMap<baton_proto::Version, u32>,
}

/// Weight of capability and domain fit in the score.
const W_FIT: f64 = 0.35;
/// Weight of tier fit.
const W_TIER: f64 = 0.15;
/// Weight of free capacity.
const W_FREE: f64 = 0.35;
/// Weight of the success ratio.
const W_SUCCESS: f64 = 0.15;

impl AgentSummary {
    /// `agent` with nothing counted yet: no instance, no capability.
    #[must_use]
    pub fn new(agent: baton_proto::AgentName) -> Self {
        Self {
            agent,
            tier: 0,
            capabilities: Vec::new(),
            domains: Vec::new(),
            instances: 0,
            in_flight: 0,
            capacity: 0,
            pending: 0,
            ack_pending: 0,
            processed: 0,
            failed: 0,
            description: None,
            tool_schema: None,
            versions: std::collections::BTreeMap::new(),
        }
    }

    /// Whether this agent type may take work described by `request`.
    #[must_use]
    pub fn fits(&self, request: &LookupRequest) -> bool {
        self.instances > 0
            && !request.exclude.contains(&self.agent)
            && request.min_tier.is_none_or(|min| self.tier >= min)
            && request
                .requires
                .iter()
                .all(|need| self.capabilities.contains(need))
            && (request.domains.is_empty()
                || request
                    .domains
                    .iter()
                    .any(|domain| self.domains.contains(domain)))
    }

    /// Load: 0 idle, 1 at capacity, above 1 with work waiting.
    ///
    /// `(in_flight + pending) / capacity`, which is in-flight work against
    /// capacity plus the consumer's waiting backlog per unit of capacity.
    #[must_use]
    pub fn load(&self) -> f64 {
        (self.in_flight + self.pending) as f64 / self.capacity.max(1) as f64
    }

    /// Share of handled messages that did not fail; `None` before any was handled.
    #[must_use]
    pub fn success_ratio(&self) -> Option<f64> {
        (self.processed > 0)
            .then(|| self.processed.saturating_sub(self.failed) as f64 / self.processed as f64)
    }

    /// The score for `request` (higher is better), from four factors in 0..=1:
    ///
    /// - **fit** = (capability fit + domain fit) / 2, where capability fit =
    ///   (required + 1) / (offered + 1), so a specialist beats a generalist, and
    ///   domain fit = the share of the requested domains the agent covers (1
    ///   when none were requested);
    /// - **tier** = 1 / (1 + tier − floor), floor = `min_tier` or 0: the lowest
    ///   tier that qualifies is preferred, keeping higher tiers free;
    /// - **free** = 1 / (1 + [`load`](Self::load));
    /// - **success** = (handled − failed + 1) / (handled + 1): 1 for an agent with
    ///   no failures (or no history yet), lower as failures accumulate.
    ///
    /// score = 0.35·fit + 0.15·tier + 0.35·free + 0.15·success.
    #[must_use]
    pub fn score(&self, request: &LookupRequest) -> f64 {
        self.why(request).base
    }

    /// The four factors of [`score`](Self::score) and the score itself.
    #[must_use]
    pub fn why(&self, request: &LookupRequest) -> Why {
        let capability_fit = (request.requires.len() + 1) as f64
            / (self.capabilities.len().max(request.requires.len()) + 1) as f64;
        let domain_fit = if request.domains.is_empty() {
            1.0
        } else {
            let covered = request
                .domains
                .iter()
                .filter(|domain| self.domains.contains(domain))
                .count();
            covered as f64 / request.domains.len() as f64
        };
        let fit = f64::midpoint(capability_fit, domain_fit);
        let floor = request.min_tier.unwrap_or(0);
        let tier = 1.0 / f64::from(1 + self.tier.saturating_sub(floor));
        let free = 1.0 / (1.0 + self.load());
        let success =
            (self.processed.saturating_sub(self.failed) + 1) as f64 / (self.processed + 1) as f64;
        Why {
            fit,
            tier,
            free,
            success,
            base: W_FIT * fit + W_TIER * tier + W_FREE * free + W_SUCCESS * success,
            ..Why::default()
        }
    }

    pub(crate) fn candidate(&self, score: f64, why: Why) -> Candidate {
        Candidate {
            agent: self.agent.clone(),
            tier: self.tier,
            capabilities: self.capabilities.clone(),
            domains: self.domains.clone(),
            instances: self.instances,
            load: self.load(),
            score,
            in_flight: Some(self.in_flight),
            capacity: Some(self.capacity),
            backlog: Some(self.pending + self.ack_pending),
            success_ratio: self.success_ratio(),
            description: self.description.clone(),
            tool_schema: self.tool_schema.clone(),
            versions: self.versions.clone(),
            why: Some(why),
            extra: Map::new(),
        }
    }
}

/// The agent types that fit `request`, best first.
///
/// An agent type fits when it has a live instance, every required capability,
/// at least one requested domain (when any are requested), a tier of at least
/// `min_tier`, and is not in `exclude`. Fitting types are ordered by
/// [`AgentSummary::score`], highest first; equal scores are ordered by name, so
/// the same table and request always give the same answer.
///
/// # Examples
///
/// ```
/// use baton_proto::{AgentName, LookupRequest};
/// use baton_registry::{AgentSummary, rank};
///
/// let refund = AgentSummary {
///     tier: 2,
///     capabilities: vec!["refunds".into()],
///     instances: 1,
///     capacity: 8,
///     ..AgentSummary::new(AgentName::from_static("refund"))
/// };
/// let request = LookupRequest { requires: vec!["refunds".into()], ..LookupRequest::default() };
/// let ranked = rank([&refund], &request);
/// assert_eq!(ranked[0].agent, "refund");
/// ```
#[must_use]
pub fn rank<'a>(
    agents: impl IntoIterator<Item = &'a AgentSummary>,
    request: &LookupRequest,
) -> Vec<Candidate> {
    let scored = agents
        .into_iter()
        .filter(|agent| agent.fits(request))
        .map(|agent| {
            let why = agent.why(request);
            (why.base, why, agent)
        })
        .collect();
    best_first(scored)
}

/// Candidates from scored agent types, highest score first, then by name.
pub(crate) fn best_first(mut scored: Vec<(f64, Why, &AgentSummary)>) -> Vec<Candidate> {
    scored.sort_by(|(a_score, _, a), (b_score, _, b)| {
        b_score
            .total_cmp(a_score)
            .then_with(|| a.agent.cmp(&b.agent))
    });
    scored
        .into_iter()
        .map(|(score, why, agent)| agent.candidate(score, why))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(name: &str) -> AgentSummary {
        AgentSummary {
            agent: baton_proto::AgentName::unchecked(name),
            tier: 1,
            capabilities: vec!["orders".into()],
            domains: vec!["retail".into()],
            instances: 1,
            capacity: 8,
            ..AgentSummary::new(baton_proto::AgentName::from_static("unnamed"))
        }
    }

    fn wants(capabilities: &[&str]) -> LookupRequest {
        LookupRequest {
            requires: capabilities.iter().map(|c| (*c).to_owned()).collect(),
            ..LookupRequest::default()
        }
    }

    fn winner(agents: &[AgentSummary], request: &LookupRequest) -> String {
        rank(agents, request)
            .first()
            .map(|c| c.agent.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn equal_agents_tie_break_by_name_whatever_the_input_order() {
        let (a, b) = (agent("alpha"), agent("beta"));
        let request = wants(&["orders"]);
        assert_eq!(winner(&[a.clone(), b.clone()], &request), "alpha");
        assert_eq!(winner(&[b, a], &request), "alpha");
    }

    #[test]
    fn capability_fit_alone_changes_the_winner() {
        // alpha would win the tie; a wider, less specialised skill set makes it lose.
        let mut alpha = agent("alpha");
        alpha.capabilities.push("refunds".into());
        let beta = agent("beta");
        assert_eq!(winner(&[alpha, beta], &wants(&["orders"])), "beta");
    }

    #[test]
    fn domain_fit_alone_changes_the_winner() {
        let mut alpha = agent("alpha");
        alpha.domains = vec!["retail".into()];
        let mut beta = agent("beta");
        beta.domains = vec!["retail".into(), "wholesale".into()];
        let request = LookupRequest {
            domains: vec!["retail".into(), "wholesale".into()],
            ..wants(&["orders"])
        };
        assert_eq!(winner(&[alpha, beta], &request), "beta");
    }

    #[test]
    fn tier_alone_changes_the_winner() {
        let mut alpha = agent("alpha");
        alpha.tier = 3;
        let mut beta = agent("beta");
        beta.tier = 2;
        let request = LookupRequest {
            min_tier: Some(2),
            ..wants(&["orders"])
        };
        assert_eq!(winner(&[alpha, beta], &request), "beta");
    }

    #[test]
    fn load_alone_changes_the_winner() {
        let mut alpha = agent("alpha");
        alpha.in_flight = 6;
        let beta = agent("beta");
        assert_eq!(winner(&[alpha, beta], &wants(&["orders"])), "beta");
    }

    #[test]
    fn backlog_alone_changes_the_winner() {
        let mut alpha = agent("alpha");
        alpha.pending = 20;
        let beta = agent("beta");
        let ranked = rank(&[alpha, beta], &wants(&["orders"]));
        assert_eq!(ranked[0].agent, "beta");
        assert_eq!(ranked[1].backlog, Some(20));
        assert!((ranked[1].load - 2.5).abs() < 1e-9, "{}", ranked[1].load);
    }

    #[test]
    fn more_instances_mean_less_load() {
        // The same in-flight work over twice the capacity.
        let mut alpha = agent("alpha");
        alpha.in_flight = 8;
        let mut beta = agent("beta");
        beta.in_flight = 8;
        beta.instances = 2;
        beta.capacity = 16;
        assert_eq!(winner(&[alpha, beta], &wants(&["orders"])), "beta");
    }

    #[test]
    fn success_ratio_alone_changes_the_winner() {
        let mut alpha = agent("alpha");
        alpha.processed = 100;
        alpha.failed = 30;
        let mut beta = agent("beta");
        beta.processed = 100;
        let ranked = rank(&[alpha, beta], &wants(&["orders"]));
        assert_eq!(ranked[0].agent, "beta");
        assert_eq!(ranked[1].success_ratio, Some(0.7));
    }

    #[test]
    fn filters_capabilities_domains_tier_exclusion_and_dead_types() {
        let base = agent("base");
        let mut dead = agent("dead");
        dead.instances = 0;
        let mut expert = agent("expert");
        expert.tier = 3;
        expert.capabilities.push("refunds".into());
        let all = [base, dead, expert];

        assert_eq!(
            names(&rank(&all, &wants(&["orders"]))),
            ["base", "expert"],
            "a type with no live instance never fits"
        );
        assert_eq!(
            names(&rank(&all, &wants(&["orders", "refunds"]))),
            ["expert"]
        );
        assert!(rank(&all, &wants(&["teleport"])).is_empty());
        let request = LookupRequest {
            min_tier: Some(2),
            ..wants(&[])
        };
        assert_eq!(names(&rank(&all, &request)), ["expert"]);
        let request = LookupRequest {
            exclude: vec![baton_proto::AgentName::from_static("base")],
            ..wants(&["orders"])
        };
        assert_eq!(names(&rank(&all, &request)), ["expert"]);
        let request = LookupRequest {
            domains: vec!["space".into()],
            ..wants(&[])
        };
        assert!(rank(&all, &request).is_empty());
    }

    fn names(candidates: &[Candidate]) -> Vec<&str> {
        candidates.iter().map(|c| c.agent.as_str()).collect()
    }
}
