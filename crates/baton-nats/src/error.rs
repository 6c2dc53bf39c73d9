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
///
/// Its message ends with its cause, so every log line that shows the error
/// shows why; the cause is therefore not also returned by
/// [`source`](std::error::Error::source), and a reporter that walks the
/// chain prints it once.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl Error {
    /// An error of `kind` saying `message`, for the runtime's crates.
    #[doc(hidden)]
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// An error of `kind` saying `message`, caused by `source`, for the
    /// runtime's crates.
    #[doc(hidden)]
    pub fn with_source(
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

/// The cause is in the message (see [`Error`]), so `source()` is `None`.
impl std::error::Error for Error {}

/// `err` and its causes as one line, each said once: for an error kept as
/// text (an event's detail, an agent's error, a log field), so that the
/// cause a library keeps apart (reqwest's, say) is not lost.
#[must_use]
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(next) = cause {
        let said = next.to_string();
        // Many errors show their cause in their own message too.
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = next.source();
    }
    text
}

impl From<baton_proto::Error> for Error {
    fn from(err: baton_proto::Error) -> Self {
        Self::new(ErrorKind::Config, err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_is_said_once_in_the_message_and_not_again_as_a_source() {
        let cause = std::io::Error::other("connection refused");
        let err = Error::with_source(ErrorKind::JetStream, "cannot read a join", cause);
        assert_eq!(err.to_string(), "cannot read a join: connection refused");
        assert!(std::error::Error::source(&err).is_none());
        // A reporter that walks the chain says the cause once.
        let chain = anyhow::Error::new(err).context("the worker stopped");
        let said: Vec<String> = chain.chain().map(ToString::to_string).collect();
        assert_eq!(
            said,
            [
                "the worker stopped",
                "cannot read a join: connection refused"
            ]
        );
    }

    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("error sending request")
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_chain_as_text_keeps_the_cause_a_library_keeps_apart() {
        let err = Outer(std::io::Error::other("connection refused"));
        assert_eq!(err.to_string(), "error sending request");
        assert_eq!(
            error_chain(&err),
            "error sending request: connection refused"
        );
        let said_twice = Error::with_source(ErrorKind::Connect, "no server", err);
        assert_eq!(error_chain(&said_twice), "no server: error sending request");
    }
}
