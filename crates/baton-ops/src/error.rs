//! The crate's error type.

/// What went wrong, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request itself is wrong; the message says how to ask.
    Usage,
    /// A deployment could not be read; the message names what and why.
    Read,
    /// A spec file cannot be turned into manifests.
    Spec,
}

baton_proto::error_type! {
    /// What can go wrong in this crate's operations: a kind, a message
    /// that names the fix, and the cause.
    pub struct Error(ErrorKind);
}
