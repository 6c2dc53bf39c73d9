//! `baton console`: the web console, as the operator role.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use baton_proto::Subjects;
use clap::Args;

use super::stop::Stop;
use crate::nats::NatsArgs;

/// Where the console listens, who may use it, and what it keeps.
#[derive(Debug, Args)]
pub struct ConsoleArgs {
    /// Address to serve the console on. Beyond loopback (e.g. 0.0.0.0:8080) it needs
    /// --access-token, since the console replays dead letters and answers the inbox.
    #[arg(
        long,
        env = "BATON_CONSOLE_LISTEN",
        default_value = "127.0.0.1:8080",
        value_name = "ADDR"
    )]
    pub listen: SocketAddr,

    /// Access token: a browser asks for it as the password (any user name), scripts send
    /// `Authorization: Bearer <token>`. Required beyond loopback; checked on loopback too
    /// when set.
    #[arg(
        long,
        env = "BATON_CONSOLE_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub access_token: Option<String>,

    /// Link from a session to its trace in a tracing UI, with `{trace_id}` where the trace
    /// id goes, e.g. http://localhost:16686/trace/{trace_id} for Jaeger.
    #[arg(long, env = "BATON_TRACE_URL", value_name = "URL")]
    pub trace_url: Option<String>,

    /// How many sessions the console keeps in memory, the most recently active ones.
    #[arg(long, default_value_t = 5000, value_name = "N")]
    pub sessions: usize,

    /// How many rows the sessions list shows at most.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub rows: usize,

    /// How long open requests may take to finish on SIGTERM or Ctrl-C, in seconds; the
    /// console then exits and closes what is still open (live pages reconnect to another
    /// console, or to this one once it is back). It holds no messages, so nothing is
    /// redelivered. A second SIGTERM or Ctrl-C exits at once.
    #[arg(long, default_value_t = 5, value_name = "SECS")]
    pub shutdown_grace_secs: u64,
}

/// `baton console`: the web console, as the operator role.
pub async fn run(
    nats: &NatsArgs,
    subjects: Subjects,
    args: ConsoleArgs,
) -> anyhow::Result<ExitCode> {
    let mut config = baton_console::ConsoleConfig::new(args.listen);
    config.token = args.access_token;
    config.trace_url = args.trace_url;
    config.sessions = args.sessions.max(1);
    config.shown = args.rows.max(1);
    config.replicas = nats.replicas();
    // Refuse an open listener before connecting anywhere.
    baton_console::Access::new(config.listen, config.token.as_deref())?;
    let client = crate::nats::client(nats, subjects.clone(), baton_ops::RoleKind::Operator).await?;
    let stop = Stop::listen(
        Duration::from_secs(args.shutdown_grace_secs),
        Some(client.jetstream().client()),
        super::stop::nothing("nothing to redeliver: open pages and event streams are closed"),
    );
    baton_console::serve(config, client, subjects, stop.signal()).await?;
    Ok(ExitCode::SUCCESS)
}
