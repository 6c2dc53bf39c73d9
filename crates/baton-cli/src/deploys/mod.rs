//! Deploying new versions of an agent type: rolling a version out (and
//! back), and what each version holds. What the commands share lives here:
//! an agent type's versions as they stand ([`Standing`]).

mod holding;
pub mod retire;
pub mod rollout;
pub mod versions;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream;
use baton_proto::{AgentName, LookupRequest, Rollout, Subjects};
use baton_worker::state::rollouts;
use futures::TryStreamExt as _;
use serde::Serialize;

use crate::nats::NatsArgs;

/// What the deploy commands use: the operator's connection.
pub struct Deploys {
    pub jetstream: jetstream::Context,
    pub subjects: Subjects,
    pub store: async_nats::jetstream::kv::Store,
    pub registry: baton_worker::RegistryClient,
}

impl Deploys {
    pub async fn open(
        nats: &NatsArgs,
        subjects: Subjects,
        registry_ms: u64,
    ) -> anyhow::Result<Self> {
        let client =
            crate::nats::client(nats, subjects.clone(), baton_ops::RoleKind::Operator).await?;
        let jetstream = client.jetstream().clone();
        let store = rollouts::bucket(&jetstream, &subjects, nats.replicas())
            .await
            .with_context(|| {
                format!(
                    "cannot open the rollouts bucket ({}): the deploy commands need the operator role's rights (`baton permissions operator`)",
                    subjects.rollouts_bucket()
                )
            })?;
        let registry = baton_worker::RegistryClient::new(jetstream.client(), &subjects)
            .with_budget(Duration::from_millis(registry_ms));
        Ok(Self {
            jetstream,
            subjects,
            store,
            registry,
        })
    }

    /// `agent`'s rollout and its revision, or an error that says why it has
    /// none.
    pub async fn rollout(&self, agent: &AgentName) -> anyhow::Result<(Rollout, u64)> {
        if let Some(found) = rollouts::read(&self.store, agent.as_str()).await? {
            return Ok(found);
        }
        let served = baton_worker::is_served(&self.jetstream, &self.subjects, agent).await?;
        if served {
            anyhow::bail!(
                "agent type {agent} has no versions yet: its workers name none. Start a worker with a version (`version = \"...\"` in its spec, or `baton worker --version V`); the first version to run becomes current"
            );
        }
        anyhow::bail!(
            "unknown agent type {agent}: no worker has ever served it (no consumer {} on the tasks stream); check the name against `baton agents`",
            Subjects::agent_consumer(agent)
        )
    }

    /// What the deploy commands read of `agent`'s versions, once: its
    /// consumers, its live workers, and what holds each version.
    pub async fn gather(&self, agent: &AgentName, rollout: &Rollout) -> anyhow::Result<Gathered> {
        let stream = self.subjects.tasks_stream();
        let stream = self.jetstream.get_stream_no_info(&stream).await?;
        let prefix = format!("{}@", Subjects::agent_consumer(agent));
        let mut queues: BTreeMap<String, Queue> = BTreeMap::new();
        let mut consumers = stream.consumers();
        while let Some(info) = consumers.try_next().await? {
            let name = info.name.clone();
            let queue = Queue {
                pending: info.num_pending,
                unacked: u64::try_from(info.num_ack_pending).unwrap_or(u64::MAX),
                pulling: u64::try_from(info.num_waiting).unwrap_or(u64::MAX),
            };
            if let Some(version) = name.strip_prefix(&prefix) {
                queues.insert(version.to_owned(), queue);
            } else if name == Subjects::agent_consumer(agent) {
                queues.insert(String::new(), queue);
            }
        }
        let workers = self.workers(agent).await;
        let held = holding::held(&self.jetstream, &self.subjects, agent, &rollout.upgrading);
        Ok(Gathered {
            queues,
            workers,
            held: held.await?,
        })
    }

    /// The live workers of each version of `agent`, from the registry;
    /// `None` when no registry answers.
    async fn workers(&self, agent: &AgentName) -> Option<BTreeMap<String, u32>> {
        let answer = match self.registry.lookup(&LookupRequest::default()).await {
            Ok(answer) => answer,
            Err(err) => {
                tracing::warn!(error = %err, "the registry did not answer");
                return None;
            }
        };
        let found = answer
            .candidates
            .into_iter()
            .find(|c| c.agent == agent.as_str());
        Some(found.map(|c| c.versions).unwrap_or_default())
    }
}

/// What the deploy commands read of an agent type's versions.
pub struct Gathered {
    /// Each version's consumer, and the type's own (under "").
    queues: BTreeMap<String, Queue>,
    /// Live workers by version, from the registry; `None` when none answered.
    workers: Option<BTreeMap<String, u32>>,
    /// What holds each version.
    held: BTreeMap<String, holding::Holding>,
}

impl Gathered {
    /// Live workers of `version`; `None` when no registry answered.
    pub fn workers_of(&self, version: &str) -> Option<u32> {
        (self.workers.as_ref()).map(|w| w.get(version).copied().unwrap_or(0))
    }

    /// What holds `version`.
    pub fn holding(&self, version: &str) -> holding::Holding {
        self.held.get(version).copied().unwrap_or_default()
    }
}

/// A version's consumer: what waits, what runs, and who pulls.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Queue {
    /// Messages waiting.
    pub pending: u64,
    /// Messages delivered and not yet acknowledged.
    pub unacked: u64,
    /// Pull requests waiting: workers that are idle now.
    pub pulling: u64,
}

/// One version of an agent type as it stands.
#[derive(Debug, Clone, Serialize)]
pub struct VersionRow {
    pub version: String,
    pub state: &'static str,
    /// Percent of new sessions it takes.
    pub weight: u8,
    /// Live workers, by the registry; `None` when no registry answered.
    pub workers: Option<u32>,
    /// Messages waiting on its consumer.
    pub pending: u64,
    /// Messages its workers have and have not acknowledged.
    pub unacked: u64,
    /// Tasks pinned to it anywhere on the tasks stream (at any agent type).
    pub tasks: u64,
    /// Tasks pinned to it in the inbox.
    pub inbox: u64,
    /// Conversations pinned to it.
    pub conversations: u64,
    /// Delegations pinned to it that wait for their children.
    pub delegations: u64,
}

/// An agent type's versions as they stand.
#[derive(Debug, Clone, Serialize)]
pub struct Standing {
    pub agent: String,
    pub current: String,
    pub previous: Option<String>,
    pub versions: Vec<VersionRow>,
    /// Messages on the agent type's own subject, which no versioned worker
    /// takes (sent by a sender of an earlier release, or before the type
    /// was versioned): unversioned workers drain them.
    pub unversioned: Queue,
    /// Whether a registry answered (else no worker counts are known).
    pub registry: bool,
}

impl Standing {
    /// `rollout`'s versions as `gathered` found them.
    pub fn of(rollout: &Rollout, gathered: &Gathered) -> Self {
        let weights = rollout.weights();
        let mut names: Vec<&String> = gathered.queues.keys().filter(|v| !v.is_empty()).collect();
        names.extend(weights.keys());
        names.extend(&rollout.retired);
        names.extend(gathered.workers.iter().flat_map(BTreeMap::keys));
        names.extend(gathered.held.keys());
        names.sort();
        names.dedup();
        let versions = names
            .into_iter()
            .map(|version| {
                let queue = gathered.queues.get(version).copied().unwrap_or_default();
                let held = gathered.holding(version);
                VersionRow {
                    state: rollout.role(version).as_str(),
                    weight: weights.get(version).copied().unwrap_or(0),
                    workers: gathered.workers_of(version),
                    pending: queue.pending,
                    unacked: queue.unacked,
                    tasks: held.messages,
                    inbox: held.inbox,
                    conversations: held.conversations,
                    delegations: held.delegations,
                    version: version.clone(),
                }
            })
            .collect();
        Self {
            agent: rollout.agent.clone(),
            current: rollout.current.clone(),
            previous: rollout.previous.clone(),
            versions,
            unversioned: gathered.queues.get("").copied().unwrap_or_default(),
            registry: gathered.workers.is_some(),
        }
    }

    /// Prints it as a table.
    pub fn print(&self) {
        let rows = self.versions.iter().map(|row| {
            vec![
                row.version.clone(),
                row.state.to_owned(),
                format!("{}%", row.weight),
                row.workers
                    .map_or_else(|| "?".to_owned(), |n| n.to_string()),
                row.pending.to_string(),
                row.unacked.to_string(),
                row.tasks.to_string(),
                row.inbox.to_string(),
                row.conversations.to_string(),
                row.delegations.to_string(),
            ]
        });
        let header = [
            "VERSION",
            "STATE",
            "WEIGHT",
            "WORKERS",
            "PENDING",
            "UNACKED",
            "TASKS",
            "INBOX",
            "CONVERSATIONS",
            "DELEGATIONS",
        ];
        crate::learning::registry::print_table(&header, rows);
        if self.unversioned.pending + self.unversioned.unacked > 0 {
            println!(
                "{} messages wait on {}'s own subject (sent by a process that knows no versions): its versioned workers move them to their versions",
                self.unversioned.pending + self.unversioned.unacked,
                self.agent
            );
        }
        if !self.registry {
            println!("(WORKERS: no registry answered; start one with `baton registry`)");
        }
    }
}

/// `name` as an agent type, or an error that says why not.
pub fn agent_type(name: &str) -> anyhow::Result<AgentName> {
    AgentName::new(name).map_err(|err| anyhow::anyhow!("{err}"))
}

/// `label` as a version, or an error that says why not.
pub fn version(label: &str) -> anyhow::Result<baton_proto::Version> {
    baton_proto::Version::new(label).map_err(|err| anyhow::anyhow!("{err}"))
}

/// An agent type and one of its versions, as `--as TYPE@VERSION` names
/// them: what a fork or a replay runs that type on.
#[derive(Debug, Clone)]
pub struct Pin {
    pub agent: AgentName,
    pub version: baton_proto::Version,
}

impl std::str::FromStr for Pin {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let Some((agent, label)) = text.rsplit_once('@') else {
            return Err(format!(
                "{text:?} is not TYPE@VERSION: name an agent type and one of its versions, as `helper@2`"
            ));
        };
        Ok(Self {
            agent: agent_type(agent).map_err(|err| err.to_string())?,
            version: version(label).map_err(|err| err.to_string())?,
        })
    }
}

impl Pin {
    /// `pins` as agent type to version, each checked to take work: a
    /// worker of it has run, and it is not retired.
    pub async fn checked(
        pins: &[Pin],
        client: &baton_worker::Client,
    ) -> anyhow::Result<BTreeMap<String, String>> {
        let mut onto = BTreeMap::new();
        for pin in pins {
            client.check_version(&pin.agent, &pin.version).await?;
            let earlier = onto.insert(pin.agent.to_string(), pin.version.to_string());
            if let Some(earlier) = earlier.filter(|e| *e != pin.version.as_str()) {
                anyhow::bail!(
                    "--as names two versions of {} ({earlier} and {}): name one",
                    pin.agent,
                    pin.version
                );
            }
        }
        Ok(onto)
    }
}
