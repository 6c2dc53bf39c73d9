//! `baton bench` and `baton bench-registry`.

use std::process::ExitCode;

use baton_devtools::bench::BenchArgs;
use baton_devtools::bench_registry::BenchRegistryArgs;
use baton_ops::{Role, RoleKind};

use crate::nats::NatsArgs;

/// `baton bench`: against the server of `nats`, or one it starts.
pub async fn run(nats: &NatsArgs, mut args: BenchArgs) -> anyhow::Result<ExitCode> {
    // The server it starts serves its counters on loopback, for the bytes
    // each hop sends it.
    let monitor = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let options = baton_nats_server::ServerOptions::default()
        .arg("-m")
        .arg(monitor.to_string());
    let role = Role::of(RoleKind::Client);
    let (client, server) = crate::nats::connect_or_start_with(nats, &role, options).await?;
    if server.is_some() {
        args.monitor_url = Some(format!("http://127.0.0.1:{monitor}"));
    }
    let url = server.as_ref().map_or_else(
        || crate::nats::shown(nats.nats_url.as_deref()),
        |server| server.url().to_owned(),
    );
    args.server_pid = server.as_ref().and_then(baton_nats_server::NatsServer::pid);
    args.store_dir = server.as_ref().map(|server| server.store_dir().to_owned());
    baton_devtools::bench::run(client.client().clone(), &url, args).await?;
    Ok(ExitCode::SUCCESS)
}

/// `baton bench-registry`.
pub async fn registry(nats: &NatsArgs, args: BenchRegistryArgs) -> anyhow::Result<ExitCode> {
    let (client, _server) =
        crate::nats::connect_or_start(nats, &Role::of(RoleKind::Client)).await?;
    baton_devtools::bench_registry::run(client.client().clone(), args).await?;
    Ok(ExitCode::SUCCESS)
}
