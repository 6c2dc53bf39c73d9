//! The runtime's error type: a kind to branch on, and a message that names the fix.

/// What failed, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Invalid configuration or input; the message names the fix.
    Config,
    /// A conversation's turn runs, and the caller asked for `reject`.
    Busy,
    /// The conversation belongs to another caller.
    NotOwner,
    /// The conversation was deleted (or, to delete, does not exist).
    Deleted,
    /// A transcript cannot be read as stored: an entry is gone, or its
    /// chain does not match. Retrying cannot help.
    Broken,
    /// A stream or consumer exists with an incompatible configuration.
    Mismatch,
    /// JetStream could not be reached, refused a request, or did not
    /// answer as it should. Retrying may help.
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
    /// Nothing waits in the inbox under the id: decided already, or wrong.
    NotWaiting,
    /// The inbox entry waits for another kind of answer: a question
    /// answered as a tool call's decision, or the other way round.
    WrongAnswer,
    /// The session was cancelled or passed its deadline.
    Ended,
    /// The server refused a publish: this user's permissions do not allow it.
    Forbidden,
    /// No stream takes the subject of a publish.
    NoStream,
    /// A message is over the server's `max_payload`.
    TooLarge,
    /// The server could not be reached or refused the credentials.
    Connect,
}

baton_proto::error_type! {
    /// An error of the Baton runtime: a kind to branch on, a message that
    /// names the fix and ends with the cause, and the cause as its
    /// [`source`](std::error::Error::source). [`error_chain`] says each
    /// cause once.
    pub struct Error(ErrorKind);
}

pub use baton_proto::error_chain;

impl From<baton_proto::Error> for Error {
    fn from(err: baton_proto::Error) -> Self {
        Self::new(ErrorKind::Config, err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt;

    #[test]
    fn the_cause_ends_the_message_is_the_source_and_is_said_once() {
        let cause = std::io::Error::other("connection refused");
        let err = Error::with_source(ErrorKind::JetStream, "cannot read a join", cause);
        assert_eq!(err.to_string(), "cannot read a join: connection refused");
        assert_eq!(err.message(), "cannot read a join");
        let source = std::error::Error::source(&err).expect("the cause is the source");
        assert!(source.downcast_ref::<std::io::Error>().is_some());
        // A reporter that walks the chain says the cause once.
        let chain = anyhow::Error::new(err).context("the worker stopped");
        assert_eq!(
            error_chain(chain.as_ref()),
            "the worker stopped: cannot read a join: connection refused"
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
        let wrapped = Error::with_source(ErrorKind::Connect, "no server", err);
        assert_eq!(
            error_chain(&wrapped),
            "no server: error sending request: connection refused"
        );
    }
}
