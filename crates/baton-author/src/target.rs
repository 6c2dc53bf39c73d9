//! Where control goes next: an agent type, a capability set the registry
//! resolves, a higher tier, or the fallback agent.

use baton_proto::{AgentName, LookupRequest};

/// Where control goes next.
///
/// # Examples
///
/// ```
/// use baton_author::{AgentName, Need, Target};
///
/// let refund: Target = AgentName::new("refund").unwrap().into();
/// assert_eq!(refund.label(), "refund");
/// let any: Target = Need::capabilities(["refunds", "billing"]).into();
/// assert_eq!(any.label(), "refunds_billing");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// An agent type, by name.
    Agent(AgentName),
    /// Whichever agent type the registry ranks best for these needs; agents
    /// already on the session's path are excluded.
    Capabilities(Need),
    /// An agent type of a higher tier than this one (the registry is asked for
    /// at least this agent's tier + 1); the fallback when none fits.
    Escalate(Need),
    /// The fallback agent of this worker.
    Fallback,
}

impl Target {
    /// A short name for tools and messages: the agent type, the capabilities
    /// joined by `_`, `escalate` or `fallback`.
    #[must_use]
    pub fn label(&self) -> String {
        match self {
            Self::Agent(agent) => agent.to_string(),
            Self::Capabilities(need) => need.requires.join("_"),
            Self::Escalate(_) => "escalate".to_owned(),
            Self::Fallback => "fallback".to_owned(),
        }
    }
}

impl From<AgentName> for Target {
    fn from(agent: AgentName) -> Self {
        Self::Agent(agent)
    }
}

impl From<Need> for Target {
    fn from(need: Need) -> Self {
        Self::Capabilities(need)
    }
}

/// What the receiving agent must offer: resolved through the registry.
///
/// # Examples
///
/// ```
/// use baton_author::Need;
///
/// let need = Need::capabilities(["refunds"]).in_domains(["billing"]).min_tier(2);
/// assert_eq!(need.requires, ["refunds"]);
/// assert_eq!(need.min_tier, Some(2));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Need {
    /// Capabilities the agent must have, every one.
    pub requires: Vec<String>,
    /// Knowledge domains of which the agent must have at least one (when any are given).
    pub domains: Vec<String>,
    /// Lowest acceptable tier.
    pub min_tier: Option<u32>,
}

impl Need {
    /// An agent with every one of `capabilities`.
    #[must_use]
    pub fn capabilities<I, S>(capabilities: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            requires: capabilities.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Also requires at least one of `domains`.
    #[must_use]
    pub fn in_domains<I, S>(mut self, domains: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.domains = domains.into_iter().map(Into::into).collect();
        self
    }

    /// Also requires a tier of at least `tier`.
    #[must_use]
    pub fn min_tier(mut self, tier: u32) -> Self {
        self.min_tier = Some(tier);
        self
    }

    /// This need, escalated from an agent of tier `tier`: at least one tier higher.
    #[must_use]
    #[doc(hidden)]
    pub fn above(self, tier: u32) -> Self {
        let min_tier = Some(self.min_tier.unwrap_or(0).max(tier + 1));
        Self { min_tier, ..self }
    }

    /// The registry lookup for this need, leaving out the agent types in `exclude`.
    #[doc(hidden)]
    pub fn lookup(self, exclude: Vec<crate::AgentName>) -> LookupRequest {
        LookupRequest {
            requires: self.requires,
            domains: self.domains,
            min_tier: self.min_tier,
            exclude,
            ..LookupRequest::default()
        }
    }
}
