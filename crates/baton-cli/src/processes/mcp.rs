//! `baton mcp serve`: agent types as MCP tools, over stdio or streamable HTTP.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use baton_proto::{AgentName, Subjects};
use clap::{Args, Subcommand};

use super::stop::Stop;
use crate::nats::NatsArgs;

/// `baton mcp`: Baton agent types as MCP tools.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Serve agent types as MCP tools: on stdin/stdout (for an MCP host that starts this
    /// command), or over streamable HTTP with --http. A tool call runs a session through the
    /// router (`baton router` must run) and returns its answer, or its failure as a tool
    /// error; the session's events arrive as progress notifications.
    Serve(McpServeArgs),
    /// Sign in to an MCP server that signs callers in with OAuth, once, for every worker of
    /// an agent type whose spec names it with `auth = "oauth"`: prints the authorization URL
    /// (or runs --open-with on it), waits for the browser's redirect to a loopback address,
    /// and keeps the tokens in JetStream, where the workers read and refresh them. Never
    /// prints a token.
    Login(McpLoginArgs),
    /// Call one tool of a spec's [[mcp]] servers, as its worker reaches them (signed in,
    /// answering the server as it would), outside any task: to try a server, its sign-in
    /// and its tools. Prints the result as the model would read it; exits 1 when the tool
    /// says it failed.
    Call(McpCallArgs),
}

/// Which tool `baton mcp call` calls, and with what.
#[derive(Debug, Args)]
pub struct McpCallArgs {
    /// The agent's spec file, whose [[mcp]] servers offer the tool.
    pub spec: std::path::PathBuf,

    /// The tool, as the model sees its name (with the server's `prefix`).
    pub tool: String,

    /// The arguments, a JSON object.
    #[arg(long, default_value = "{}", value_name = "JSON")]
    pub arguments: String,
}

/// Which server `baton mcp login` signs in to, and as which client.
#[derive(Debug, Args)]
pub struct McpLoginArgs {
    /// The MCP server's URL, as the spec's `[[mcp]] url` names it.
    pub url: String,

    #[command(flatten)]
    pub browser: Browser,

    /// Sign in as this client, which the authorization server registered (its spec names
    /// the same `client_id`) [default: a client metadata document with
    /// --client-metadata-url, else dynamic registration].
    #[arg(long, value_name = "ID")]
    pub client_id: Option<String>,

    /// The environment variable that holds the --client-id's secret, if it has one.
    #[arg(long, value_name = "VAR", requires = "client_id")]
    pub client_secret_env: Option<String>,

    /// The HTTPS URL of this client's metadata document, used as its client id where the
    /// authorization server supports it (MCP's client ID metadata documents).
    #[arg(long, value_name = "URL", conflicts_with = "client_id")]
    pub client_metadata_url: Option<String>,

    /// A scope to ask for (repeat for more) [default: those the server names].
    #[arg(long = "scope", value_name = "SCOPE")]
    pub scopes: Vec<String>,
}

/// Where a sign-in's authorization URL goes, and how long its redirect is
/// awaited (`baton mcp login`, `baton inbox authorize`).
#[derive(Debug, Args)]
pub struct Browser {
    /// Run this command with the authorization URL as its last argument, instead of
    /// printing the URL (e.g. `xdg-open`, or `curl -sL -o /dev/null` where the server
    /// signs in without a person).
    #[arg(long, value_name = "CMD")]
    pub open_with: Option<String>,

    /// How long to wait for the browser's redirect, in seconds.
    #[arg(long, default_value_t = 300, value_name = "SECS")]
    pub wait_secs: u64,
}

impl Browser {
    /// What shows the authorization URL: `said`, then the URL, printed;
    /// or the URL opened with --open-with.
    pub(crate) fn show(
        &self,
        said: String,
    ) -> impl FnOnce(&str) -> Result<(), baton_mcp_client::Error> {
        let open_with = self.open_with.clone();
        move |address: &str| match &open_with {
            None => {
                println!("{said}\n{address}");
                Ok(())
            }
            Some(command) => open(command, address),
        }
    }

    /// How long the redirect is awaited.
    pub(crate) fn wait(&self) -> Duration {
        Duration::from_secs(self.wait_secs.max(1))
    }
}

/// What `baton mcp serve` exposes, and where.
#[derive(Debug, Args)]
pub struct McpServeArgs {
    /// The agent types to expose, comma-separated [default: every live one the registry
    /// knows, described from it].
    #[arg(long, value_delimiter = ',', value_name = "AGENT,...")]
    pub agents: Vec<String>,

    /// Serve streamable HTTP on this address (at /mcp) instead of stdio. Beyond loopback it
    /// needs --access-token.
    #[arg(long, env = "BATON_MCP_HTTP", value_name = "ADDR")]
    pub http: Option<SocketAddr>,

    /// Token HTTP clients must send as `Authorization: Bearer <token>`. Required beyond
    /// loopback; checked on loopback too when set.
    #[arg(
        long,
        env = "BATON_MCP_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub access_token: Option<String>,

    /// With --http: a file naming the callers, one `NAME TOKEN` per line (`#` comments).
    /// Each call must carry one of the tokens, and a caller continues only the
    /// conversations it started; another caller's is refused. Instead of --access-token;
    /// satisfies the token rule beyond loopback.
    #[arg(
        long,
        env = "BATON_MCP_CALLERS",
        value_name = "FILE",
        conflicts_with = "access_token",
        requires = "http"
    )]
    pub callers: Option<std::path::PathBuf>,

    /// How long a tool call waits for its session to end, in seconds.
    #[arg(long, default_value_t = 300, value_name = "SECS")]
    pub timeout_secs: u64,

    /// The most tokens a session started by a call may spend on models. A call may ask for
    /// less with its `budget_tokens` argument, never for more. [default: none, or the
    /// router's --default-budget-tokens]
    #[arg(long, env = "BATON_MCP_BUDGET_TOKENS", value_name = "TOKENS", allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(1..))]
    pub budget_tokens: Option<u64>,

    /// The most a session started here may cost, as an amount (e.g. 0.50) in the currency
    /// of the agents' [llm.price] tables. A call may ask for less
    /// with its `budget_cost` argument, never for more. [default: none, or
    /// the router's --default-budget-cost]
    #[arg(long, env = "BATON_MCP_BUDGET_COST", value_name = "AMOUNT", allow_negative_numbers = true, value_parser = crate::sessions::amount)]
    pub budget_cost: Option<u64>,

    /// With --http: how long open tool calls may take to finish on SIGTERM or Ctrl-C, in
    /// seconds; the server then exits and cuts those still open (their sessions go on
    /// without it). A second SIGTERM or Ctrl-C exits at once.
    #[arg(long, default_value_t = 10, value_name = "SECS", requires = "http")]
    pub shutdown_grace_secs: u64,
}

/// The agent types of `--agents`.
pub fn agent_names(names: &[String]) -> anyhow::Result<Vec<AgentName>> {
    names
        .iter()
        .map(|name| {
            AgentName::new(name.as_str())
                .with_context(|| format!("invalid --agents entry {name:?}"))
        })
        .collect()
}

/// `baton mcp serve`: agent types as MCP tools, as the client role.
pub async fn run(
    nats: &NatsArgs,
    subjects: Subjects,
    command: McpCommand,
) -> anyhow::Result<ExitCode> {
    let args = match command {
        McpCommand::Serve(args) => args,
        McpCommand::Login(args) => return login(nats, &subjects, &args).await,
        McpCommand::Call(args) => return call(nats, subjects, &args).await,
    };
    let only = agent_names(&args.agents)?;
    let client = crate::nats::client(nats, subjects.clone(), baton_ops::RoleKind::Client).await?;
    let connection = client.jetstream().client();
    let registry = baton_client::RegistryClient::new(connection.clone(), &subjects);
    let gateway = baton_mcp::Gateway::new(
        client,
        registry,
        only,
        Duration::from_secs(args.timeout_secs.max(1)),
    )
    .with_budget(baton_proto::Budget {
        tokens: args.budget_tokens,
        cost_micros: args.budget_cost,
    })
    .with_replicas(nats.replicas());
    match args.http {
        Some(listen) => {
            let callers = args.callers.as_deref();
            let stop = Stop::listen(
                Duration::from_secs(args.shutdown_grace_secs),
                Some(connection),
                super::stop::nothing("open tool calls are cut; their sessions go on"),
            );
            let shutdown = stop.signal();
            baton_mcp::serve_http(gateway, listen, args.access_token, callers, shutdown).await?;
        }
        None => gateway.serve_stdio().await?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `baton mcp login`: signs in once, as the operator, and keeps the tokens
/// where the workers read them.
async fn login(
    nats: &NatsArgs,
    subjects: &Subjects,
    args: &McpLoginArgs,
) -> anyhow::Result<ExitCode> {
    let secret = match &args.client_secret_env {
        Some(var) => Some(std::env::var(var).with_context(|| {
            format!("--client-secret-env names {var}, which is not set: export {var}=<the client's secret>")
        })?),
        None => None,
    };
    let role = baton_ops::Role::of(baton_ops::RoleKind::Operator);
    let connection = crate::nats::connect(nats, None, &role).await?;
    let tokens =
        baton_mcp_client::Tokens::open(connection.client(), subjects, nats.replicas()).await?;
    let asked = baton_mcp_client::Login {
        url: args.url.clone(),
        client_id: args.client_id.clone(),
        client_secret: secret,
        client_metadata_url: args.client_metadata_url.clone(),
        scopes: args.scopes.clone(),
    };
    let show = args.browser.show("Open this URL to sign in:".to_owned());
    let signed = baton_mcp_client::login(&asked, &tokens, show, args.browser.wait()).await?;
    let scopes = if signed.scopes.is_empty() {
        "no scope named".to_owned()
    } else {
        signed.scopes.join(" ")
    };
    println!(
        "signed in to {} as client {} ({scopes}{}); its workers use this sign-in",
        args.url,
        signed.client_id,
        if signed.refreshable {
            ", refreshable"
        } else {
            ""
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// Runs `command` (split on spaces) with `address` as its last argument,
/// in the background: a browser stays open, a `curl` follows the redirects.
pub(crate) fn open(command: &str, address: &str) -> Result<(), baton_mcp_client::Error> {
    let mut words = command.split_whitespace();
    let program = words.next().ok_or_else(|| {
        baton_mcp_client::Error::new(baton_mcp_client::ErrorKind::Config, "--open-with is empty")
    })?;
    tokio::process::Command::new(program)
        .args(words)
        .arg(address)
        .stdout(std::process::Stdio::null())
        .spawn()
        .map(drop)
        .map_err(|err| {
            baton_mcp_client::Error::new(
                baton_mcp_client::ErrorKind::Config,
                format!("cannot run --open-with {program}: {err}"),
            )
        })
}

/// `baton mcp call`: one tool call, as the spec's worker would make it.
async fn call(nats: &NatsArgs, subjects: Subjects, args: &McpCallArgs) -> anyhow::Result<ExitCode> {
    let spec = baton_agents::load(&args.spec)
        .map_err(|errors| anyhow::anyhow!("the spec has problems:\n{errors}"))?;
    let arguments: serde_json::Value = serde_json::from_str(&args.arguments)
        .context("--arguments is not JSON: give an object, e.g. '{\"a\": 1}'")?;
    anyhow::ensure!(arguments.is_object(), "--arguments must be a JSON object");
    let signed =
        crate::operations::check::sign_ins(nats, &subjects, std::slice::from_ref(&spec)).await;
    let tokens = signed.as_ref().map(|(_, tokens)| tokens);
    let (text, failed) = baton_agents::call_tool(&spec, tokens, &args.tool, arguments).await?;
    println!("{text}");
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
