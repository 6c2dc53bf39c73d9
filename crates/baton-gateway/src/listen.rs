//! Where a gateway may listen and who may call it. A gateway starts
//! sessions and answers people's tasks, so it listens on loopback unless
//! told otherwise, and beyond loopback only with a bearer token. Tokens are
//! compared by digest, so the time a comparison takes says nothing about
//! the token, and a token is never printed.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::{Error, ErrorKind};

/// How a gateway names itself when it refuses to listen openly.
#[derive(Debug, Clone, Copy)]
pub struct Exposure<'a> {
    /// What it serves, as in "refusing to serve {what}": `MCP`, `the console`.
    pub what: &'a str,
    /// What a caller could do, as in "without a token: {risk}".
    pub risk: &'a str,
    /// Where the token is set: `--access-token (or BATON_MCP_TOKEN)`.
    pub token_flag: &'a str,
    /// Listening on loopback instead: `--http 127.0.0.1:8090`.
    pub loopback: &'a str,
}

/// A gateway's token, kept as its digest.
#[derive(Clone)]
pub struct Token([u8; 32]);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<set>)")
    }
}

impl Token {
    /// The token `text`.
    #[must_use]
    pub fn new(text: &str) -> Self {
        Self(Sha256::digest(text.as_bytes()).into())
    }

    /// Whether `given` is this token.
    #[must_use]
    pub fn matches(&self, given: &str) -> bool {
        <[u8; 32]>::from(Sha256::digest(given.as_bytes())) == self.0
    }
}

/// The token a gateway on `listen` requires, from `token` (empty is none).
///
/// # Errors
///
/// [`ErrorKind::Open`] when `listen` is beyond loopback and there is no token;
/// the message names the flag that sets one and the loopback alternative.
pub fn token(
    listen: SocketAddr,
    token: Option<&str>,
    exposure: &Exposure<'_>,
) -> Result<Option<Token>, Error> {
    let token = token.filter(|t| !t.is_empty());
    if token.is_none() && !listen.ip().is_loopback() {
        let Exposure {
            what,
            risk,
            token_flag,
            loopback,
        } = exposure;
        return Err(Error::new(
            ErrorKind::Open,
            format!(
                "refusing to serve {what} on {listen} without a token: {risk}. Set {token_flag}, \
                 or listen on loopback ({loopback})"
            ),
        ));
    }
    Ok(token.map(Token::new))
}

/// Binds `listen`.
///
/// # Errors
///
/// [`ErrorKind::Bind`], naming the address.
pub async fn bind(listen: SocketAddr) -> Result<tokio::net::TcpListener, Error> {
    tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| {
            Error::with_source(
                ErrorKind::Bind,
                format!("cannot listen on {listen}"),
                source,
            )
        })
}

/// The bearer token of a request's `Authorization` header, if any.
#[must_use]
pub fn bearer_of(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// Middleware: refuses a request without `Authorization: Bearer <token>`
/// when a token is set (401, with `WWW-Authenticate: Bearer`).
pub async fn bearer(
    State(token): State<Option<Arc<Token>>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(token) = token {
        if !bearer_of(request.headers()).is_some_and(|given| token.matches(given)) {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "this server needs its token: Authorization: Bearer <token>\n",
            )
                .into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    const MCP: Exposure<'static> = Exposure {
        what: "MCP",
        risk: "a tool call starts sessions",
        token_flag: "--access-token (or BATON_MCP_TOKEN)",
        loopback: "--http 127.0.0.1:8090",
    };

    #[test]
    fn beyond_loopback_a_token_is_required_and_named() {
        let open: SocketAddr = "0.0.0.0:8090".parse().unwrap();
        let err = token(open, Some(""), &MCP).unwrap_err().to_string();
        assert!(
            err.contains("refusing to serve MCP on 0.0.0.0:8090 without a token")
                && err.contains("--access-token (or BATON_MCP_TOKEN)")
                && err.contains("--http 127.0.0.1:8090"),
            "{err}"
        );
        let set = token(open, Some("s3cret"), &MCP).unwrap().expect("a token");
        assert!(set.matches("s3cret") && !set.matches("s3cre") && !set.matches(""));
        assert_eq!(format!("{set:?}"), "Token(<set>)", "never printed");
        let local: SocketAddr = "127.0.0.1:8090".parse().unwrap();
        assert!(token(local, None, &MCP).unwrap().is_none());
    }

    #[test]
    fn the_bearer_is_read_from_the_authorization_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer_of(&headers), None);
        headers.insert(header::AUTHORIZATION, "Bearer  abc ".parse().unwrap());
        assert_eq!(bearer_of(&headers), Some("abc"));
        headers.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(bearer_of(&headers), None);
    }
}
