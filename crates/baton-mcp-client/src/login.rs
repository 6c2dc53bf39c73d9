//! `baton mcp login`: a person signs in to an MCP server once, for every
//! worker. OAuth's authorization code grant with PKCE, the redirect to a
//! loopback address this process listens on, and the tokens kept in
//! JetStream ([`Tokens`]).

use std::time::Duration;

use rmcp::transport::auth::{
    AuthorizationManager, AuthorizationRequest, AuthorizationSession, OAuthClientConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::failed;
use crate::tokens::{KeptClient, SignedIn, Tokens};
use crate::{Error, ErrorKind};

/// A sign-in to ask for.
#[derive(Clone, Default)]
pub struct Login {
    /// The MCP server's URL.
    pub url: String,
    /// A client the authorization server registered (pre-registration);
    /// none: a client ID metadata document, else dynamic registration.
    pub client_id: Option<String>,
    /// The pre-registered client's secret, if it has one.
    pub client_secret: Option<String>,
    /// The HTTPS URL of this client's metadata document (CIMD), used as
    /// its id where the authorization server supports it.
    pub client_metadata_url: Option<String>,
    /// The scopes to ask for; none: those the server names.
    pub scopes: Vec<String>,
}

impl std::fmt::Debug for Login {
    /// Everything but the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("url", &self.url)
            .field("client_id", &self.client_id)
            .field("client_metadata_url", &self.client_metadata_url)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl Login {
    /// A new sign-in to `url`, made as the kept one was (the same client),
    /// asking for the scopes it has and those in `more` (space-separated,
    /// as a server's `insufficient_scope` names them), with `client_secret`
    /// for a pre-registered client that has one.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Config`] when no one signed in to `url` yet (then `baton
    /// mcp login` comes first); [`ErrorKind::Nats`] when the bucket cannot
    /// be read.
    pub async fn again(
        url: &str,
        tokens: &Tokens,
        more: Option<&str>,
        client_secret: Option<String>,
    ) -> Result<Self, Error> {
        let Some((client, mut scopes)) = tokens.client_of(url).await? else {
            return Err(Error::new(
                ErrorKind::Config,
                format!("no one signed in to {url} yet: run `baton mcp login {url}` first"),
            ));
        };
        for scope in more.unwrap_or_default().split_whitespace() {
            if !scopes.iter().any(|had| had == scope) {
                scopes.push(scope.to_owned());
            }
        }
        Ok(Self {
            url: url.to_owned(),
            client_secret: client.id.as_ref().and(client_secret),
            client_id: client.id,
            client_metadata_url: client.metadata_url,
            scopes,
        })
    }
}

/// How far a sign-in has come: a registered session, or a pre-registered
/// client's manager.
enum Flow {
    Session(Box<AuthorizationSession>),
    Client(Box<AuthorizationManager>, String),
}

/// Signs in to `login.url`: `show` is given the authorization URL (to print
/// or open), then the browser's redirect to this process's loopback
/// address is awaited for up to `wait`, and the tokens are kept in
/// `tokens`. Returns what was kept (never the tokens).
///
/// # Errors
///
/// [`ErrorKind::Mcp`] when the server or its authorization server refuses
/// a step, saying which; [`ErrorKind::Config`] when no redirect came in
/// time.
pub async fn login(
    login: &Login,
    tokens: &Tokens,
    show: impl FnOnce(&str) -> Result<(), Error>,
    wait: Duration,
) -> Result<SignedIn, Error> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|err| failed("cannot listen for the redirect on loopback", &err))?;
    let port = listener
        .local_addr()
        .map_err(|err| failed("cannot listen for the redirect on loopback", &err))?
        .port();
    let redirect = format!("http://127.0.0.1:{port}/callback");
    let url = login.url.as_str();
    let (flow, address) = start(login, tokens, &redirect).await?;
    show(&address)?;
    let callback = tokio::time::timeout(wait, redirected(&listener, port))
        .await
        .map_err(|_| {
            Error::new(
                ErrorKind::Config,
                format!("no sign-in came back within {}s: open the URL above in a browser, or pass --open-with", wait.as_secs()),
            )
        })??;
    // Under the refresh lock: a worker refreshing the sign-in being
    // replaced does not write its tokens over the new one.
    let held = (tokens.of(url).lock().await)
        .map_err(|err| failed("cannot take the sign-in's lock", &err))?;
    let kept = keep(&flow, &callback, login, tokens).await;
    held.release().await;
    kept
}

/// Exchanges the code of `callback` for tokens, which the SDK keeps in
/// `tokens`, and notes how the sign-in was made: what was kept.
async fn keep(
    flow: &Flow,
    callback: &str,
    login: &Login,
    tokens: &Tokens,
) -> Result<SignedIn, Error> {
    let url = login.url.as_str();
    match flow {
        Flow::Session(session) => session.handle_callback_url(callback).await,
        Flow::Client(manager, _) => {
            let (code, state, issuer) = parts(callback)?;
            (manager.exchange_code_for_token_with_issuer(&code, &state, issuer.as_deref())).await
        }
    }
    .map_err(|err| failed("the authorization server refused the sign-in", &err))?;
    let client = KeptClient {
        id: login.client_id.clone(),
        metadata_url: login.client_metadata_url.clone(),
    };
    tokens.note_client(url, client).await?;
    tokens
        .signed_in(url)
        .await?
        .ok_or_else(|| Error::new(ErrorKind::Mcp, "the sign-in was not kept".to_owned()))
}

/// Finds how the server signs callers in, and starts the flow as `login`
/// asks, with the redirect to `redirect`: the flow and the authorization
/// URL to open.
async fn start(login: &Login, tokens: &Tokens, redirect: &str) -> Result<(Flow, String), Error> {
    let url = login.url.as_str();
    let challenge = challenge(&crate::oauth_http()?, url).await;
    let challenged = challenge.as_deref().and_then(scope_of);
    let mut manager = crate::manager(url, tokens).await?;
    let resolved = (manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await)
        .map_err(|err| failed("cannot find how the server signs callers in", &err))?;
    manager.set_metadata(resolved.metadata);
    let scopes = if login.scopes.is_empty() {
        manager.select_scopes(challenged.as_deref(), &[])
    } else {
        login.scopes.clone()
    };
    let asked: Vec<&str> = scopes.iter().map(String::as_str).collect();
    let flow = match &login.client_id {
        Some(id) => {
            let mut client =
                OAuthClientConfig::new(id.as_str(), redirect).with_scopes(scopes.clone());
            if let Some(secret) = &login.client_secret {
                client = client.with_client_secret(secret.as_str());
            }
            (manager.configure_client(client))
                .map_err(|err| failed("cannot use the client", &err))?;
            let address = (manager.get_authorization_url(&asked).await)
                .map_err(|err| failed("cannot make the authorization URL", &err))?;
            Flow::Client(Box::new(manager), address)
        }
        None => {
            let cimd = login.client_metadata_url.as_deref();
            let mut request = AuthorizationRequest::new(redirect)
                .with_scopes(asked.iter().copied())
                .with_client_name("Baton");
            if let Some(cimd) = cimd {
                request = request.with_client_metadata_url(cimd);
            }
            let session =
                AuthorizationSession::new(manager, request)
                    .await
                    .map_err(|(_, err)| {
                        failed("cannot register with the authorization server", &err)
                    })?;
            Flow::Session(Box::new(session))
        }
    };
    let address = match &flow {
        Flow::Session(session) => session.get_authorization_url().to_owned(),
        Flow::Client(_, address) => address.clone(),
    };
    Ok((flow, address))
}

/// The first request to `/callback` on `listener`, answered with a page
/// that says the sign-in came back to Baton; the URL it was redirected to.
/// Any other request (a browser's preconnect, another path) is answered
/// 404, and one that says nothing within 5 s is dropped.
async fn redirected(listener: &tokio::net::TcpListener, port: u16) -> Result<String, Error> {
    loop {
        let (mut stream, _) = (listener.accept().await).map_err(|err| {
            Error::new(ErrorKind::Mcp, format!("cannot take the redirect: {err}"))
        })?;
        let mut read = vec![0_u8; 8192];
        let said = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut read)).await;
        let n = match said {
            Ok(Ok(n)) => n,
            _ => continue,
        };
        let request = String::from_utf8_lossy(&read[..n]);
        let target = request
            .lines()
            .next()
            .and_then(|line| line.split_whitespace().nth(1))
            .unwrap_or_default()
            .to_owned();
        let found = target == "/callback" || target.starts_with("/callback?");
        let (status, page) = if found {
            (
                "200 OK",
                "The sign-in came back to Baton: the terminal says whether it was kept. You may close this page.",
            )
        } else {
            ("404 Not Found", "Not the sign-in's redirect.")
        };
        let answer = format!(
            "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
            page.len()
        );
        let _ = stream.write_all(answer.as_bytes()).await;
        if found {
            return Ok(format!("http://127.0.0.1:{port}{target}"));
        }
    }
}

/// The code, state and issuer of a redirect to `callback`.
fn parts(callback: &str) -> Result<(String, String, Option<String>), Error> {
    let url = reqwest::Url::parse(callback).map_err(|err| {
        Error::new(
            ErrorKind::Mcp,
            format!("a redirect that is not a URL: {err}"),
        )
    })?;
    let get = |name: &str| {
        url.query_pairs()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    };
    if let Some(error) = get("error") {
        return Err(Error::new(
            ErrorKind::Mcp,
            format!("the authorization server refused: {error}"),
        ));
    }
    match (get("code"), get("state")) {
        (Some(code), Some(state)) => Ok((code, state, get("iss"))),
        _ => Err(Error::new(
            ErrorKind::Mcp,
            "the redirect has no code and state".to_owned(),
        )),
    }
}

/// What the server at `url` says when it refuses a caller without a
/// token: its `401`'s `WWW-Authenticate: Bearer …` (where its metadata is,
/// and the scope it wants), to an `initialize` sent as an MCP client's
/// first POST (a server may answer only POSTs).
async fn challenge(http: &reqwest::Client, url: &str) -> Option<String> {
    let initialize = serde_json::json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "baton", "version": env!("CARGO_PKG_VERSION")}}
    });
    let response = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await
        .ok()?;
    if response.status() != reqwest::StatusCode::UNAUTHORIZED {
        return None;
    }
    response
        .headers()
        .get_all(reqwest::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find(|value| {
            value
                .trim_start()
                .to_ascii_lowercase()
                .starts_with("bearer")
        })
        .map(str::to_owned)
}

/// The `scope` parameter of a `WWW-Authenticate` value, quoted or not.
fn scope_of(challenge: &str) -> Option<String> {
    let at = challenge.find("scope=")?;
    // Not `error_scope=` or the like: a parameter starts the value or
    // follows a space or a comma.
    let before = challenge[..at].chars().last();
    if before.is_some_and(|c| c != ' ' && c != ',') {
        return None;
    }
    let rest = &challenge[at + "scope=".len()..];
    let scope = match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next()?,
        None => rest.split([',', ' ']).next()?,
    };
    (!scope.is_empty()).then(|| scope.to_owned())
}

#[cfg(test)]
mod tests {
    use super::scope_of;

    #[test]
    fn a_challenges_scope_is_read_quoted_or_not() {
        let said =
            r#"Bearer resource_metadata="http://a/.well-known/x", scope="mcp:basic files:read""#;
        assert_eq!(scope_of(said).as_deref(), Some("mcp:basic files:read"));
        assert_eq!(
            scope_of("Bearer scope=mcp:basic, error=\"x\"").as_deref(),
            Some("mcp:basic")
        );
        assert_eq!(scope_of("Bearer realm=\"x\""), None);
    }
}
