//! The checks of `baton doctor`, over facts already read from the servers:
//! each returns findings, and a finding that is not `ok` says how to fix it.

use std::time::Duration;

use super::facts::{ConsumerFacts, Facts, StreamFacts, Sync};
pub(super) use super::finding::{Finding, Level};
use super::workers::consumers;
pub(crate) use super::workers::human;

/// The oldest nats-server Baton supports.
pub const MIN_VERSION: (u32, u32) = (2, 10);

/// Every check, in the order they are printed.
pub(crate) fn all(facts: &Facts) -> Vec<Finding> {
    let mut findings = servers(facts);
    findings.extend(replicas(facts));
    findings.extend(dedup(facts));
    findings.extend(payload(facts));
    findings.extend(fsync(facts));
    findings.extend(rights(facts));
    findings.extend(consumers(facts));
    findings.extend(super::workers::rollouts(facts));
    findings.extend(super::workers::gated(facts));
    findings.extend(limits(facts));
    findings.extend(super::storage::check(facts));
    findings.extend(super::signins::check(facts));
    findings
}

/// Each shared model rate limit: its rate now and where it comes from, the
/// window of calls in flight, and the headers the provider sends.
fn limits(facts: &Facts) -> Vec<Finding> {
    facts
        .limits
        .iter()
        .map(|limit| {
            let whence = match limit.source.as_str() {
                "configured" => "the ceiling from [llm.limits]".to_owned(),
                "headers" => format!(
                    "the ceiling from the provider's {} headers",
                    limit.headers.join(", ")
                ),
                _ if limit.cut_at == 0 => "nothing known yet: slow start by the window in flight, no 429 so far".to_owned(),
                _ => "learned from the provider's 429s".to_owned(),
            };
            let ceiling = if limit.ceiling > 0.0 {
                format!(", under {:.2}/s", limit.ceiling)
            } else {
                String::new()
            };
            let last = if limit.cut_at > 0 {
                format!(", the last {}s ago", facts.now.saturating_sub(limit.cut_at).max(0))
            } else {
                String::new()
            };
            let rate = if limit.unpaced {
                "not paced".to_owned()
            } else {
                format!("{:.2} requests/s", limit.rate)
            };
            let heard = if limit.headers.is_empty() {
                "no rate-limit headers heard".to_owned()
            } else {
                format!("headers heard: {}", limit.headers.join(", "))
            };
            let subject = format!("{} {}", limit.endpoint, limit.model);
            let message = format!(
                "model {} at {}: {rate}{ceiling} ({} {whence}); window {:.0} in flight ({} now); {heard}; {} call(s) refused with 429{last}",
                limit.model, limit.endpoint, limit.source, limit.window, limit.in_flight, limit.refused
            );
            Finding::new("limits", Level::Info, &subject, message)
        })
        .collect()
}

/// `major.minor` of a version such as `2.10.22` or `v2.11.0-RC.1`.
pub(crate) fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.trim_start_matches('v').split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

fn servers(facts: &Facts) -> Vec<Finding> {
    let mut found = Vec::new();
    for url in &facts.unreachable {
        found.push(
            Finding::new("servers", Level::Error, url, format!("server {url} does not answer"))
                .fix("start it, or remove it from NATS_URL (and from the cluster's routes) if it is gone"),
        );
    }
    for server in &facts.servers {
        let old = major_minor(&server.version).is_none_or(|version| version < MIN_VERSION);
        if old {
            found.push(
                Finding::new(
                    "servers",
                    Level::Error,
                    &server.name,
                    format!(
                        "{} runs nats-server {}, and Baton needs {}.{} or later",
                        server.name, server.version, MIN_VERSION.0, MIN_VERSION.1
                    ),
                )
                .fix("upgrade nats-server on this node (one node at a time, in a cluster)"),
            );
        }
        if !server.jetstream {
            found.push(
                Finding::new(
                    "servers",
                    Level::Error,
                    &server.name,
                    format!("JetStream is not enabled on {}", server.name),
                )
                .fix(
                    "start it with -js, or add a `jetstream { store_dir: … }` block to its config",
                ),
            );
        }
    }
    if found.is_empty() {
        let mut versions: Vec<&str> = facts.servers.iter().map(|s| s.version.as_str()).collect();
        versions.sort_unstable();
        versions.dedup();
        found.push(Finding::new(
            "servers",
            Level::Ok,
            "",
            format!(
                "{} server(s), nats-server {}, JetStream on each",
                facts.servers.len(),
                versions.join(", ")
            ),
        ));
    }
    found
}

/// Servers that run JetStream: the replicas a stream can have.
fn jetstream_nodes(facts: &Facts) -> usize {
    facts.servers.iter().filter(|s| s.jetstream).count()
}

fn replicas(facts: &Facts) -> Vec<Finding> {
    let nodes = jetstream_nodes(facts);
    let mut found = Vec::new();
    if let Some(why) = &facts.unreadable {
        found.push(
            Finding::new("replicas", Level::Error, "", format!("cannot read Baton's streams: {why}"))
                .fix("run baton doctor as a user of the account Baton runs in, with the rights of `baton permissions operator`"),
        );
    }
    if nodes == 2 {
        found.push(
            Finding::new(
                "replicas",
                Level::Warn,
                "",
                "the cluster has 2 JetStream nodes: a replicated stream cannot elect a leader once one is lost"
                    .to_owned(),
            )
            .fix("run 3 (or 5) JetStream nodes"),
        );
    }
    for stream in &facts.streams {
        found.extend(stream_replicas(stream, nodes));
    }
    if found.is_empty() && !facts.streams.is_empty() {
        found.push(Finding::new(
            "replicas",
            Level::Ok,
            "",
            format!(
                "{} stream(s) with replicas fitting {nodes} JetStream node(s)",
                facts.streams.len()
            ),
        ));
    }
    for name in &facts.missing {
        found.push(
            Finding::new(
                "replicas",
                Level::Info,
                name,
                format!("{name} does not exist yet"),
            )
            .fix("it is created by the first baton process that needs it"),
        );
    }
    found
}

/// What is wrong with one stream's replicas on `nodes` JetStream nodes.
fn stream_replicas(stream: &StreamFacts, nodes: usize) -> Vec<Finding> {
    let wanted = nodes.min(3);
    let mut found = Vec::new();
    let name = &stream.name;
    if stream.replicas > nodes.max(1) {
        found.push(
            Finding::new(
                "replicas",
                Level::Error,
                name,
                format!(
                    "{name} has {} replicas, but only {nodes} JetStream node(s) answered",
                    stream.replicas
                ),
            )
            .fix("bring the missing nodes back, or lower the stream's replicas"),
        );
    } else if nodes >= 3 && stream.replicas < wanted {
        found.push(
            Finding::new(
                "replicas",
                Level::Warn,
                name,
                format!(
                    "{name} has {} replica(s) on a {nodes}-node cluster: losing the node that holds it stalls \
                     every session that needs it, and a node that never returns loses them",
                    stream.replicas
                ),
            )
            .fix(format!(
                "start any baton process once with --replicas {wanted} (BATON_REPLICAS={wanted}): it raises the \
                 count in place"
            )),
        );
    }
    if !stream.lagging.is_empty() {
        found.push(Finding::new(
            "replicas",
            Level::Warn,
            name,
            format!("{name}: replica(s) on {} are offline or behind", stream.lagging.join(", ")),
        )
        .fix("check those nodes; the stream keeps working while a majority of its replicas is current"));
    }
    found
}

fn dedup(facts: &Facts) -> Vec<Finding> {
    let mut found = Vec::new();
    let mut widest: Option<(Duration, &ConsumerFacts)> = None;
    for consumer in &facts.consumers {
        match baton_nats::redelivery_span(consumer.ack_wait, consumer.max_deliver) {
            Some(span) => {
                if widest.is_none_or(|(wide, _)| span > wide) {
                    widest = Some((span, consumer));
                }
            }
            None => found.push(
                Finding::new(
                    "dedup",
                    Level::Warn,
                    &consumer.name,
                    format!(
                        "consumer {} redelivers without limit, so no duplicate window covers its redeliveries",
                        consumer.name
                    ),
                )
                .fix("restart its workers with this version of baton: they set max_deliver (--max-deliveries + 1)"),
            ),
        }
    }
    let Some((span, consumer)) = widest else {
        return found;
    };
    let before = found.len();
    for stream in facts.streams.iter().filter(|s| s.deduplicated) {
        if stream.duplicate_window < span {
            found.push(
                Finding::new(
                    "dedup",
                    Level::Warn,
                    &stream.name,
                    format!(
                        "{}'s duplicate window is {}, but consumer {} may redeliver a message up to {} after its \
                         first delivery (ack_wait {} × max_deliver {}): a handoff redelivered that late is \
                         published twice",
                        stream.name,
                        human(stream.duplicate_window),
                        consumer.name,
                        human(span),
                        human(consumer.ack_wait),
                        consumer.max_deliver
                    ),
                )
                .fix(format!(
                    "restart a worker of that consumer (workers widen the window at start-up when their user may \
                     update the stream), or set the stream's duplicate window to at least {}",
                    human(span)
                )),
            );
        }
    }
    if found.len() == before {
        found.push(Finding::new(
            "dedup",
            Level::Ok,
            "",
            format!(
                "duplicate windows cover every redelivery (the longest: {} for {})",
                human(span),
                consumer.name
            ),
        ));
    }
    found
}

fn payload(facts: &Facts) -> Vec<Finding> {
    let Some(smallest) = facts.servers.iter().map(|s| s.max_payload).min() else {
        return Vec::new();
    };
    let largest = facts
        .servers
        .iter()
        .map(|s| s.max_payload)
        .max()
        .unwrap_or(smallest);
    let mut found = Vec::new();
    if largest != smallest {
        found.push(
            Finding::new(
                "payload",
                Level::Warn,
                "",
                format!(
                    "the servers' max_payload differ ({smallest} to {largest} bytes): a worker sizes its claim-check \
                     by the server it connects to, so an envelope accepted by one node may be refused by another"
                ),
            )
            .fix("set the same max_payload on every node"),
        );
    }
    let threshold = facts.claim_threshold.unwrap_or(smallest / 2);
    if threshold >= smallest {
        found.push(
            Finding::new(
                "payload",
                Level::Error,
                "",
                format!(
                    "the claim-check threshold ({threshold} bytes) is not below max_payload ({smallest} bytes): an \
                     envelope between the two is neither claim-checked nor publishable, and fails as too_large"
                ),
            )
            .fix(format!(
                "lower --claim-threshold (BATON_CLAIM_THRESHOLD) below {smallest}, or unset it (half of max_payload)"
            )),
        );
    } else if found.is_empty() {
        found.push(Finding::new(
            "payload",
            Level::Ok,
            "",
            format!("max_payload {smallest} bytes; contexts over {threshold} bytes go through the claim-check"),
        ));
    }
    found
}

fn fsync(facts: &Facts) -> Vec<Finding> {
    let replicated = jetstream_nodes(facts) >= 3;
    let mut found = Vec::new();
    for server in facts.servers.iter().filter(|s| s.jetstream) {
        match server.sync {
            Sync::Always => {}
            Sync::Every(interval) => {
                let risk = if replicated {
                    "a power loss on a majority of nodes at once"
                } else {
                    "a power loss or kernel crash on this machine"
                };
                found.push(
                    Finding::new(
                        "fsync",
                        Level::Warn,
                        &server.name,
                        format!(
                            "{} writes JetStream data to disk every {}: {risk} can lose handoffs acknowledged in \
                             that time",
                            server.name,
                            human(interval)
                        ),
                    )
                    .fix("set `jetstream { sync_interval: always }` in its config (each write then waits for the disk: fewer tasks per second)"),
                );
            }
            Sync::Unknown => found.push(
                Finding::new(
                    "fsync",
                    Level::Info,
                    &server.name,
                    format!(
                        "{} does not report its fsync setting to this user",
                        server.name
                    ),
                )
                .fix("run baton doctor as a user of the system account to check it"),
            ),
        }
    }
    if found.is_empty() && !facts.servers.is_empty() {
        found.push(Finding::new(
            "fsync",
            Level::Ok,
            "",
            "every server writes to disk before it acknowledges".to_owned(),
        ));
    }
    found
}

/// Subjects the operator role uses that the server says this user may not
/// publish to: the doctor and the operator's other commands would be refused
/// there.
fn rights(facts: &Facts) -> Vec<Finding> {
    if facts.refused.is_empty() {
        return Vec::new();
    }
    let shown: Vec<&str> = facts.refused.iter().take(5).map(String::as_str).collect();
    let more = facts.refused.len().saturating_sub(shown.len());
    let message = format!(
        "this user may not publish to {} subject(s) the operator role uses: {}{}",
        facts.refused.len(),
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    );
    vec![
        Finding::new("rights", Level::Warn, "", message)
            .fix("give the user that runs baton doctor the block of `baton permissions operator`"),
    ]
}
