//! A worker's MCP client, apart from the tools it offers a model: how it
//! signs in to servers and how it answers them.
//!
//! - Sign-ins: a person signs in to a server once ([`login`], `baton mcp
//!   login`; again with `baton inbox authorize`), and the tokens are kept
//!   in the JetStream bucket `BATON_MCP_AUTH` ([`Tokens`]), where every
//!   worker of the agent types that use the server reads them and
//!   refreshes them, one at a time. Tokens are never logged.
//! - [`answering`]: the client's identity and what it says to a server's
//!   questions during a call (`elicitation/create`): declined, accepted
//!   with the schema's defaults, or a person's answer, read against the
//!   schema.

pub mod answering;
mod login;
mod tokens;

pub use login::{Login, login};
pub use tokens::{KeptClient, SignedIn, Tokens, footprint};

/// What kind of failure a sign-in met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Something to do first: a login, a flag, a variable.
    Config,
    /// NATS or JetStream refused the bucket (often a permission).
    Nats,
    /// The MCP server or its authorization server refused a step.
    Mcp,
    /// The HTTP client cannot be built.
    Http,
}

baton_proto::error_type! {
    /// Why a sign-in could not be made, read or kept: a kind to branch on,
    /// a message that names the fix, and the cause.
    pub struct Error(ErrorKind);
}

/// An OAuth step that `what` names, refused with `err`.
pub(crate) fn failed(what: &str, err: &dyn std::fmt::Display) -> Error {
    Error::new(ErrorKind::Mcp, format!("{what}: {err}"))
}

/// The HTTP client of OAuth's own requests (metadata, registration,
/// tokens): it follows no redirect, so a code, a refresh token or a secret
/// is never re-posted elsewhere, and it gives up after 30 s.
///
/// # Errors
///
/// [`ErrorKind::Http`] when the client cannot be built.
pub fn oauth_http() -> Result<reqwest::Client, Error> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .map_err(|err| {
            Error::new(
                ErrorKind::Http,
                format!("cannot build the HTTP client: {err}"),
            )
        })
}

/// The MCP SDK's authorization manager for the server at `url`, keeping
/// its sign-in in `tokens`.
///
/// # Errors
///
/// [`ErrorKind::Mcp`] when the SDK refuses the URL.
pub async fn manager(
    url: &str,
    tokens: &Tokens,
) -> Result<rmcp::transport::auth::AuthorizationManager, Error> {
    let http = oauth_http()?;
    let failed = |err: &dyn std::fmt::Display| {
        Error::new(
            ErrorKind::Mcp,
            format!("cannot start signing in to {url}: {err}"),
        )
    };
    let mut manager = (rmcp::transport::auth::AuthorizationManager::new(url).await)
        .map_err(|err| failed(&err))?;
    manager.with_client(http).map_err(|err| failed(&err))?;
    manager.set_credential_store(tokens.of(url));
    Ok(manager)
}
