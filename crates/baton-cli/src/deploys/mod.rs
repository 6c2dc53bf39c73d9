//! Deploying new versions of an agent type: rolling a version out (and
//! back), and what each version holds. What they read and change is
//! `baton_client::versions`'; the commands parse and print.

pub mod eval;
pub mod gated;
pub mod retire;
pub mod rollout;
pub mod versions;

use std::collections::BTreeMap;
use std::time::Duration;

use baton_client::versions::{Standing, Versions};
use baton_proto::{AgentName, Subjects};

use crate::nats::NatsArgs;

/// The versions of a deployment's agent types, over the operator's
/// connection.
pub async fn open(
    nats: &NatsArgs,
    subjects: Subjects,
    registry_ms: u64,
) -> anyhow::Result<Versions> {
    let client = crate::nats::client(nats, subjects.clone(), baton_ops::RoleKind::Operator).await?;
    let jetstream = client.jetstream().clone();
    let versions = Versions::open(
        jetstream,
        subjects,
        nats.replicas(),
        Duration::from_millis(registry_ms),
    )
    .await?;
    Ok(versions)
}

/// Prints `standing` as a table, then the rollout's latest changes.
pub fn print(standing: &Standing) {
    let rows = standing.versions.iter().map(|row| {
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
    if standing.unversioned.pending + standing.unversioned.unacked > 0 {
        println!(
            "{} messages wait on {}'s own subject (sent by a process that knows no versions): its versioned workers move them to their versions",
            standing.unversioned.pending + standing.unversioned.unacked,
            standing.agent
        );
    }
    if !standing.registry {
        println!("(WORKERS: no registry answered; start one with `baton registry`)");
    }
    let shown = standing.history.len().saturating_sub(HISTORY_SHOWN);
    if let Some(changes) = standing.history.get(shown..).filter(|c| !c.is_empty()) {
        println!("changes, latest last:");
        for change in changes {
            println!("  {}", baton_gateway::text::rollout_change(change));
        }
    }
}

/// How many of a rollout's latest changes `baton versions` prints.
const HISTORY_SHOWN: usize = 10;

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
        client: &baton_client::Client,
    ) -> anyhow::Result<BTreeMap<AgentName, baton_proto::Version>> {
        let mut onto = BTreeMap::new();
        for pin in pins {
            client.check_version(&pin.agent, &pin.version).await?;
            let earlier = onto.insert(pin.agent.clone(), pin.version.clone());
            if let Some(earlier) = earlier.filter(|e| *e != pin.version) {
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
