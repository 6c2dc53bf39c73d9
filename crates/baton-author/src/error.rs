//! Why something the authoring API does failed. An agent's own failure is
//! not one of these: it is an [`AgentError`](crate::AgentError), the answer
//! that says what becomes of the task.

/// What failed, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A context condition's expression is not valid CEL; the message
    /// quotes it and says the parser's complaint.
    Condition,
    /// A registry lookup brought no answer: the source is the error of the
    /// [`Lookups`](crate::Lookups) in use (for `baton_client::RegistryClient`,
    /// a `baton_nats::Error` with its own kind), shown as it is.
    Lookup,
}

baton_proto::error_type! {
    /// Why something the authoring API does failed: a kind, a message and
    /// the cause.
    pub struct Error(ErrorKind);
}

impl Error {
    /// A lookup failed with `err`: see [`ErrorKind::Lookup`]. A text
    /// becomes one too.
    pub fn lookup(err: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::transparent(ErrorKind::Lookup, err)
    }
}
