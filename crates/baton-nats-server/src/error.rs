//! The crate's error type.

use std::fmt;

/// What went wrong while finding or starting a server.
///
/// The message is meant for people: it names the problem and the fix.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

/// The category of an [`Error`], for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// No `nats-server` binary was found.
    NotFound,
    /// The `nats-server` binary is older than [`crate::MIN_VERSION`].
    TooOld,
    /// The server exited or did not report its port in time.
    Startup,
    /// A file system or process operation failed.
    Io,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }

    pub(crate) fn io(context: impl fmt::Display, err: std::io::Error) -> Self {
        Error::new(ErrorKind::Io, format!("{context}: {err}"))
    }

    /// The category of this error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::NotFound => "nats-server not found",
            ErrorKind::TooOld => "nats-server too old",
            ErrorKind::Startup => "nats-server failed to start",
            ErrorKind::Io => "I/O error",
        })
    }
}
