//! Who may use the console: an access token beyond loopback, and a CSRF
//! token on every request that changes something.

use std::net::SocketAddr;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use baton_gateway::listen::{self, Exposure, Token};
use sha2::{Digest, Sha256};

/// The console's secrets, derived once at start-up.
#[derive(Clone)]
pub struct Access {
    /// The access token, when one is set.
    token: Option<Token>,
    /// The token forms carry (`csrf`), derived from the access token (so
    /// every replica of a console accepts the others' forms) or random.
    csrf: String,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .finish_non_exhaustive()
    }
}

fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize().into()
}

impl Access {
    /// The access rules for a console on `listen` with access token
    /// `token`. A console that listens beyond loopback needs a token.
    ///
    /// # Errors
    ///
    /// When `listen` is not a loopback address and `token` is empty.
    pub fn new(listen: SocketAddr, token: Option<&str>) -> Result<Self, crate::Error> {
        let exposure = Exposure {
            what: "the console",
            risk: "anyone who reaches it could replay dead letters and answer the inbox",
            token_flag: "--access-token (or BATON_CONSOLE_TOKEN)",
            loopback: "--listen 127.0.0.1:8080",
        };
        listen::token(listen, token, &exposure)?;
        let token = token.filter(|t| !t.is_empty());
        let csrf = match token {
            Some(token) => baton_proto::hex(&digest(&[b"baton-console-csrf\0", token.as_bytes()])),
            None => baton_proto::hex(&digest(&[
                b"baton-console-csrf\0",
                uuid::Uuid::new_v4().as_bytes(),
                uuid::Uuid::new_v4().as_bytes(),
            ])),
        };
        Ok(Self {
            token: token.map(Token::new),
            csrf,
        })
    }

    /// The token the console's forms carry.
    #[must_use]
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Whether a form's `csrf` field is the console's.
    #[must_use]
    pub fn csrf_ok(&self, given: &str) -> bool {
        digest(&[given.as_bytes()]) == digest(&[self.csrf.as_bytes()])
    }

    /// Whether `headers` carry the access token: `Authorization: Bearer
    /// <token>`, or Basic with the token as the password (what a browser
    /// asks for). Always true when no token is set.
    #[must_use]
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        let Some(want) = &self.token else {
            return true;
        };
        let Some(value) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return false;
        };
        let given = if let Some(bearer) = listen::bearer_of(headers) {
            Some(bearer.to_owned())
        } else if let Some(basic) = value.strip_prefix("Basic ") {
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, basic.trim())
                .ok()
                .and_then(|raw| String::from_utf8(raw).ok())
                .and_then(|pair| {
                    pair.split_once(':')
                        .map(|(_, password)| password.to_owned())
                })
        } else {
            None
        };
        given.is_some_and(|given| want.matches(&given))
    }
}

/// Refuses requests without the access token, and forms posted from
/// another site.
pub(crate) async fn guard(State(access): State<Access>, request: Request, next: Next) -> Response {
    if !access.admits(request.headers()) {
        return (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"baton console\", charset=\"UTF-8\""),
            )],
            "this console needs its access token (any user name, the token as password)\n",
        )
            .into_response();
    }
    let cross_site = request
        .headers()
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site");
    if request.method() == axum::http::Method::POST && cross_site {
        return (StatusCode::FORBIDDEN, "cross-site form refused\n").into_response();
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, value.parse().unwrap());
        headers
    }

    #[test]
    fn beyond_loopback_a_token_is_required() {
        let err = Access::new("0.0.0.0:8080".parse().unwrap(), None).unwrap_err();
        assert!(err.to_string().contains("--access-token"), "{err}");
        assert!(Access::new("0.0.0.0:8080".parse().unwrap(), Some("")).is_err());
        assert!(Access::new("127.0.0.1:8080".parse().unwrap(), None).is_ok());
        assert!(Access::new("[::1]:8080".parse().unwrap(), None).is_ok());
    }

    #[test]
    fn bearer_and_basic_carry_the_token() {
        let access = Access::new("0.0.0.0:1".parse().unwrap(), Some("s3cret")).unwrap();
        assert!(access.admits(&with("Bearer s3cret")));
        // "anyone:s3cret"
        assert!(access.admits(&with("Basic YW55b25lOnMzY3JldA==")));
        // "anyone:wrong"
        assert!(!access.admits(&with("Basic YW55b25lOndyb25n")));
        assert!(!access.admits(&with("Bearer s3cre")));
        assert!(!access.admits(&HeaderMap::new()));
        assert!(!format!("{access:?}").contains("s3cret"));
    }

    #[test]
    fn replicas_with_one_token_share_the_csrf_token() {
        let a = Access::new("0.0.0.0:1".parse().unwrap(), Some("t")).unwrap();
        let b = Access::new("0.0.0.0:2".parse().unwrap(), Some("t")).unwrap();
        assert_eq!(a.csrf(), b.csrf());
        assert!(a.csrf_ok(b.csrf()));
        assert!(!a.csrf_ok("t"));
        let c = Access::new("127.0.0.1:1".parse().unwrap(), None).unwrap();
        let d = Access::new("127.0.0.1:1".parse().unwrap(), None).unwrap();
        assert_ne!(c.csrf(), d.csrf());
    }
}
