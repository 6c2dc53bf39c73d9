//! Why a gateway cannot serve: one error type for the console,
//! `baton mcp serve` and `baton a2a serve`.

/// What kept a gateway from serving, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An option, or a file it names (the callers file), is wrong; the
    /// message says how.
    Config,
    /// It was asked to listen beyond loopback without a token.
    Open,
    /// The address cannot be bound.
    Bind,
    /// NATS or JetStream refused: the streams, a bucket or the inbox. The
    /// runtime's error is the source.
    Nats,
    /// What the gateway keeps or reads cannot be read or written: its task
    /// index, the conversations, the session events, or MCP over stdio; the
    /// message says which.
    Store,
    /// The HTTP server stopped.
    Serve,
}

baton_proto::error_type! {
    /// Why a gateway cannot serve: a kind, a message that names the fix,
    /// and the cause.
    pub struct Error(ErrorKind);
}

impl Error {
    /// An option, or a file it names, is wrong: see [`ErrorKind::Config`].
    pub fn config(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Config, message)
    }

    /// What the gateway keeps or reads failed: see [`ErrorKind::Store`].
    pub fn store(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Store, message)
    }

    /// The HTTP server `what` stopped, because of `err`.
    #[must_use]
    pub fn serve(what: &str, err: std::io::Error) -> Self {
        Self::with_source(ErrorKind::Serve, format!("the {what} stopped"), err)
    }
}

impl From<baton_nats::Error> for Error {
    fn from(err: baton_nats::Error) -> Self {
        Self::transparent(ErrorKind::Nats, err)
    }
}
