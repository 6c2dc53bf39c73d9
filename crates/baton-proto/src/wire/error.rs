//! The wire crate's one error: a payload that could not be read or
//! written, a claim-check that could not be applied, or a name that breaks
//! the naming rule. A kind to branch on, a message for people, and the
//! cause (an encoder's) as its `source()`.

use crate::DeadLetterReason;

/// What failed, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Not a decodable payload of its type.
    Malformed,
    /// A protocol version this reader does not know.
    UnsupportedVersion,
    /// Larger than the size limit.
    TooLarge,
    /// A value that could not be encoded.
    Encode,
    /// A claim-check that could not be applied or made.
    Claim,
    /// A name (an agent type, a version, a subject prefix) that breaks the
    /// naming rule; the message says the rule.
    Name,
}

/// An error of the wire: see [`ErrorKind`].
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    detail: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
            source: None,
        }
    }

    pub(crate) fn with_source(
        kind: ErrorKind,
        detail: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            kind,
            detail: detail.into(),
            source: Some(Box::new(source)),
        }
    }

    /// What failed.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// What went wrong, for people (without the kind's prefix).
    #[must_use]
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The dead-letter reason that matches a payload that could not be
    /// read: `malformed` for every kind but a version and a size.
    #[must_use]
    pub fn reason(&self) -> DeadLetterReason {
        match self.kind {
            ErrorKind::UnsupportedVersion => DeadLetterReason::UnsupportedVersion,
            ErrorKind::TooLarge => DeadLetterReason::TooLarge,
            _ => DeadLetterReason::Malformed,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            ErrorKind::Malformed | ErrorKind::UnsupportedVersion | ErrorKind::TooLarge => {
                write!(f, "{}: {}", self.reason(), self.detail)
            }
            ErrorKind::Encode => write!(f, "cannot encode payload as msgpack: {}", self.detail),
            ErrorKind::Claim => write!(f, "claim-check: {}", self.detail),
            ErrorKind::Name => f.write_str(&self.detail),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn std::error::Error + 'static))
    }
}

impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.detail == other.detail
    }
}

impl From<rmp_serde::encode::Error> for Error {
    fn from(err: rmp_serde::encode::Error) -> Self {
        Self::with_source(ErrorKind::Encode, err.to_string(), err)
    }
}
