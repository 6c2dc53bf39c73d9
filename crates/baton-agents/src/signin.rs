//! How a worker signs in to an MCP server over streamable HTTP: with a
//! static bearer token (`token_env`), with OAuth's client credentials grant
//! (`auth = "client_credentials"`), or with the tokens a person's sign-in
//! left in JetStream (`auth = "oauth"`, `baton mcp login`), through the MCP
//! SDK's own authorization support: the server's protected-resource
//! metadata, its authorization server's metadata, the token for the
//! `resource` it is for, refreshed when it runs out, and the token on every
//! request.

pub use baton_mcp_client::{KeptClient, Login, SignedIn, Tokens, footprint, login};
use baton_mcp_client::{manager, oauth_http};

use rmcp::ServiceExt;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::auth::{AuthClient, ClientCredentialsConfig, OAuthState};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use crate::spec::{McpAuth, McpSpec};
use crate::{Error, ErrorKind};

/// How a worker signs in to one server.
pub(crate) enum SignIn {
    /// It does not: the server takes anyone (or runs over stdio).
    Open,
    /// A bearer token, from `token_env`.
    Token(String),
    /// OAuth's client credentials grant: a token asked for on each
    /// connection (a connection whose token expired is made again).
    ClientCredentials {
        client_id: String,
        proof: Proof,
        scopes: Vec<String>,
    },
    /// A person's sign-in (`baton mcp login`), kept in `tokens`; as the
    /// pre-registered client `client`, when the spec names one.
    Oauth {
        tokens: Option<Box<Tokens>>,
        client: Option<(String, Option<String>)>,
    },
}

/// How a machine client proves it is itself.
pub(crate) enum Proof {
    /// Its secret (`client_secret_env`).
    Secret(String),
    /// A JWT its private key signs (`private_key_env`, PEM).
    PrivateKey(Vec<u8>, crate::spec::SigningAlgorithm),
}

impl std::fmt::Debug for SignIn {
    /// Says how, never with what.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Open => "Open",
            Self::Token(_) => "Token",
            Self::ClientCredentials { .. } => "ClientCredentials",
            Self::Oauth { .. } => "Oauth",
        })
    }
}

impl SignIn {
    /// How `spec` signs in, with its secrets read from the environment.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Config`] naming the variable that is not set.
    pub(crate) fn of(spec: &McpSpec, tokens: Option<&Tokens>) -> Result<Self, Error> {
        let label = spec.label();
        let read = |var: &str, what: &str| {
            std::env::var(var).map_err(|_| {
                Error::new(
                    ErrorKind::Config,
                    format!("[[mcp]] {label}: {what} names {var}, which is not set: export {var}=<the server's {}>", what.trim_end_matches("_env").replace('_', " ")),
                )
            })
        };
        if let Some(var) = &spec.token_env {
            return Ok(Self::Token(read(var, "token_env")?));
        }
        match (spec.auth, &spec.client_id, &spec.client_secret_env) {
            (Some(McpAuth::ClientCredentials), Some(client_id), Some(var)) => {
                Ok(Self::ClientCredentials {
                    client_id: client_id.clone(),
                    proof: Proof::Secret(read(var, "client_secret_env")?),
                    scopes: spec.scopes.clone(),
                })
            }
            (Some(McpAuth::ClientCredentials), Some(client_id), None) => {
                let var = spec.private_key_env.as_deref().unwrap_or_default();
                Ok(Self::ClientCredentials {
                    client_id: client_id.clone(),
                    proof: Proof::PrivateKey(
                        read(var, "private_key_env")?.into_bytes(),
                        spec.signing_algorithm.unwrap_or_default(),
                    ),
                    scopes: spec.scopes.clone(),
                })
            }
            (Some(McpAuth::Oauth), client_id, var) => {
                let secret = var
                    .as_deref()
                    .map(|var| read(var, "client_secret_env"))
                    .transpose()?;
                Ok(Self::Oauth {
                    tokens: tokens.cloned().map(Box::new),
                    client: client_id.clone().map(|id| (id, secret)),
                })
            }
            // `baton check` refuses the other combinations.
            _ => Ok(Self::Open),
        }
    }

    /// Connects to the server at `url` over streamable HTTP, signed in.
    pub(crate) async fn connect(
        &self,
        url: &str,
        http: reqwest::Client,
        info: baton_mcp_client::answering::Answering,
    ) -> Result<RunningService<RoleClient, baton_mcp_client::answering::Answering>, Error> {
        let mut config = StreamableHttpClientTransportConfig::with_uri(url);
        let manager = match self {
            Self::Open => None,
            Self::Token(token) => {
                config = config.auth_header(token.clone());
                None
            }
            Self::ClientCredentials {
                client_id,
                proof,
                scopes,
            } => Some(signed_in(url, client_id, proof, scopes).await?),
            Self::Oauth { tokens, client } => {
                let Some(tokens) = tokens else {
                    return Err(Error::new(
                        ErrorKind::Config,
                        format!(
                            "no sign-in to read (none kept yet, or no NATS connection): run `baton mcp login {url}` once"
                        ),
                    ));
                };
                Some(stored(url, tokens, client.as_ref()).await?)
            }
        };
        let person = matches!(self, Self::Oauth { .. });
        let reached = match manager {
            None => {
                let transport = StreamableHttpClientTransport::with_client(http, config);
                info.serve(transport).await
            }
            Some(manager) => {
                let http = AuthClient::new(http, manager);
                let transport = StreamableHttpClientTransport::with_client(http, config);
                info.serve(transport).await
            }
        };
        reached.map_err(|err| {
            let refusal = match &err {
                rmcp::service::ClientInitializeError::TransportError { error, .. } if person => {
                    refused(error)
                }
                _ => None,
            };
            match refusal {
                Some(refusal) => Error::with_source(
                    ErrorKind::SignIn,
                    "the server refused the kept sign-in",
                    refusal,
                ),
                None => Error::new(ErrorKind::Mcp, format!("cannot reach the server: {err}")),
            }
        })
    }

    /// Whether a person's sign-in is what lets the worker in: a refusal
    /// then waits for them (`baton inbox authorize`).
    pub(crate) fn by_person(&self) -> bool {
        matches!(self, Self::Oauth { .. })
    }
}

/// Signs in to the authorization server of the MCP server at `url` with
/// the client credentials grant: its token is for `url` (the `resource`).
async fn signed_in(
    url: &str,
    client_id: &str,
    proof: &Proof,
    scopes: &[String],
) -> Result<rmcp::transport::auth::AuthorizationManager, Error> {
    let asked = match proof {
        Proof::Secret(secret) => ClientCredentialsConfig::ClientSecret {
            client_id: client_id.to_owned(),
            client_secret: secret.clone(),
            scopes: scopes.to_vec(),
            resource: Some(url.to_owned()),
        },
        Proof::PrivateKey(pem, algorithm) => ClientCredentialsConfig::PrivateKeyJwt {
            client_id: client_id.to_owned(),
            signing_key: pem.clone(),
            signing_algorithm: signing(*algorithm),
            token_endpoint_audience: None,
            scopes: scopes.to_vec(),
            resource: Some(url.to_owned()),
        },
    };
    let url = url.to_owned();
    let http = oauth_http().map_err(from_store)?;
    apart(move || async move {
        let mut state = OAuthState::new(&url, Some(http))
            .await
            .map_err(|err| failed("cannot start signing in", &err))?;
        state
            .authenticate_client_credentials(asked)
            .await
            .map_err(|err| {
                failed(
                    "the authorization server refused the client credentials",
                    &err,
                )
            })?;
        state.into_authorization_manager().ok_or_else(|| {
            Error::new(
                ErrorKind::Mcp,
                "signing in ended without a token".to_owned(),
            )
        })
    })
    .await
}

/// Runs `work` on a thread of its own, on a runtime of its own, and waits
/// for it: the MCP SDK's client-credentials exchange holds a value across
/// an await that may not move between threads (a form serializer), and a
/// worker's calls run on many.
async fn apart<T, F>(work: impl FnOnce() -> F + Send + 'static) -> Result<T, Error>
where
    T: Send + 'static,
    F: std::future::Future<Output = Result<T, Error>> + 'static,
{
    let (done, result) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("baton-sign-in".to_owned())
        // As the runtime's: the SDK's futures are deep.
        .stack_size(8 * 1024 * 1024)
        .spawn(move || {
            let ran = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|err| failed("cannot start signing in", &err))
                .and_then(|runtime| runtime.block_on(work()));
            let _ = done.send(ran);
        })
        .map_err(|err| failed("cannot start signing in", &err))?;
    result
        .await
        .map_err(|err| failed("signing in stopped", &err))?
}

/// The MCP SDK's name for `algorithm`.
fn signing(algorithm: crate::spec::SigningAlgorithm) -> rmcp::transport::auth::JwtSigningAlgorithm {
    use crate::spec::SigningAlgorithm as Ours;
    use rmcp::transport::auth::JwtSigningAlgorithm as Theirs;
    match algorithm {
        Ours::RS256 => Theirs::RS256,
        Ours::RS384 => Theirs::RS384,
        Ours::RS512 => Theirs::RS512,
        Ours::ES256 => Theirs::ES256,
        Ours::ES384 => Theirs::ES384,
    }
}

/// The sign-in a person left for the server at `url` in `tokens`, as the
/// pre-registered `client` (id and secret) when there is one.
async fn stored(
    url: &str,
    tokens: &Tokens,
    client: Option<&(String, Option<String>)>,
) -> Result<rmcp::transport::auth::AuthorizationManager, Error> {
    let mut manager = manager(url, tokens).await.map_err(from_store)?;
    let signed = (manager.initialize_from_store().await)
        .map_err(|err| failed("cannot read its sign-in", &err))?;
    if !signed {
        return Err(Error::new(
            ErrorKind::Config,
            format!("no one signed in to it: run `baton mcp login {url}` once (for every worker)"),
        ));
    }
    if let Some((id, secret)) = client {
        // A confidential client refreshes with its secret.
        let mut config = rmcp::transport::auth::OAuthClientConfig::new(id.as_str(), url);
        if let Some(secret) = secret {
            config = config.with_client_secret(secret.as_str());
        }
        manager
            .configure_client(config)
            .map_err(|err| failed("cannot use its client", &err))?;
    }
    Ok(manager)
}

/// An OAuth step that `what` names, refused with `err`.
fn failed(what: &str, err: &dyn std::fmt::Display) -> Error {
    Error::new(ErrorKind::Mcp, format!("{what}: {err}"))
}

/// A sign-in store's failure, as this crate's error of the same kind.
pub(crate) fn from_store(err: baton_mcp_client::Error) -> Error {
    let kind = match err.kind() {
        baton_mcp_client::ErrorKind::Config => ErrorKind::Config,
        baton_mcp_client::ErrorKind::Nats => ErrorKind::Nats,
        baton_mcp_client::ErrorKind::Http => ErrorKind::Http,
        _ => ErrorKind::Mcp,
    };
    Error::new(kind, baton_proto::error_chain(&err))
}

/// The store of sign-ins, when one of `servers` signs in with a person's
/// sign-in (`auth = "oauth"`); `None` otherwise. A worker does not create
/// it: `baton mcp login` does.
///
/// # Errors
///
/// [`ErrorKind::Config`] when no one signed in yet, or this worker may not
/// read the sign-ins, naming the command to run; [`ErrorKind::Nats`] when
/// JetStream cannot be asked.
pub(crate) async fn tokens_for(
    servers: &[McpSpec],
    client: &async_nats::Client,
    subjects: &baton_proto::Subjects,
) -> Result<Option<Tokens>, Error> {
    let Some(server) = (servers.iter()).find(|server| server.auth == Some(McpAuth::Oauth)) else {
        return Ok(None);
    };
    match Tokens::existing(client, subjects)
        .await
        .map_err(from_store)?
    {
        Some(tokens) => Ok(Some(tokens)),
        None => {
            let url = server.url.as_deref().unwrap_or("URL");
            Err(Error::new(
                ErrorKind::Config,
                format!(
                    "no MCP sign-in found: no one signed in yet (run `baton mcp login {url}` once, for every worker), or this worker may not read the sign-ins (under generated permissions: `baton permissions worker NAME --mcp-login {url}`)"
                ),
            ))
        }
    }
}

/// Why the server at the other end of a call refused this worker's
/// sign-in, when it did: a person must sign in again (`baton inbox
/// authorize`). `None` for any other failure.
pub(crate) fn refusal(err: &rmcp::service::ServiceError) -> Option<Refusal> {
    match err {
        rmcp::service::ServiceError::TransportSend(sent) => refused(sent),
        _ => None,
    }
}

/// As [`refusal`], for a transport's error.
fn refused(sent: &rmcp::transport::DynamicTransportError) -> Option<Refusal> {
    use rmcp::transport::auth::AuthError;
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let refused = sent
        .error
        .downcast_ref::<StreamableHttpError<reqwest::Error>>()?;
    Some(match refused {
        StreamableHttpError::InsufficientScope(insufficient) => Refusal {
            scope: insufficient.get_required_scope().map(str::to_owned),
            why: format!(
                "the server asks for more scopes ({})",
                insufficient.get_required_scope().unwrap_or("not named")
            ),
        },
        StreamableHttpError::AuthRequired(_) => Refusal {
            scope: None,
            why: "the server no longer takes the kept sign-in (401)".to_owned(),
        },
        // A refresh that failed on the way (the authorization server down)
        // is not a refusal: the call is retried. A refused one
        // (`invalid_grant`) comes as `AuthorizationRequired`.
        StreamableHttpError::Auth(
            AuthError::AuthorizationRequired | AuthError::TokenRefreshRejected(_),
        ) => Refusal {
            scope: None,
            why: "the sign-in ran out and its authorization server refused to refresh it"
                .to_owned(),
        },
        _ => return None,
    })
}

/// A server's refusal of a sign-in (see [`refusal`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub(crate) struct Refusal {
    /// The scopes it asked for, space-separated, if it named them.
    pub(crate) scope: Option<String>,
    /// Why, in a sentence.
    pub(crate) why: String,
}

/// The refusal a connection's error carries (see [`ErrorKind::SignIn`]).
///
/// [`ErrorKind::SignIn`]: crate::ErrorKind::SignIn
pub(crate) fn refusal_in(err: &crate::Error) -> Refusal {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(at) = cause {
        if let Some(refusal) = at.downcast_ref::<Refusal>() {
            return refusal.clone();
        }
        cause = at.source();
    }
    Refusal {
        scope: None,
        why: baton_proto::error_chain(err),
    }
}
