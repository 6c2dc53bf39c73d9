//! The `[[mcp]]` sections of a spec: the MCP servers whose tools an LLM
//! agent calls. What can be checked without reaching the servers.

use super::{RawSpec, Report};
use crate::spec::{Kind, McpAuth, McpSpec};

/// Whether a spec of `kind` takes `[[mcp]]` servers: a model's, or a
/// persistent program's (`ctx.tool`).
fn takes_tools(kind: Option<&Kind>) -> bool {
    matches!(kind, Some(Kind::Llm(_) | Kind::Exec(_)) | None)
}

impl Report<'_> {
    pub(super) fn mcp(&mut self, raw: &RawSpec, kind: Option<&Kind>) -> Vec<McpSpec> {
        if let (Some(first), false) = (raw.mcp.first(), takes_tools(kind)) {
            self.error(
                &first.span(),
                "[[mcp]] tools are offered to a model, or to a persistent exec program (ctx.tool): use kind = \"llm\" or \"exec\"",
            );
            return Vec::new();
        }
        let mut servers = Vec::new();
        for spanned in &raw.mcp {
            let span = spanned.span();
            let entry = spanned.get_ref();
            if let Some(why) = where_problem(entry) {
                self.error(&span, why);
                continue;
            }
            if let Some(why) = sign_in_problem(entry) {
                self.error(&span, why);
                continue;
            }
            if entry.timeout_ms == 0 {
                self.error(
                    &span,
                    "[[mcp]] timeout_ms is 0: give a call time to answer, e.g. timeout_ms = 30000",
                );
                continue;
            }
            if !entry
                .prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                self.error(
                    &span,
                    format!("[[mcp]] prefix {:?} may hold only letters, digits, _ and - (it goes before tool names)", entry.prefix),
                );
                continue;
            }
            if let Some(crate::spec::Approve::Class(class)) = &entry.approve
                && class != "destructive"
                && class != "all"
            {
                self.error(
                    &span,
                    format!("[[mcp]] approve = {class:?} is not a choice: use \"destructive\" (every tool not annotated read-only), \"all\", or a list of tool names"),
                );
                continue;
            }
            if let Some(both) = entry
                .idempotent_tools
                .iter()
                .find(|tool| entry.not_idempotent.contains(tool))
            {
                self.error(
                    &span,
                    format!("[[mcp]] {both:?} is in both idempotent_tools and not_idempotent: keep it in one"),
                );
                continue;
            }
            servers.push(entry.clone());
        }
        servers
    }
}

/// What is wrong with how `entry` signs in to its server, if anything.
fn sign_in_problem(entry: &McpSpec) -> Option<&'static str> {
    let Some(auth) = entry.auth else {
        let oauth_only = entry.client_id.is_some()
            || entry.client_secret_env.is_some()
            || entry.private_key_env.is_some()
            || !entry.scopes.is_empty();
        return oauth_only.then_some(
            "[[mcp]] client_id, client_secret_env, private_key_env and scopes go with auth = \"oauth\" or \"client_credentials\"",
        );
    };
    if entry.signing_algorithm.is_some() && entry.private_key_env.is_none() {
        return Some("[[mcp]] signing_algorithm goes with private_key_env (the key it signs with)");
    }
    if entry.url.is_none() {
        return Some("[[mcp]] auth goes with url: OAuth signs callers in over HTTP");
    }
    if entry.token_env.is_some() {
        return Some("[[mcp]] auth and token_env are two ways to sign in: keep one");
    }
    match auth {
        McpAuth::ClientCredentials
            if entry.client_id.is_none()
                || entry.client_secret_env.is_some() == entry.private_key_env.is_some() =>
        {
            Some(
                "[[mcp]] auth = \"client_credentials\" needs client_id and one of client_secret_env (the environment variable that holds the client's secret) and private_key_env (one that holds its private key, PEM, for a signed JWT)",
            )
        }
        McpAuth::ClientCredentials => None,
        McpAuth::Oauth if entry.private_key_env.is_some() => Some(
            "[[mcp]] private_key_env goes with auth = \"client_credentials\" (a signed JWT instead of a secret)",
        ),
        McpAuth::Oauth if entry.client_secret_env.is_some() && entry.client_id.is_none() => Some(
            "[[mcp]] client_secret_env goes with client_id (a client the authorization server registered)",
        ),
        McpAuth::Oauth => None,
    }
}

/// What is wrong with where `entry`'s server is (`url` or `command`), if
/// anything.
fn where_problem(entry: &McpSpec) -> Option<String> {
    match (&entry.url, &entry.command) {
        (Some(url), None) if !(url.starts_with("http://") || url.starts_with("https://")) => {
            Some(format!("[[mcp]] url {url:?} is not an http(s) URL: give the server's streamable-HTTP endpoint, e.g. \"http://127.0.0.1:8000/mcp\""))
        }
        (Some(_), None) => None,
        (None, Some(command)) if command.is_empty() => Some(
            "[[mcp]] command is empty: name the program, e.g. command = [\"python3\", \"server.py\"]".to_owned(),
        ),
        (None, Some(_)) if entry.token_env.is_some() => Some(
            "[[mcp]] token_env goes with url (a bearer token over HTTP); a command gets its secrets from the environment".to_owned(),
        ),
        (None, Some(_)) => None,
        _ => Some(
            "[[mcp]] needs exactly one of url = \"http://...\" and command = [\"program\", ...]".to_owned(),
        ),
    }
}
