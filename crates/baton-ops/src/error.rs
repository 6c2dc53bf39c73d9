/// What can go wrong in this crate's operations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request itself is wrong; the message says how to ask.
    #[error("{0}")]
    Usage(String),
    /// A deployment could not be read; the message names what and why.
    #[error("{0}")]
    Read(String),
    /// A spec file cannot be turned into manifests.
    #[error("{0}")]
    Spec(String),
}
