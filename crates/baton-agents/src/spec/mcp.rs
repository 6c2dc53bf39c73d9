//! An `[[mcp]]` section: an MCP server whose tools an agent calls, and how
//! the worker signs in to it.

use serde::Deserialize;

/// An MCP server whose tools an LLM agent may call (`[[mcp]]`): either
/// `url` (streamable HTTP) or `command` (stdio, one process per worker).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSpec {
    /// The server's streamable-HTTP endpoint, e.g. `http://127.0.0.1:8000/mcp`.
    #[serde(default)]
    pub url: Option<String>,
    /// The environment variable that holds a bearer token for `url`.
    #[serde(default)]
    pub token_env: Option<String>,
    /// How the server at `url` signs callers in with OAuth, instead of a
    /// static `token_env`: see [`McpAuth`].
    #[serde(default)]
    pub auth: Option<McpAuth>,
    /// The OAuth client's id, as the authorization server registered it.
    #[serde(default)]
    pub client_id: Option<String>,
    /// The environment variable that holds the OAuth client's secret.
    #[serde(default)]
    pub client_secret_env: Option<String>,
    /// With `auth = "client_credentials"`, instead of a secret: the
    /// environment variable that holds the client's private key (PEM), with
    /// which each token request is signed (`private_key_jwt`, RFC 7523).
    #[serde(default)]
    pub private_key_env: Option<String>,
    /// The algorithm `private_key_env`'s key signs with: `RS256` (the
    /// default), `RS384`, `RS512`, `ES256` or `ES384`.
    #[serde(default)]
    pub signing_algorithm: Option<SigningAlgorithm>,
    /// The OAuth scopes asked for; none: those the server's metadata names.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// What the worker says when the server asks the user something during
    /// a call (`elicitation/create`): see [`McpElicitation`].
    #[serde(default)]
    pub elicitation: McpElicitation,
    /// The program (and its arguments) that serves MCP on stdio.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Only these of the server's tools are offered (all when absent).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Put before each tool's name, to keep two servers' tools apart.
    #[serde(default)]
    pub prefix: String,
    /// Whether a call whose outcome is unknown (the worker stopped between
    /// making it and recording its result) may be made again. By default
    /// the server's tool annotations decide, with MCP's own defaults: a
    /// tool annotated `readOnlyHint` or `idempotentHint` may be repeated,
    /// every other one (one without annotations included) is never made
    /// twice, and its unknown outcome goes to a person. `true`: the server
    /// honours the idempotency key (`_meta["baton/idempotency-key"]`), so
    /// any of its calls may be repeated, with the same key. `false`: none of
    /// its tools is repeated, whatever its annotations say.
    #[serde(default)]
    pub idempotent: Option<bool>,
    /// Tools (by the server's names) that may be repeated, whatever the
    /// annotations and `idempotent` say.
    #[serde(default)]
    pub idempotent_tools: Vec<String>,
    /// Tools (by the server's names) that are never repeated, whatever the
    /// annotations and `idempotent` say.
    #[serde(default)]
    pub not_idempotent: Vec<String>,
    /// Which calls wait for a person's approval before they are made:
    /// `"destructive"` (every tool not annotated read-only), `"all"`, or a
    /// list of tools (by the server's names). None when absent.
    #[serde(default)]
    pub approve: Option<Approve>,
    /// How long one call may take, in ms.
    #[serde(default = "default_tool_timeout_ms")]
    pub timeout_ms: u64,
    /// The largest result handed to the model, in bytes; a larger one is
    /// reported to the model as an error.
    #[serde(default = "default_max_result_bytes")]
    pub max_result_bytes: usize,
}

fn default_tool_timeout_ms() -> u64 {
    30_000
}

fn default_max_result_bytes() -> usize {
    4 * 1024 * 1024
}

/// Which of a server's calls wait for a person's approval (`approve`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Approve {
    /// `"destructive"` or `"all"`.
    Class(String),
    /// These tools, by the server's names.
    Tools(Vec<String>),
}

impl McpSpec {
    /// How errors name the server: its URL or its program.
    #[must_use]
    pub fn label(&self) -> String {
        match (&self.url, &self.command) {
            (Some(url), _) => url.clone(),
            (None, Some(command)) => command.join(" "),
            (None, None) => "an [[mcp]] entry".to_owned(),
        }
    }
}

/// How a client's private key signs its token requests (`private_key_jwt`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum SigningAlgorithm {
    /// RSA with SHA-256 (the default).
    #[default]
    RS256,
    /// RSA with SHA-384.
    RS384,
    /// RSA with SHA-512.
    RS512,
    /// ECDSA on P-256 with SHA-256.
    ES256,
    /// ECDSA on P-384 with SHA-384.
    ES384,
}

pub use baton_mcp_client::answering::McpElicitation;

/// How an MCP server signs callers in with OAuth (MCP authorization).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpAuth {
    /// OAuth's authorization code grant, for a server that signs people
    /// in: a person signs in once with `baton mcp login URL` (as a
    /// pre-registered client when `client_id` is set, else as the server
    /// allows: a client ID metadata document or dynamic registration), and
    /// every worker uses and refreshes the tokens kept in JetStream.
    Oauth,
    /// OAuth's client credentials grant, for a server that serves machines
    /// (MCP's client-credentials extension): each worker asks the
    /// authorization server for a token with `client_id` and the secret in
    /// `client_secret_env`, or a JWT signed with the private key in
    /// `private_key_env`, and asks again when it expires.
    ClientCredentials,
}
