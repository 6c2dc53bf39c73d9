//! The runtime's error type: a kind to branch on, and a message that names the fix.

use std::fmt;

/// What failed, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Invalid configuration or input; the message names the fix.
    Config,
    /// A stream or consumer exists with an incompatible configuration.
    Mismatch,
    /// JetStream could not be reached or refused a request.
    JetStream,
    /// A publish was not acknowledged after its retries.
    Publish,
    /// Waiting for something took too long.
    Timeout,
    /// A payload could not be decoded.
    Decode,
    /// A value could not be encoded.
    Encode,
    /// The registry did not answer, or refused a lookup.
    Registry,
    /// No worker serves the agent type a task was sent to.
    NoRoute,
    /// The server refused a publish: this user's permissions do not allow it.
    Forbidden,
    /// No stream takes the subject of a publish.
    NoStream,
    /// A message is over the server's `max_payload`.
    TooLarge,
    /// The server could not be reached or refused the credentials.
    Connect,
}

/// An error of the Baton runtime.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn with_source(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self {
            kind,
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// What failed.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn std::error::Error + 'static))
    }
}

impl From<baton_proto::NameError> for Error {
    fn from(err: baton_proto::NameError) -> Self {
        Self::new(ErrorKind::Config, err.to_string())
    }
}
