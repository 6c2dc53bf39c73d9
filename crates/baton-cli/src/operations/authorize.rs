//! `baton inbox authorize ID`: a person signs in again for a tool call its
//! MCP server refused, and the call is made again.

use anyhow::Context as _;
use baton_agents::Inbox;
use baton_proto::{Reason, Subjects};
use clap::Args;

use crate::nats::NatsArgs;

/// Who settles an inbox entry, recorded with the decision (default: $USER).
#[derive(Debug, Args)]
pub struct Person {
    /// Who decides, recorded with the decision (default: $USER).
    #[arg(
        long = "as",
        value_name = "NAME",
        env = "USER",
        default_value = "person"
    )]
    pub person: String,
}

/// Which waiting call to sign in again for, and how.
#[derive(Debug, Args)]
pub struct AuthorizeArgs {
    /// Entry id, as `baton inbox ls` shows it (reason authorization_required).
    pub id: String,

    #[command(flatten)]
    pub browser: crate::processes::mcp::Browser,

    /// The environment variable that holds the secret of the pre-registered client the
    /// first sign-in used (`baton mcp login --client-id`), if it has one.
    #[arg(long, value_name = "VAR")]
    pub client_secret_env: Option<String>,

    #[command(flatten)]
    pub person: Person,
}

/// Signs in to the MCP server that refused entry `args.id`'s call, as the
/// kept sign-in was made, with the scopes it had and those the server
/// asked for. Returns what to tell the person.
pub async fn sign_in_again(
    client: &async_nats::Client,
    subjects: &Subjects,
    nats: &NatsArgs,
    inbox: &Inbox,
    args: &AuthorizeArgs,
) -> anyhow::Result<String> {
    let id = &args.id;
    let entry = inbox.entry(id).await?.with_context(|| {
        format!("nothing is waiting in the inbox under {id}: it was settled already, or the id is wrong (see `baton inbox ls`)")
    })?;
    let gate = entry
        .gate()
        .filter(|gate| gate.reason == Reason::AuthorizationRequired);
    let Some(authorize) = gate.and_then(|gate| gate.authorize.clone()) else {
        anyhow::bail!(
            "{id} does not wait for a sign-in (it waits for {}): see `baton inbox show {id}`",
            entry.reason().map_or("a person's answer", Reason::as_str)
        );
    };
    let secret = match &args.client_secret_env {
        Some(var) => Some(std::env::var(var).with_context(|| {
            format!("--client-secret-env names {var}, which is not set: export {var}=<the client's secret>")
        })?),
        None => None,
    };
    let tokens = baton_mcp_client::Tokens::open(client, subjects, nats.replicas()).await?;
    let url = authorize.server.as_str();
    let asked =
        baton_mcp_client::Login::again(url, &tokens, authorize.scope.as_deref(), secret).await?;
    let said = format!(
        "{url} refused the call: {}\nOpen this URL to sign in again:",
        authorize.why
    );
    let show = args.browser.show(said);
    let signed = baton_mcp_client::login(&asked, &tokens, show, args.browser.wait()).await?;
    let scopes = if signed.scopes.is_empty() {
        "no scope named".to_owned()
    } else {
        signed.scopes.join(" ")
    };
    Ok(format!(
        "signed in to {url} again as client {} ({scopes}); the call is made again",
        signed.client_id
    ))
}
