/// Why the console cannot serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An option is wrong; the message says how.
    #[error("{0}")]
    Config(String),
    /// Where it was told to listen, it may not or cannot.
    #[error(transparent)]
    Listen(#[from] baton_gateway::listen::Error),
    /// NATS or JetStream refused: the streams.
    #[error(transparent)]
    Nats(#[from] baton_worker::Error),
    /// The inbox cannot be opened.
    #[error(transparent)]
    Inbox(#[from] baton_worker::InboxError),
    /// The session events cannot be read or followed, which the console
    /// cannot do without.
    #[error("{0}")]
    Events(String),
    /// The HTTP server stopped.
    #[error("the console stopped: {0}")]
    Serve(std::io::Error),
}
