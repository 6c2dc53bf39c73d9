//! The `baton` command: glue between arguments and the Baton libraries.

//!
//! The commands, by who runs them:
//! - [`processes`]: what runs until stopped (`dev`, `worker`, `router`,
//!   `registry`, `console`, `mcp serve`, `a2a serve`);
//! - [`sessions`]: `send`, `watch`, `cancel`, `replay`, `diff`;
//! - [`conversations`]: `chat`, `conversations`;
//! - [`learning`]: what the registry knows and learned (`agents`,
//!   `feedback`, `notebook`);
//! - [`operations`]: `dlq`, `check`, `inbox`, `permissions`, `doctor`,
//!   `manifests`, `bench`.
//!
//! [`cli`] is the table of commands; each command's module holds its
//! arguments and its `run`. [`nats`] connects, [`shown`] and [`printer`]
//! show sessions to people.

#![allow(unreachable_pub)] // a binary: `pub` marks what modules share, nothing is exported

mod cli;
mod conversations;
mod deploys;
mod learning;
mod nats;
mod operations;
mod printer;
mod processes;
mod sessions;
mod shown;

use anyhow::Context as _;

use cli::{Cli, Command};

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
        _ => (
            "baton",
            &processes::metrics::MetricsArgs { metrics_addr: None },
        ),
    };
    let telemetry = baton_telemetry::init(&baton_telemetry::Wanted {
        level: if quiet { "warn" } else { "info" },
        service,
        prometheus: metrics.metrics_addr.is_some(),
    });
    let served = metrics.metrics_addr.zip(telemetry.prometheus.clone());
    // 8 MiB stacks, not tokio's 2: the MCP SDK's futures are deep, and an
    // unoptimised build polls them on the stack. Pages are used on demand.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(8 * 1024 * 1024)
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
    baton_nats::error_chain(err.as_ref())
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
    cli.command.run(&cli.nats, subjects).await
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

#[cfg(test)]
mod tests {
    use super::report;

    #[test]
    fn every_command_s_arguments_are_well_formed() {
        // clap's own checks: unique names (a positional `version` beside
        // the `--version` flag, say), valid defaults and relations.
        <crate::cli::Cli as clap::CommandFactory>::command().debug_assert();
    }

    #[test]
    fn a_report_says_each_cause_once() {
        // A context over a cause.
        let io = std::io::Error::other("connection refused");
        let err = anyhow::Error::new(io).context("cannot reach NATS at 127.0.0.1:4222");
        assert_eq!(
            report(&err),
            "cannot reach NATS at 127.0.0.1:4222: connection refused"
        );
        // A message with ": " in it is kept whole, even when a part repeats.
        let err = anyhow::anyhow!("key: key").context("bucket a: b");
        assert_eq!(report(&err), "bucket a: b: key: key");
    }
}
