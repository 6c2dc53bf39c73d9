//! The `baton` command: glue between arguments and the Baton libraries.
#![allow(unreachable_pub)] // a binary: `pub` marks what modules share, nothing is exported

mod args;
mod conversation;
mod dev;
mod dlq;
mod doctor;
mod inbox;
mod learning;
mod live;
mod manifests;
mod nats;
mod replay;
mod serve;
mod session;

use anyhow::Context as _;

use args::{Cli, Command};

// A worker allocates and frees a few buffers per message on many threads;
// glibc's allocator took a quarter of a worker's CPU in a profile of
// `baton bench`, mimalloc about half as much.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // One TLS crypto provider for every client in the process (NATS, HTTP):
    // ring, which needs no C toolchain beyond the compiler.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let matches = unset_empty_env(<Cli as clap::CommandFactory>::command()).get_matches();
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(err) => err.exit(),
    };
    let quiet = cli.command.quiet();
    let (service, metrics) = match &cli.command {
        Command::Worker(args) => ("baton-worker", &args.metrics),
        Command::Router(args) => ("baton-router", &args.metrics),
        Command::Registry(args) => ("baton-registry", &args.metrics),
        _ => ("baton", &args::MetricsArgs { metrics_addr: None }),
    };
    let telemetry = baton_telemetry::init(&baton_telemetry::Wanted {
        level: if quiet { "warn" } else { "info" },
        service,
        prometheus: metrics.metrics_addr.is_some(),
    });
    let served = metrics.metrics_addr.zip(telemetry.prometheus.clone());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli, served)) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", report(&err));
            std::process::ExitCode::FAILURE
        }
    }
}

/// An environment variable that is set but empty counts as unset, as in the
/// NATS CLI: `NATS_URL= baton send …` uses the default URL.
fn unset_empty_env(command: clap::Command) -> clap::Command {
    let command = command.mut_args(|arg| {
        let empty = arg
            .get_env()
            .is_some_and(|name| std::env::var_os(name).is_some_and(|value| value.is_empty()));
        if empty { arg.env(None) } else { arg }
    });
    let names: Vec<String> = command
        .get_subcommands()
        .map(|sub| sub.get_name().to_owned())
        .collect();
    names.iter().fold(command, |command, name| {
        command.mut_subcommand(name, unset_empty_env)
    })
}

/// An error and its causes, each said once: many errors already include
/// their cause in their own message.
pub(crate) fn report(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&cause);
        }
    }
    // A cause may repeat its own cause in its message ("x: x").
    let mut parts: Vec<&str> = Vec::new();
    for part in text.split(": ") {
        if parts.last() != Some(&part) {
            parts.push(part);
        }
    }
    parts.join(": ")
}

/// Runs the command; `served` is where the metrics go, when they are served.
async fn run(
    cli: Cli,
    served: Option<(std::net::SocketAddr, prometheus::Registry)>,
) -> anyhow::Result<std::process::ExitCode> {
    let subjects =
        baton_proto::Subjects::new(cli.nats.prefix.clone()).context("invalid --prefix")?;
    if let Some((addr, registry)) = served {
        baton_telemetry::serve::metrics(addr, registry).await?;
    }
    match cli.command {
        Command::Dev(args) => dev::run(&cli.nats, subjects, args).await,
        Command::Worker(args) => serve::worker(&cli.nats, subjects, *args).await,
        Command::Router(args) => serve::router(&cli.nats, subjects, args).await,
        Command::Registry(args) => serve::registry(&cli.nats, subjects, args).await,
        Command::Agents(args) => learning::agents(&cli.nats, subjects, args).await,
        Command::Feedback(args) => learning::feedback(&cli.nats, subjects, args).await,
        Command::Notebook(args) => learning::notebook(&cli.nats, subjects, args).await,
        Command::Send(args) => match args.conversation.clone() {
            Some(id) => conversation::send(&cli.nats, subjects, &id, &args).await,
            None => session::send(&cli.nats, subjects, args).await,
        },
        Command::Chat(args) => conversation::chat(&cli.nats, subjects, args).await,
        Command::Conversations(command) => conversation::run(&cli.nats, subjects, command).await,
        Command::Watch(args) => session::watch(&cli.nats, subjects, args).await,
        Command::Cancel(args) => session::cancel(&cli.nats, subjects, args).await,
        Command::Replay(args) => replay::replay(&cli.nats, subjects, args).await,
        Command::Diff(args) => replay::diff(&cli.nats, subjects, args).await,
        Command::Dlq(command) => dlq::run(&cli.nats, subjects, command).await,
        Command::Check(args) => Ok(inbox::check(&args).await),
        Command::Inbox(command) => inbox::run(&cli.nats, subjects, command).await,
        Command::Doctor(args) => doctor::run(&cli.nats, subjects, args).await,
        Command::Manifests(args) => manifests::run(&args, &subjects),
        Command::Console(args) => serve::console(&cli.nats, subjects, args).await,
        Command::Mcp(args::McpCommand::Serve(args)) => serve::mcp(&cli.nats, subjects, args).await,
        Command::A2a(args::A2aCommand::Serve(args)) => serve::a2a(&cli.nats, subjects, args).await,
        Command::Permissions(args) => {
            let role = baton_ops::Role::new(args.role, args.agent)?;
            let grants = baton_ops::Grants {
                to: args.to,
                human: args.human,
            };
            let inbox = cli.nats.inbox_prefix.as_deref();
            let block = baton_ops::permissions::render(&role, &subjects, inbox, &grants);
            print!("{block}");
            Ok(std::process::ExitCode::SUCCESS)
        }
        Command::Bench(args) => {
            let (client, server) = nats::connect_or_start(
                &cli.nats,
                &baton_ops::Role::of(baton_ops::RoleKind::Client),
            )
            .await?;
            let url = server.as_ref().map_or_else(
                || nats::shown(cli.nats.nats_url.as_deref()),
                |server| server.url().to_owned(),
            );
            let mut args = args;
            args.server_pid = server.as_ref().and_then(baton_nats_server::NatsServer::pid);
            baton_devtools::bench::run(client.client().clone(), &url, args).await?;
            Ok(std::process::ExitCode::SUCCESS)
        }
        Command::BenchRegistry(args) => {
            let (client, _server) = nats::connect_or_start(
                &cli.nats,
                &baton_ops::Role::of(baton_ops::RoleKind::Client),
            )
            .await?;
            baton_devtools::bench_registry::run(client.client().clone(), args).await?;
            Ok(std::process::ExitCode::SUCCESS)
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
