//! Named callers: a gateway that serves several parties gives each its own
//! token, from a file of `NAME TOKEN` lines. A call is made as the caller
//! whose token it carries, and what a caller starts (a conversation, its
//! tasks) is theirs alone to continue and read. Tokens are kept as digests
//! and never printed.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::Error;
use crate::listen::{Token, bearer_of};

/// Who makes a call: a caller's name, or `None` when the gateway has no
/// named callers (one token, or none on loopback), so every call is alike.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller(pub Option<String>);

impl Caller {
    /// The caller's name, if the gateway names its callers.
    #[must_use]
    pub fn name(&self) -> Option<&str> {
        self.0.as_deref()
    }

    /// Whether this caller may read and continue what `owner` started: a
    /// gateway without named callers lets every call; else only the owner.
    #[must_use]
    pub fn owns(&self, owner: Option<&str>) -> bool {
        self.0.is_none() || self.name() == owner
    }
}

/// The tokens a gateway takes, each with the caller it names.
#[derive(Clone)]
pub struct Callers(Vec<(Option<String>, Token)>);

impl std::fmt::Debug for Callers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.0.iter().filter_map(|(n, _)| n.as_deref()).collect();
        f.debug_tuple("Callers").field(&names).finish()
    }
}

impl Callers {
    /// One token, naming nobody (`--access-token`).
    #[must_use]
    pub fn one(token: Token) -> Self {
        Self(vec![(None, token)])
    }

    /// The callers of `text`: one `NAME TOKEN` per line, blank lines and
    /// `#` comments skipped.
    ///
    /// # Errors
    ///
    /// A line without both parts, a name that is not `[A-Za-z0-9_.-]`
    /// (1 to 64), a token shorter than 16 characters, a name or token
    /// given twice, or no caller at all: the message names the line.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let mut callers: Vec<(Option<String>, Token)> = Vec::new();
        let mut names: Vec<String> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = n + 1;
            let mut parts = line.split_whitespace();
            let (Some(name), Some(token), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(Error::config(format!(
                    "line {at}: write one caller per line as NAME TOKEN"
                )));
            };
            let valid = name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
            if !valid {
                return Err(Error::config(format!(
                    "line {at}: the caller name {name:?} may hold only letters, digits, _ . - (up to 64)"
                )));
            }
            if token.len() < 16 {
                return Err(Error::config(format!(
                    "line {at}: {name}'s token is shorter than 16 characters: use a long random one (openssl rand -hex 24)"
                )));
            }
            if names.iter().any(|known| known == name) {
                return Err(Error::config(format!(
                    "line {at}: caller {name} is named twice"
                )));
            }
            if callers.iter().any(|(_, known)| known.matches(token)) {
                return Err(Error::config(format!(
                    "line {at}: {name}'s token is another caller's too"
                )));
            }
            names.push(name.to_owned());
            callers.push((Some(name.to_owned()), Token::new(token)));
        }
        if callers.is_empty() {
            return Err(Error::config(
                "it names no caller: write one per line as NAME TOKEN".to_owned(),
            ));
        }
        Ok(Self(callers))
    }

    /// The callers of file `path` (see [`Callers::parse`]).
    ///
    /// # Errors
    ///
    /// When it cannot be read or is not a list of callers, naming the file.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|err| {
            Error::config(format!(
                "cannot read the callers file {}: {err}",
                path.display()
            ))
        })?;
        Self::parse(&text)
            .map_err(|why| Error::config(format!("callers file {}: {why}", path.display())))
    }

    /// The caller whose token `given` is.
    #[must_use]
    pub fn who(&self, given: &str) -> Option<Caller> {
        self.0
            .iter()
            .find(|(_, token)| token.matches(given))
            .map(|(name, _)| Caller(name.clone()))
    }
}

/// Middleware: the call's [`Caller`], from its bearer token, as a request
/// extension; a call without a known token is refused (401, with
/// `WWW-Authenticate: Bearer`). Without callers every call is anonymous.
pub async fn identify(
    State(callers): State<Option<Arc<Callers>>>,
    mut request: Request,
    next: Next,
) -> Response {
    let caller = match &callers {
        None => Caller(None),
        Some(callers) => match bearer_of(request.headers()).and_then(|given| callers.who(given)) {
            Some(caller) => caller,
            None => {
                return (
                    StatusCode::UNAUTHORIZED,
                    [(header::WWW_AUTHENTICATE, "Bearer")],
                    "this server needs your token: Authorization: Bearer <token>\n",
                )
                    .into_response();
            }
        },
    };
    request.extensions_mut().insert(caller);
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callers_file_names_each_token_and_bad_lines_name_the_fix() {
        let callers = Callers::parse(
            "# who may call\nweb   0123456789abcdef0123\n\nmobile fedcba9876543210fedc\n",
        )
        .unwrap();
        assert_eq!(
            callers.who("0123456789abcdef0123"),
            Some(Caller(Some("web".to_owned())))
        );
        assert_eq!(
            callers.who("fedcba9876543210fedc").and_then(|c| c.0),
            Some("mobile".to_owned())
        );
        assert_eq!(callers.who("0123456789abcdef012"), None);
        assert_eq!(format!("{callers:?}"), r#"Callers(["web", "mobile"])"#);
        let bad = |text: &str| Callers::parse(text).unwrap_err().to_string();
        assert!(bad("web\n").contains("line 1: write one caller per line as NAME TOKEN"));
        assert!(bad("w eb x y\n").contains("line 1"));
        assert!(bad("we/b 0123456789abcdef0123\n").contains("may hold only"));
        assert!(bad("web short\n").contains("shorter than 16"));
        assert!(
            bad("web 0123456789abcdef0123\nweb fedcba9876543210fedc\n")
                .contains("line 2: caller web is named twice")
        );
        assert!(
            bad("web 0123456789abcdef0123\napp 0123456789abcdef0123\n")
                .contains("another caller's too")
        );
        assert!(bad("# none\n").contains("names no caller"));
    }

    #[test]
    fn an_anonymous_caller_owns_everything_and_a_named_one_its_own() {
        let anyone = Caller(None);
        assert!(anyone.owns(None) && anyone.owns(Some("web")));
        let web = Caller(Some("web".to_owned()));
        assert!(web.owns(Some("web")));
        assert!(!web.owns(Some("mobile")) && !web.owns(None));
    }
}
