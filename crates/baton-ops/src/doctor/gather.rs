//! What the doctor reads from a deployment's JetStream: the streams and
//! their replicas, the consumers of the tasks stream, the servers' fsync
//! setting, and the registry's live workers.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream;
use baton_proto::Subjects;
use baton_proto::footprint::{Footprint, api};
use futures::StreamExt as _;

use super::{ConsumerFacts, LimitFacts, StreamFacts, Sync};
use crate::{Error, ErrorKind};

/// Every server's `varz`; only the system account may ask.
pub const VARZ: &str = "$SYS.REQ.SERVER.PING.VARZ";

/// Each server's fsync setting, by server name; empty when no server answers.
pub async fn varz(client: &async_nats::Client, timeout: Duration) -> BTreeMap<String, Sync> {
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
pub async fn streams(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
) -> Result<(Vec<StreamFacts>, Vec<String>), Error> {
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
                return Err(Error::new(
                    ErrorKind::Read,
                    format!(
                        "cannot read stream {name}: is JetStream enabled, and may this user read stream info \
                     (`baton permissions operator`)?: {err}"
                    ),
                ));
            }
        };
        let info = stream.info().await.map_err(|err| {
            Error::new(ErrorKind::Read, format!("cannot read stream {name}: {err}"))
        })?;
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
pub async fn consumers(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
) -> Result<Vec<ConsumerFacts>, Error> {
    let name = subjects.tasks_stream();
    let Ok(stream) = jetstream.get_stream(&name).await else {
        return Ok(Vec::new());
    };
    let mut listed = stream.consumers();
    let mut found = Vec::new();
    while let Some(info) = listed.next().await {
        let info = info.map_err(|err| {
            Error::new(
                ErrorKind::Read,
                format!("cannot list the consumers of {name}: {err}"),
            )
        })?;
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
pub async fn live_agents(
    client: &async_nats::Client,
    subjects: &Subjects,
    timeout: Duration,
) -> Option<BTreeMap<String, u32>> {
    let registry = baton_client::RegistryClient::new(client.clone(), subjects).with_budget(timeout);
    let answer = registry
        .lookup(&baton_proto::LookupRequest::default())
        .await
        .ok()?;
    Some(
        answer
            .candidates
            .into_iter()
            .flat_map(|c| {
                let versions: Vec<(String, u32)> = (c.versions.iter())
                    .map(|(version, n)| (format!("{}@{version}", c.agent), *n))
                    .collect();
                std::iter::once((c.agent.to_string(), c.instances)).chain(versions)
            })
            .collect(),
    )
}

/// Every versioned agent type's rollout (none when the bucket does not
/// exist).
///
/// # Errors
///
/// When the bucket exists but cannot be read.
pub async fn rollouts(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
) -> Result<Vec<baton_proto::Rollout>, Error> {
    let bucket = subjects.rollouts_bucket();
    let Ok(store) = jetstream.get_key_value(&bucket).await else {
        return Ok(Vec::new());
    };
    let failed = |err: &dyn std::fmt::Display| {
        Error::new(ErrorKind::Read, format!("cannot read {bucket}: {err}"))
    };
    let mut keys = store.keys().await.map_err(|err| failed(&err))?;
    let mut found = Vec::new();
    while let Some(key) = keys.next().await {
        let key = key.map_err(|err| failed(&err))?;
        if let Some((rollout, _)) = baton_nats::state::rollouts::read(&store, &key)
            .await
            .map_err(|err| failed(&err))?
        {
            found.push(rollout);
        }
    }
    Ok(found)
}

/// The step's sessions of each gated rollout under way in `rollouts`, by
/// agent type, read from the events stream (a rollout whose events cannot
/// be read is left out).
pub async fn gated(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    rollouts: &[baton_proto::Rollout],
) -> BTreeMap<String, (baton_proto::Side, baton_proto::Side)> {
    use baton_client::versions::StepReader;
    let mut found = BTreeMap::new();
    for rollout in rollouts {
        let Some(gated) = rollout.gated.as_ref().filter(|g| g.is_running()) else {
            continue;
        };
        let reader = StepReader::open(jetstream, subjects, &rollout.agent, gated).await;
        let Ok(mut reader) = reader else {
            continue;
        };
        let quiet = std::time::Duration::from_millis(300);
        if reader
            .catch_up(quiet, std::time::Duration::from_secs(10))
            .await
            .is_err()
        {
            continue;
        }
        let sides = (
            reader.tally.side(&rollout.current),
            reader.tally.side(&gated.version),
        );
        found.insert(rollout.agent.to_string(), sides);
    }
    found
}

/// The subjects `footprint` publishes to that the server says the user of
/// `connection` may not (none when the server does not say).
pub async fn refused(connection: &baton_nats::Connection, footprint: &Footprint) -> Vec<String> {
    let mut refused = Vec::new();
    for subject in &footprint.publish {
        if !connection.may_publish(subject).await {
            refused.push(subject.clone());
        }
    }
    refused
}

/// Every shared model rate limit; none when no LLM agent has run yet.
///
/// # Errors
///
/// When the limits bucket exists but cannot be read.
pub async fn limits(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
) -> Result<Vec<LimitFacts>, Error> {
    let all = baton_agents::rate_limits::read_all(jetstream, subjects)
        .await
        .map_err(|err| Error::new(ErrorKind::Read, err.to_string()))?;
    let now = u64::try_from(chrono_now_us()).unwrap_or(0);
    Ok(all
        .unwrap_or_default()
        .into_iter()
        .map(|(_, limit)| LimitFacts {
            unpaced: limit.unpaced,
            window: limit.window,
            in_flight: limit.flying(now),
            headers: limit.headers().into_iter().map(str::to_owned).collect(),
            endpoint: limit.endpoint,
            model: limit.model,
            rate: limit.rate,
            ceiling: limit.ceiling,
            source: limit.source.as_str().to_owned(),
            refused: limit.refused,
            cut_at: i64::try_from(limit.cut_at / 1_000_000).unwrap_or(i64::MAX),
        })
        .collect())
}

/// Now, unix µs.
fn chrono_now_us() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// What the reads here use beyond the streams' info: every consumer of the
/// tasks stream, the joins bucket's info, the registry's live workers and
/// the shared rate limits.
pub(crate) fn footprint(subjects: &Subjects) -> Footprint {
    let tasks = subjects.tasks_stream();
    let text = baton_nats::state::buckets::text_streams(subjects);
    Footprint::new()
        .publishes([
            api(format_args!("CONSUMER.LIST.{tasks}")),
            api(format_args!("STREAM.INFO.KV_{}", subjects.joins_bucket())),
            subjects.lookup(),
        ])
        .publishes(
            text.iter()
                .map(|name| api(format_args!("STREAM.INFO.{name}"))),
        )
        .with(Footprint::kv_watcher(&subjects.limits_bucket()))
        .with(Footprint::kv(&subjects.rollouts_bucket()))
        // The sign-ins to MCP servers, listed (never their tokens shown).
        .with(Footprint::kv_watcher(&subjects.mcp_auth_bucket()))
}
