/// Why the A2A gateway cannot serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Where it was told to listen, it may not or cannot.
    #[error(transparent)]
    Listen(#[from] baton_gateway::listen::Error),
    /// NATS or JetStream refused: the streams or the task bucket.
    #[error(transparent)]
    Nats(#[from] baton_worker::Error),
    /// The inbox cannot be opened.
    #[error(transparent)]
    Inbox(#[from] baton_worker::InboxError),
    /// The callers file cannot be read, or is not a list of callers.
    #[error("{0}")]
    Callers(String),
    /// The task index cannot be read or written.
    #[error("{0}")]
    Index(String),
    /// The conversations bucket cannot be opened.
    #[error("cannot open the conversations: {0}")]
    Conversations(String),
    /// The HTTP server stopped.
    #[error("the A2A server stopped: {0}")]
    Serve(std::io::Error),
}
