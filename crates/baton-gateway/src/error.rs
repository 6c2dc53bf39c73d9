//! Why a gateway cannot serve: one error type for the console,
//! `baton mcp serve` and `baton a2a serve`.

/// Why a gateway cannot serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An option, or a file it names (the callers file), is wrong; the
    /// message says how.
    #[error("{0}")]
    Config(String),
    /// Where it was told to listen, it may not or cannot.
    #[error(transparent)]
    Listen(#[from] crate::listen::Error),
    /// NATS or JetStream refused: the streams or a bucket.
    #[error(transparent)]
    Nats(#[from] baton_nats::Error),
    /// The inbox cannot be opened.
    #[error(transparent)]
    Inbox(#[from] baton_client::InboxError),
    /// What the gateway keeps or reads cannot be read or written: its task
    /// index, the conversations, the session events, or MCP over stdio; the
    /// message says which.
    #[error("{0}")]
    Store(String),
    /// The HTTP server (named) stopped.
    #[error("the {0} stopped: {1}")]
    Serve(&'static str, std::io::Error),
}
