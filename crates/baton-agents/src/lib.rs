//! Baton agents without Rust: deploy a worker per agent type from a spec file.
//!
//! A spec (TOML) names the agent type, what it advertises to the registry,
//! its policies (concurrency, timeout, retries, fallback), its routing rules
//! and its kind:
//!
//! - **exec** ([`ExecRunner`]): any program, envelope JSON in on stdin,
//!   outcome JSON out on stdout;
//! - **llm** ([`LlmRunner`]): an OpenAI-compatible chat-completions model,
//!   with handoff targets and LLM conditions offered as tools;
//! - **human** ([`HumanRunner`], [`Inbox`]): tasks wait in a durable inbox
//!   until a person answers.
//!
//! The parts:
//!
//! - [`spec`]: [`load`], [`check`], [`AgentSpec`] and its errors with file and line;
//! - [`SpecAgent`]: a spec as a [`baton_worker::Agent`]. Its routing rules
//!   ([`baton_worker::Routing`]) are applied by the runtime, exactly as for
//!   a Rust agent.

mod a2a;
pub mod code;
mod evaluating;
mod exec;
mod human;
mod journal;
mod limits;
mod llm;
pub mod signin;
pub mod spec;
mod tools;

use std::time::Duration;

use baton_proto::{AgentName, Subjects};
use baton_worker::{
    Agent, AgentError, Outcome, Recover, Results, RetryPolicy, Routing, Task, WorkerConfig,
};

pub use a2a::A2aRunner;
pub use baton_client::{Decision, Inbox, InboxEntry, Reply};
pub use exec::{EXIT_RETRY, ExecRunner};
pub use human::HumanRunner;

/// The shared model rate limits, as `baton doctor` reads them.
pub mod rate_limits {
    pub use crate::limits::{Schedule, Source, read_all};
}

/// What the agent kinds add to a worker's footprint on NATS.
pub mod footprints {
    pub use crate::journal::footprint as journal;
    pub use crate::limits::footprint as limits;
    pub use baton_client::footprints::inbox;
}
pub use llm::LlmRunner;
pub use spec::{AgentSpec, CheckReport, DelegateSpec, Kind, Problem, check, load};

/// What kept a spec from loading or a spec agent from starting, for callers
/// that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The spec, or the environment it names (a variable not set), is
    /// wrong: starting again will not help until it is fixed.
    Config,
    /// A spec file has problems: the message lists each, with its file,
    /// its line and the fix (as `baton check` does).
    Spec,
    /// NATS or JetStream refused a bucket (the rate limits, the hop
    /// journal, the inbox): often a permission, or the server.
    Nats,
    /// An MCP server of the spec cannot be reached, started or listed.
    Mcp,
    /// The HTTP client cannot be built.
    Http,
    /// An MCP server refused the sign-in a person left (`auth = "oauth"`):
    /// someone must sign in again (a call waits for `baton inbox
    /// authorize`).
    SignIn,
}

baton_proto::error_type! {
    /// Why a spec cannot be loaded or a spec agent cannot start: a kind to
    /// branch on, a message that names the fix, and the cause.
    pub struct Error(ErrorKind);
}

impl Error {
    /// The spec, or the environment it names, is wrong (see
    /// [`ErrorKind::Config`]).
    fn config(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Config, message)
    }
}

enum Runner {
    A2a(Box<A2aRunner>),
    Exec(ExecRunner),
    Llm(Box<LlmRunner>),
    Human(Box<HumanRunner>),
    Chain {
        steps: Vec<AgentName>,
        recover: Option<Recover>,
    },
}

/// An HTTP client builder whose TLS uses ring, the crypto provider the NATS
/// client uses too (installed as the process's default if none is).
pub(crate) fn http() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}

/// Calls tool `name` of `spec`'s MCP servers once with `arguments`, as
/// its worker reaches them (signed in, answering as it would), outside any
/// task and without its journal: to try a server, its sign-in and its
/// tools. Returns the result as the model would read it, and whether the
/// tool said it is an error.
///
/// # Errors
///
/// As a worker's start; a tool the servers do not offer, or arguments that
/// do not match its schema, name the fix.
pub async fn call_tool(
    spec: &AgentSpec,
    tokens: Option<&signin::Tokens>,
    name: &str,
    arguments: serde_json::Value,
) -> Result<(String, bool), Error> {
    let toolbox = tools::Toolbox::connect(&spec.mcp, &[], tokens).await?;
    let Some(tool) = toolbox.find(name) else {
        let offered: Vec<&str> = toolbox
            .tools()
            .iter()
            .map(|tool| tool.name.as_str())
            .collect();
        return Err(Error::config(format!(
            "no tool {name:?} among the spec's MCP servers' (they offer {offered:?})"
        )));
    };
    if let Some(why) = tools::Toolbox::invalid(tool, &arguments) {
        return Err(Error::config(why));
    }
    let key = format!("baton-mcp-call-{}", uuid::Uuid::new_v4());
    // No inbox here: a server's question is declined.
    toolbox.without_person();
    let called = toolbox
        .call(tool, (arguments, &key), &[])
        .await
        .map_err(|err| Error::new(ErrorKind::Mcp, err.to_string()))?;
    Ok((called.text, called.is_error))
}

/// The tools of `spec`'s MCP servers (an LLM spec's `[[mcp]]`), reached
/// now: each tool's name as the model sees it, its class (`read-only`,
/// `idempotent`, `keyed` or `not repeatable`) and whether its calls need
/// approval. Empty for a spec without servers.
///
/// # Errors
///
/// As a worker's start: a message that names the server and the tool.
pub async fn tool_classes(
    spec: &AgentSpec,
    tokens: Option<&signin::Tokens>,
) -> Result<Vec<(String, &'static str, bool)>, Error> {
    let toolbox = tools::Toolbox::connect(&spec.mcp, &[], tokens).await?;
    Ok(toolbox
        .tools()
        .iter()
        .map(|tool| (tool.name.clone(), tool.class.as_str(), tool.approve))
        .collect())
}

/// The inbox bucket, created with `replicas` when it is missing.
async fn open_inbox(
    client: &async_nats::Client,
    subjects: &Subjects,
    replicas: usize,
) -> Result<Inbox, Error> {
    Inbox::open(client.clone(), subjects.clone(), replicas)
        .await
        .map_err(|err| Error::new(ErrorKind::Nats, baton_nats::error_chain(&err)))
}

/// Where an exec agent's questions to the user wait, and their answers
/// are read: the inbox and the hop journal. A worker that may not open
/// them does without (a reply's `ask` then fails the hop, saying so).
async fn exec_asking(
    client: &async_nats::Client,
    subjects: &Subjects,
    replicas: usize,
    name: &str,
) -> Option<exec::Asking> {
    let opened = async {
        let inbox = open_inbox(client, subjects, replicas).await?;
        let journal = journal::Journal::open(client, subjects, replicas).await?;
        Ok::<_, Error>(exec::Asking { inbox, journal })
    };
    match opened.await {
        Ok(asking) => Some(asking),
        Err(err) => {
            tracing::warn!(error = %err, "this exec agent cannot ask the user (a reply's `ask`): grant the inbox with `baton permissions worker {name} --human`");
            None
        }
    }
}

/// An exec agent's runner: its program, where its questions wait, and
/// (for a persistent program) the model and tools its calls use.
async fn exec_runner(
    spec: &AgentSpec,
    exec: &spec::ExecSpec,
    (client, subjects, replicas): (&async_nats::Client, &Subjects, usize),
) -> Result<Runner, Error> {
    let name = spec.name.as_str();
    let asking = exec_asking(client, subjects, replicas, name).await;
    let machinery = match exec.mode {
        spec::ExecMode::Persistent => {
            let llm = exec.llm.as_ref();
            let opened = code::Machinery::open(client, (subjects, replicas), name, llm, &spec.mcp);
            Some(opened.await?.runner())
        }
        spec::ExecMode::PerTask => None,
    };
    let runner = ExecRunner::new(exec, spec.dir())
        .with_asking(asking)
        .with_machinery(machinery);
    Ok(Runner::Exec(runner))
}

/// An agent type defined by a spec.
pub struct SpecAgent {
    spec: AgentSpec,
    runner: Runner,
}

impl SpecAgent {
    /// Prepares `spec` to run: opens the inbox for a human agent (creating
    /// it with `replicas` when it is missing), reads the API key for an LLM
    /// agent.
    ///
    /// # Errors
    ///
    /// A message that names the fix (an unset API key variable, an
    /// unreachable inbox bucket).
    pub async fn new(
        spec: AgentSpec,
        client: &async_nats::Client,
        subjects: &Subjects,
        replicas: usize,
    ) -> Result<Self, Error> {
        let runner = match &spec.kind {
            Kind::Exec(exec) => exec_runner(&spec, exec, (client, subjects, replicas)).await?,
            Kind::A2a(a2a) => Runner::A2a(Box::new(A2aRunner::new(a2a, spec.fallback.as_ref())?)),
            Kind::Llm(llm) => {
                let tokens = signin::tokens_for(&spec.mcp, client, subjects).await?;
                let runner = LlmRunner::new(llm, &spec.routing, &spec.delegates)?
                    .with_mcp(&spec.mcp, tokens.as_ref())
                    .await?
                    .with_journal(journal::Journal::open(client, subjects, replicas).await?)
                    .with_limiter(
                        limits::Limiter::open(client, subjects, replicas, llm, spec.name.as_str())
                            .await?,
                    );
                // Tool calls that may wait for a person wait in the inbox.
                let inbox = if runner.may_wait() {
                    Some(open_inbox(client, subjects, replicas).await.map_err(|err| {
                        Error::new(err.kind(), format!(
                            "{err}: this agent's tool calls may wait there for a person (see `baton check --tools`); under generated permissions, grant it with `baton permissions worker {} --human`",
                            spec.name
                        ))
                    })?)
                } else if llm.ask_user || runner.may_ask() {
                    // Asking the user (`ask_user`, an MCP server's question)
                    // waits there too; a worker that may not open it does
                    // without.
                    match open_inbox(client, subjects, replicas).await {
                        Ok(inbox) => Some(inbox),
                        Err(err) => {
                            tracing::warn!(error = %err, "ask_user is off for this worker, and its MCP servers' questions are declined: it cannot open the inbox (grant it with `baton permissions worker {} --human`, or set [llm] ask_user = false and [[mcp]] elicitation = \"decline\")", spec.name);
                            None
                        }
                    }
                } else {
                    None
                };
                Runner::Llm(Box::new(runner.with_inbox(inbox, spec.name.as_str())))
            }
            Kind::Chain(chain) => {
                let name = |agent: &String| {
                    AgentName::new(agent.as_str())
                        .map_err(|err| Error::config(format!("[chain]: {err}")))
                };
                let steps = chain.steps.iter().map(name).collect::<Result<_, _>>()?;
                let recover = match (&chain.recover, &chain.recover_value) {
                    (Some(agent), _) => Some(Recover::Agent(name(agent)?)),
                    (None, Some(value)) => Some(Recover::Value(value.as_str().into())),
                    (None, None) => None,
                };
                Runner::Chain { steps, recover }
            }
            Kind::Human(_) => Runner::Human(Box::new(HumanRunner::new(
                open_inbox(client, subjects, replicas).await?,
            ))),
        };
        Ok(Self { spec, runner })
    }

    /// The worker settings the spec implies, under `subjects`.
    #[must_use]
    pub fn worker_config(&self, subjects: Subjects) -> WorkerConfig {
        let config = WorkerConfig::new(self.spec.name.clone());
        let config = if self.spec.version_named {
            config.with_version(self.spec.version.clone())
        } else {
            config.with_version_label(self.spec.version.clone())
        };
        config
            .with_subjects(subjects)
            .with_fallback(self.spec.fallback.clone())
            .with_profile(self.spec.profile.clone())
            .with_max_delegation_depth(self.spec.max_delegation_depth)
            .with_join_timeout(self.spec.join_timeout)
            .with_hand_back(self.spec.next_turn == spec::NextTurn::Entry)
            .with_upgrade_next_turn(self.spec.upgrade == spec::Upgrade::NextTurn)
            .with_rollout(self.spec.rollout.clone())
    }

    /// The spec.
    #[must_use]
    pub fn spec(&self) -> &AgentSpec {
        &self.spec
    }
}

impl Agent for SpecAgent {
    async fn handle(&self, task: Task) -> Result<Outcome, AgentError> {
        match &self.runner {
            Runner::Exec(exec) => exec.run(&task).await,
            Runner::A2a(a2a) => a2a.run(&task).await,
            Runner::Llm(llm) => llm.run(&task).await,
            Runner::Human(human) => human.run(&task).await,
            Runner::Chain { steps, recover } => {
                let chain = Outcome::chain(steps.iter().cloned(), task.last_user_message());
                Ok(match recover {
                    Some(recover) => chain.recover(recover.clone()).into(),
                    None => chain.into(),
                })
            }
        }
    }

    async fn resume(&self, task: Task, results: Results) -> Result<Outcome, AgentError> {
        match &self.runner {
            Runner::Exec(exec) => exec.resume(&task, &results).await,
            Runner::Llm(llm) => llm.resume(&task, &results).await,
            Runner::Human(_) | Runner::Chain { .. } | Runner::A2a(_) => {
                Ok(Outcome::answer(results.outputs()).into())
            }
        }
    }

    fn routing(&self) -> Option<&Routing> {
        Some(&self.spec.routing)
    }

    fn retry_policy(&self) -> RetryPolicy {
        self.spec.retry
    }

    fn timeout(&self) -> Duration {
        self.spec.timeout
    }

    fn concurrency(&self) -> usize {
        self.spec.concurrency
    }
}
