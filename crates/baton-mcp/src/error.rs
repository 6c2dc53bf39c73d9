/// Why the MCP gateway cannot serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Where it was told to listen, it may not or cannot.
    #[error(transparent)]
    Listen(#[from] baton_gateway::listen::Error),
    /// The MCP conversation over stdio failed.
    #[error("MCP over stdio: {0}")]
    Stdio(String),
    /// The callers file is unreadable or malformed.
    #[error("{0}")]
    Callers(String),
    /// The HTTP server stopped.
    #[error("the MCP server stopped: {0}")]
    Serve(std::io::Error),
}
