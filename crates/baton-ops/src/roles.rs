//! The roles a `baton` process runs as, and what each does on NATS: the
//! union of the footprints its components declare next to their code.

use baton_proto::footprint::{Footprint, USER_INFO};
use baton_proto::{AgentName, Subjects};

/// What a `baton` process does, as far as NATS permissions go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum RoleKind {
    /// A worker of one agent type (`baton worker`).
    Worker,
    /// The ingress router (`baton router`).
    Router,
    /// A registry replica (`baton registry`).
    Registry,
    /// Sends tasks, follows and cancels them (`baton send`, `watch`, `cancel`, `agents`,
    /// `mcp serve`).
    Client,
    /// Dead letters, the human inbox and checks (`baton dlq`, `baton inbox`, `baton doctor`,
    /// `baton console`, `baton a2a serve`).
    Operator,
}

impl RoleKind {
    /// The role's name, as `baton permissions` takes it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Worker => "worker",
            Self::Router => "router",
            Self::Registry => "registry",
            Self::Client => "client",
            Self::Operator => "operator",
        }
    }
}

/// A role and, for a worker, its agent type.
#[derive(Debug, Clone)]
pub struct Role {
    /// What the process does.
    pub kind: RoleKind,
    /// A worker's agent type.
    pub agent: Option<AgentName>,
}

/// What a worker's block grants beyond its agent type.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// Agent types the worker may publish to; every one when empty.
    pub to: Vec<AgentName>,
    /// The inbox bucket: the worker runs a human agent, or an LLM agent
    /// whose tool calls may wait for a person.
    pub human: bool,
    /// The version the worker runs, when it names one: its consumer.
    pub version: Option<baton_proto::Version>,
    /// The MCP servers (by URL) whose OAuth sign-ins it reads and
    /// refreshes (`auth = "oauth"`), and no other server's.
    pub mcp_logins: Vec<String>,
}

impl Role {
    /// A worker of `agent`.
    #[must_use]
    pub fn worker(agent: &AgentName) -> Self {
        Self {
            kind: RoleKind::Worker,
            agent: Some(agent.clone()),
        }
    }

    /// A role other than a worker.
    #[must_use]
    pub fn of(kind: RoleKind) -> Self {
        Self { kind, agent: None }
    }

    /// The role `kind`, with `agent` for a worker.
    ///
    /// # Errors
    ///
    /// A worker without its agent type, or another role with one.
    pub fn new(kind: RoleKind, agent: Option<AgentName>) -> Result<Self, crate::Error> {
        match (kind, agent) {
            (RoleKind::Worker, Some(agent)) => Ok(Self::worker(&agent)),
            (RoleKind::Worker, None) => Err(crate::Error::new(
                crate::ErrorKind::Usage,
                "name the worker's agent type: `baton permissions worker <AGENT>`".to_owned(),
            )),
            (kind, None) => Ok(Self::of(kind)),
            (_, Some(_)) => Err(crate::Error::new(
                crate::ErrorKind::Usage,
                "only the worker role takes an agent type".to_owned(),
            )),
        }
    }

    /// The connection name the server shows for this role.
    #[must_use]
    pub fn connection_name(&self) -> String {
        match (&self.kind, &self.agent) {
            (RoleKind::Worker, Some(agent)) => format!("baton worker {agent}"),
            (kind, _) => format!("baton {}", kind.name()),
        }
    }

    /// The role's own reply subjects: `_INBOX_<role>` (`_INBOX_worker_<agent>`).
    #[must_use]
    pub fn default_inbox_prefix(&self) -> String {
        match (&self.kind, &self.agent) {
            (RoleKind::Worker, Some(agent)) => format!("_INBOX_worker_{agent}"),
            (kind, _) => format!("_INBOX_{}", kind.name()),
        }
    }

    /// Everything the role does on NATS, replying on `inbox`.
    #[must_use]
    pub fn footprint(&self, subjects: &Subjects, inbox: &str, grants: &Grants) -> Footprint {
        match (&self.kind, &self.agent) {
            (RoleKind::Worker, Some(agent)) => Footprint::jetstream_user(inbox)
                .with(baton_worker::footprints::worker(
                    subjects, agent, &grants.to,
                ))
                // LLM agents: the hop journal.
                .with(baton_agents::footprints::journal(subjects))
                // LLM agents with [llm.limits]: the shared rate limits.
                .with(baton_agents::footprints::limits(subjects))
                .with(if grants.human {
                    // Listed too: an LLM agent counts the approvals waiting.
                    baton_agents::footprints::inbox(subjects, true)
                } else {
                    Footprint::new()
                })
                .with(baton_mcp_client::footprint(subjects, &grants.mcp_logins))
                .with(
                    grants
                        .version
                        .as_ref()
                        .map_or_else(Footprint::new, |version| {
                            baton_worker::footprints::version_worker(subjects, agent, version)
                        }),
                ),
            (RoleKind::Router, _) => {
                Footprint::jetstream_user(inbox).with(baton_router::footprint(subjects))
            }
            // Its own permissions, which every process reads at start; no JetStream.
            (RoleKind::Registry, _) => Footprint::new()
                .publishes([USER_INFO])
                .subscribes([format!("{inbox}.>")])
                .with(baton_registry::footprint(subjects)),
            (RoleKind::Client, _) => {
                Footprint::jetstream_user(inbox).with(baton_client::footprints::client(subjects))
            }
            (RoleKind::Operator, _) => Footprint::jetstream_user(inbox).with(operator(subjects)),
            (RoleKind::Worker, None) => Footprint::jetstream_user(inbox),
        }
    }
}

/// An operator's tools: dead letters, sessions read from the stream, the
/// console, the inbox, cancels, the A2A gateway's task index and the doctor.
fn operator(subjects: &Subjects) -> Footprint {
    baton_nats::footprints::streams(subjects, false)
        .with(baton_client::footprints::dead_letters(subjects))
        .with(baton_client::footprints::session_reader(subjects))
        .with(baton_nats::footprints::served(subjects))
        .with(baton_console::footprint(subjects))
        .with(baton_agents::footprints::inbox(subjects, true))
        // Decisions on waiting tool calls go into the hop journal.
        .with(baton_agents::footprints::journal(subjects))
        .with(baton_nats::footprints::claims(subjects))
        .with(baton_nats::footprints::cancels(subjects, true))
        .with(baton_a2a::footprint(subjects))
        // The A2A gateway's contexts are conversations; `baton conversations
        // delete` removes their turns' events.
        .with(baton_nats::footprints::conversations(subjects))
        .with(baton_nats::footprints::deleting_conversations(subjects))
        .with(crate::doctor::footprint(subjects))
        .with(deploys(subjects))
        // `baton mcp login` keeps the sign-ins it makes.
        .with(Footprint::kv(&subjects.mcp_auth_bucket()))
}

/// `baton rollout`, `versions` and `retire`: the rollouts, and where work
/// pinned to a version waits (the tasks stream's messages, the joins).
fn deploys(subjects: &Subjects) -> Footprint {
    let tasks = subjects.tasks_stream();
    baton_nats::footprints::rollouts(subjects)
        .with(baton_router::gatekeeper::footprint(subjects))
        .with(Footprint::kv(&subjects.joins_bucket()))
        .publishes([baton_proto::footprint::api(format_args!(
            "STREAM.MSG.GET.{tasks}"
        ))])
}
