//! `baton doctor`: reads a deployment's servers, streams and consumers,
//! runs the checks of [`checks`] over them, and prints each finding with
//! its fix (or all of them as JSON).
//!
//! Every server of the list, and every server the cluster announces, is
//! asked for its version, JetStream and `max_payload` (its `INFO`). A user
//! of the system account also gets each server's fsync setting
//! (`$SYS.REQ.SERVER.PING.VARZ`); others get an `info` finding saying so.

mod checks;
mod facts;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use async_nats::jetstream;
use baton_proto::Subjects;
use baton_worker::Connection;
use futures::StreamExt as _;

use crate::args::{DoctorArgs, NatsArgs};
use crate::permissions::{Role, RoleKind};
use checks::{ConsumerFacts, Facts, Finding, Level, ServerFacts, StreamFacts, Sync};

/// Every server's `varz`; only the system account may ask.
const VARZ: &str = "$SYS.REQ.SERVER.PING.VARZ";

pub async fn run(
    nats: &NatsArgs,
    subjects: Subjects,
    args: DoctorArgs,
) -> anyhow::Result<std::process::ExitCode> {
    let timeout = Duration::from_millis(args.timeout_ms.max(1));
    let connection = crate::nats::connect(nats, None, &Role::of(RoleKind::Operator)).await?;
    let system = match &args.system_url {
        Some(url) => Some(
            crate::nats::connect_list(nats, url, timeout)
                .await
                .context("--system-url (BATON_SYSTEM_URL)")?,
        ),
        None => None,
    };
    let (servers, unreachable) = servers(nats, &connection, system.as_ref(), timeout).await?;
    let jetstream = jetstream::new(connection.client().clone());
    let read = async {
        let (streams, missing) = streams(&jetstream, &subjects).await?;
        let consumers = consumers(&jetstream, &subjects).await?;
        anyhow::Ok((streams, missing, consumers))
    };
    let (streams, missing, consumers, unreadable) = match read.await {
        Ok((streams, missing, consumers)) => (streams, missing, consumers, None),
        Err(err) => (
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Some(crate::report(&err)),
        ),
    };
    let live = live_agents(&connection, &subjects, timeout).await;
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
        claim_threshold: args.claim_threshold,
        stale_after: Duration::from_secs(args.stale_after_secs),
        now,
    };
    let findings = checks::all(&facts);
    if args.json {
        let errors = findings.iter().filter(|f| f.level == Level::Error).count();
        let warnings = findings.iter().filter(|f| f.level == Level::Warn).count();
        let report = serde_json::json!({
            "findings": findings,
            "errors": errors,
            "warnings": warnings,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&findings));
    }
    let healthy = findings.iter().all(|f| f.level < Level::Warn);
    Ok(if healthy {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}

/// The findings as text: one line each, its fix indented below.
fn render(findings: &[Finding]) -> String {
    let mut text = String::new();
    for finding in findings {
        let mark = match finding.level {
            Level::Ok => "ok   ",
            Level::Info => "info ",
            Level::Warn => "WARN ",
            Level::Error => "ERROR",
        };
        text.push_str(&format!(
            "{mark} {:<9} {}\n",
            finding.check, finding.message
        ));
        if let Some(fix) = &finding.fix {
            text.push_str(&format!("{:16}fix: {fix}\n", ""));
        }
    }
    let count = |level| findings.iter().filter(|f| f.level == level).count();
    text.push_str(&format!(
        "{} error(s), {} warning(s)\n",
        count(Level::Error),
        count(Level::Warn)
    ));
    text
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
        Some(system) => varz(system, timeout).await,
        None if connection.may_publish(VARZ).await => varz(connection.client(), timeout).await,
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

/// Each server's fsync setting, by server name; empty when no server answers.
async fn varz(client: &async_nats::Client, timeout: Duration) -> BTreeMap<String, Sync> {
    let inbox = client.new_inbox();
    let mut found = BTreeMap::new();
    let Ok(mut answers) = client.subscribe(inbox.clone()).await else {
        return found;
    };
    if client
        .publish_with_reply(VARZ, inbox, bytes::Bytes::new())
        .await
        .is_err()
    {
        return found;
    }
    // Every server answers; stop once none has for a moment.
    let mut wait = timeout;
    while let Ok(Some(answer)) = tokio::time::timeout(wait, answers.next()).await {
        wait = Duration::from_millis(300);
        let Ok(varz) = serde_json::from_slice::<serde_json::Value>(&answer.payload) else {
            continue;
        };
        let name = varz["server"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let config = &varz["data"]["jetstream"]["config"];
        let sync = if config["sync_always"].as_bool() == Some(true) {
            Sync::Always
        } else {
            // Nanoseconds; the server's default is two minutes.
            let nanos = config["sync_interval"].as_u64().filter(|n| *n > 0);
            Sync::Every(nanos.map_or(Duration::from_secs(120), Duration::from_nanos))
        };
        found.insert(name, sync);
    }
    found
}

/// Baton's streams that exist, and those that do not.
async fn streams(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
) -> anyhow::Result<(Vec<StreamFacts>, Vec<String>)> {
    let names = [
        (subjects.tasks_stream(), true),
        (subjects.events_stream(), true),
        (subjects.dlq_stream(), true),
        (format!("KV_{}", subjects.joins_bucket()), false),
        (format!("KV_{}", subjects.inbox_bucket()), false),
        (format!("OBJ_{}", subjects.claims_bucket()), false),
    ];
    let (mut found, mut missing) = (Vec::new(), Vec::new());
    for (name, deduplicated) in names {
        let mut stream = match jetstream.get_stream(&name).await {
            Ok(stream) => stream,
            Err(err) if stream_not_found(&err) => {
                missing.push(name);
                continue;
            }
            Err(err) => {
                return Err(anyhow::anyhow!("{err}")).with_context(|| {
                    format!(
                        "cannot read stream {name}: is JetStream enabled, and may this user read stream info \
                         (`baton permissions operator`)?"
                    )
                });
            }
        };
        let info = stream
            .info()
            .await
            .map_err(|err| anyhow::anyhow!("{err}"))?;
        let lagging = info
            .cluster
            .iter()
            .flat_map(|cluster| &cluster.replicas)
            .filter(|peer| peer.offline || !peer.current)
            .map(|peer| peer.name.clone())
            .collect();
        found.push(StreamFacts {
            name,
            replicas: info.config.num_replicas,
            duplicate_window: info.config.duplicate_window,
            deduplicated,
            lagging,
        });
    }
    Ok((found, missing))
}

fn stream_not_found(err: &jetstream::context::GetStreamError) -> bool {
    matches!(
        err.kind(),
        jetstream::context::GetStreamErrorKind::JetStream(err)
            if err.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
    )
}

/// The consumers of the tasks stream.
async fn consumers(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
) -> anyhow::Result<Vec<ConsumerFacts>> {
    let name = subjects.tasks_stream();
    let Ok(stream) = jetstream.get_stream(&name).await else {
        return Ok(Vec::new());
    };
    let mut listed = stream.consumers();
    let mut found = Vec::new();
    while let Some(info) = listed.next().await {
        let info = info
            .map_err(|err| anyhow::anyhow!("{err}"))
            .with_context(|| format!("cannot list the consumers of {name}"))?;
        let last_active = [info.delivered.last_active, info.ack_floor.last_active]
            .into_iter()
            .flatten()
            .chain([info.created])
            .map(|at| at.unix_timestamp())
            .max()
            .unwrap_or(0);
        found.push(ConsumerFacts {
            agent: info.name.strip_prefix("agent-").map(str::to_owned),
            name: info.name,
            ack_wait: info.config.ack_wait,
            max_deliver: info.config.max_deliver,
            waiting: info.num_waiting,
            pending: info.num_pending,
            last_active,
        });
    }
    Ok(found)
}

/// Live instances per agent type, from the registry, if one answers.
async fn live_agents(
    connection: &Connection,
    subjects: &Subjects,
    timeout: Duration,
) -> Option<BTreeMap<String, u32>> {
    let registry = baton_worker::RegistryClient::new(connection.client().clone(), subjects)
        .with_budget(timeout);
    let answer = registry
        .lookup(&baton_proto::LookupRequest::default())
        .await
        .ok()?;
    Some(
        answer
            .candidates
            .into_iter()
            .map(|c| (c.agent, c.instances))
            .collect(),
    )
}
