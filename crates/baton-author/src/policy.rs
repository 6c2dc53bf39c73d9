//! What a route carries besides its target: how often the target may be
//! visited and how much of the conversation goes along. Plain data, shared by
//! handoffs, routing rules and delegated children.

/// How much of the conversation a route passes on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ContextPolicy {
    /// Every message (the default).
    #[default]
    Full,
    /// Only the last `n` messages.
    LastN(usize),
    /// No messages.
    None,
}

impl ContextPolicy {
    /// How many of `len` messages this policy keeps.
    #[must_use]
    pub fn keeps(self, len: usize) -> usize {
        match self {
            Self::Full => len,
            Self::LastN(n) => n.min(len),
            Self::None => 0,
        }
    }
}

impl std::fmt::Display for ContextPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Full => f.write_str("full"),
            Self::LastN(n) => write!(f, "last_n {n}"),
            Self::None => f.write_str("none"),
        }
    }
}

/// Options of one route: how often its target may be visited, and how much
/// context it passes on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteOptions {
    /// How many times the target may appear on the session's path, this
    /// visit included. `None` means once: a revisit is a loop. A bounded
    /// cycle (planner ↔ reviewer) declares its budget here.
    pub max_visits: Option<u32>,
    /// How much of the conversation goes along.
    pub context: ContextPolicy,
}
