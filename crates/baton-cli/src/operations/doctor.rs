//! `baton doctor`: connects as an operator, reaches every server, reads the
//! rest through [`baton_ops::doctor`], runs its checks, and prints each
//! finding with its fix (or all of them as JSON).
//!
//! Every server of the list, and every server the cluster announces, is
//! asked for its version, JetStream and `max_payload` (its `INFO`). A user
//! of the system account also gets each server's fsync setting
//! (`$SYS.REQ.SERVER.PING.VARZ`); others get an `info` finding saying so.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use async_nats::jetstream;
use baton_nats::Connection;
use baton_ops::doctor::{Facts, Level, ServerFacts, Sync, gather};
use baton_ops::{Grants, Role, RoleKind};
use baton_proto::Subjects;
use clap::Args;

use crate::nats::NatsArgs;

/// What `baton doctor` checks, and how it reports.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print the findings as JSON (one object with a `findings` array) for scripts.
    #[arg(long)]
    pub json: bool,

    /// Report the consumer of an agent type that has had no live worker for this long, in
    /// seconds.
    #[arg(long, default_value_t = 3600, value_name = "SECS")]
    pub stale_after_secs: u64,

    /// The claim-check threshold the workers are given (their --claim-threshold), to check
    /// against the servers' max_payload [default: half the smallest max_payload, as workers
    /// use].
    #[arg(long, env = "BATON_CLAIM_THRESHOLD", value_name = "BYTES")]
    pub claim_threshold: Option<usize>,

    /// A user of the system account, to read each server's fsync setting
    /// (`$SYS.REQ.SERVER.PING.VARZ`): a server URL with its credentials, such as
    /// nats://sys:PASSWORD@host:4222 [default: the main connection, if its user may ask].
    #[arg(
        long,
        env = "BATON_SYSTEM_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub system_url: Option<String>,

    /// How long each server, and the registry, may take to answer, in ms.
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    pub timeout_ms: u64,
}

pub async fn run(
    nats: &NatsArgs,
    subjects: Subjects,
    args: DoctorArgs,
) -> anyhow::Result<std::process::ExitCode> {
    let timeout = Duration::from_millis(args.timeout_ms.max(1));
    let connection = crate::nats::connect(nats, None, &Role::of(RoleKind::Operator)).await?;
    let system = match &args.system_url {
        Some(url) => Some(crate::nats::connect_list(nats, url, timeout).await),
        None => None,
    };
    let system = system
        .transpose()
        .context("--system-url (BATON_SYSTEM_URL)")?;
    let (servers, unreachable) = servers(nats, &connection, system.as_ref(), timeout).await?;
    let jetstream = jetstream::new(connection.client().clone());
    let read = async {
        let (streams, missing) = gather::streams(&jetstream, &subjects).await?;
        let consumers = gather::consumers(&jetstream, &subjects).await?;
        Ok::<_, baton_ops::Error>((streams, missing, consumers))
    };
    let (streams, missing, consumers, unreadable) = match read.await {
        Ok((streams, missing, consumers)) => (streams, missing, consumers, None),
        Err(err) => (Vec::new(), Vec::new(), Vec::new(), Some(err.to_string())),
    };
    let rollouts = or_none(
        gather::rollouts(&jetstream, &subjects).await,
        "rollouts of versions",
    );
    let limits = or_none(
        gather::limits(&jetstream, &subjects).await,
        "shared model rate limits",
    );
    let live = gather::live_agents(connection.client(), &subjects, timeout).await;
    let compression = baton_ops::doctor::storage::compression(&jetstream, &subjects).await;
    let signed = baton_ops::doctor::signins::gather(connection.client(), &subjects).await;
    let sign_ins = or_none(signed, "MCP sign-ins");
    let operator = Role::of(RoleKind::Operator);
    let inbox = nats
        .inbox_prefix
        .clone()
        .unwrap_or_else(|| operator.default_inbox_prefix());
    let footprint = operator.footprint(&subjects, &inbox, &Grants::default());
    let refused = gather::refused(&connection, &footprint).await;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let facts = Facts {
        servers,
        unreachable,
        streams,
        missing,
        unreadable,
        tasks_stream: subjects.tasks_stream(),
        consumers,
        live,
        refused,
        claim_threshold: args.claim_threshold,
        stale_after: Duration::from_secs(args.stale_after_secs),
        limits,
        gated: gather::gated(&jetstream, &subjects, &rollouts).await,
        rollouts,
        compression,
        sign_ins,
        now,
    };
    let findings = baton_ops::doctor::check(&facts);
    if args.json {
        let report = baton_ops::doctor::report(&findings);
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", baton_ops::doctor::render(&findings));
    }
    let healthy = findings.iter().all(|f| f.level < Level::Warn);
    Ok(if healthy {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}

/// Every server of the list and of the cluster, and those that did not answer.
async fn servers(
    nats: &NatsArgs,
    connection: &Connection,
    system: Option<&async_nats::Client>,
    timeout: Duration,
) -> anyhow::Result<(Vec<ServerFacts>, Vec<String>)> {
    let mut addrs: BTreeSet<String> = crate::nats::listed(nats)?.into_iter().collect();
    addrs.extend(connection.client().server_info().connect_urls);
    let syncs = match system {
        Some(system) => gather::varz(system, timeout).await,
        None if connection.may_publish(gather::VARZ).await => {
            gather::varz(connection.client(), timeout).await
        }
        None => BTreeMap::new(),
    };
    let probes = addrs
        .iter()
        .map(|addr| async move { (addr.clone(), crate::nats::probe(nats, addr, timeout).await) });
    let (mut found, mut unreachable) = (BTreeMap::new(), Vec::new());
    for (addr, answer) in futures::future::join_all(probes).await {
        match answer {
            Ok(info) => {
                let sync = syncs
                    .get(&info.server_name)
                    .copied()
                    .unwrap_or(Sync::Unknown);
                found.entry(info.server_id.clone()).or_insert(ServerFacts {
                    name: info.server_name,
                    version: info.version,
                    jetstream: info.jetstream,
                    max_payload: info.max_payload,
                    sync,
                });
            }
            Err(err) => {
                tracing::debug!(server = %addr, error = %err, "server did not answer");
                unreachable.push(addr);
            }
        }
    }
    Ok((found.into_values().collect(), unreachable))
}

/// What `read` found, or none (logged) when `what` cannot be read: the
/// doctor reports on the rest.
fn or_none<T>(read: Result<Vec<T>, baton_ops::Error>, what: &str) -> Vec<T> {
    read.unwrap_or_else(|err| {
        tracing::warn!(error = %err, "cannot read the {what}");
        Vec::new()
    })
}
