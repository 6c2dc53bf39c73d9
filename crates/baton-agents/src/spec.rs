//! Agent spec files (TOML): parsing, validation with line numbers, and the
//! cross-check of a set of specs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use baton_proto::{AgentName, Version};
use baton_worker::{Profile, RetryPolicy, Routing, Target};
use serde::Deserialize;

/// One problem in a spec file, with where it is and how to fix it: a line
/// of `baton check`'s report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file.
    pub file: PathBuf,
    /// The line, counting from 1, when known.
    pub line: Option<usize>,
    /// What is wrong, and the fix.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file.display(), self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

/// What kind of agent a spec runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KindName {
    /// A program per task: envelope JSON in on stdin, outcome JSON out on stdout.
    Exec,
    /// An OpenAI-compatible chat-completions model.
    Llm,
    /// A person, through the inbox.
    Human,
    /// A sequential chain of other agents.
    Chain,
    /// A remote agent reached over A2A (Agent2Agent v1.0, JSON-RPC).
    A2a,
}

/// Settings of an exec agent.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecSpec {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory; relative paths are relative to the spec file's folder
    /// (also the default).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// `per_task` (the default): one process per task. `persistent`: one
    /// process per worker, exchanging lines of JSON (see `exec_request` and
    /// `exec_response` in proto-schemas/).
    #[serde(default)]
    pub mode: ExecMode,
    /// The spec's `[llm]` table: the model a persistent program's
    /// `ctx.model` calls (only `base_url` and `model` are needed: the
    /// program writes its own prompt).
    #[serde(skip)]
    pub llm: Option<LlmSpec>,
}

/// How an exec agent runs its program.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecMode {
    /// A process per task: the envelope on stdin, the reply on stdout.
    #[default]
    PerTask,
    /// One process per worker: a request line per task on stdin, a reply
    /// line with the same id on stdout, many in flight.
    Persistent,
}

/// Settings of an A2A agent: the remote agent each task is forwarded to.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct A2aSpec {
    /// The remote agent's base URL; its card is read from
    /// `<url>/.well-known/agent-card.json` (or `card_path`).
    pub url: String,
    /// Where the card is, relative to `url`.
    #[serde(default = "default_card_path")]
    pub card_path: String,
    /// An environment variable holding a token, sent as `Authorization: Bearer`.
    #[serde(default)]
    pub token_env: Option<String>,
    /// An environment variable holding an API key, sent in `api_key_header`.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// The header the API key goes in.
    #[serde(default = "default_api_key_header")]
    pub api_key_header: String,
    /// How long one HTTP request may take, in ms (a stream is one request).
    #[serde(default = "default_a2a_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// How often a remote task is polled when it is not streamed, in ms.
    #[serde(default = "default_poll_ms")]
    pub poll_ms: u64,
    /// Stream the remote task when its card offers streaming (else poll).
    #[serde(default = "default_true")]
    pub streaming: bool,
    /// The agent type that answers when the remote agent needs input
    /// (`input-required`), usually a human agent; else the spec's fallback.
    #[serde(default)]
    pub input_required: Option<String>,
}

fn default_card_path() -> String {
    "/.well-known/agent-card.json".to_owned()
}

fn default_api_key_header() -> String {
    "X-API-Key".to_owned()
}

fn default_a2a_request_timeout_ms() -> u64 {
    60_000
}

fn default_poll_ms() -> u64 {
    500
}

fn default_true() -> bool {
    true
}

/// Settings of a human agent (none yet; the table may be empty or absent).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HumanSpec {}

/// Settings of a chain: each step's output is the next one's input.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainSpec {
    /// The agent types, in order.
    pub steps: Vec<String>,
    /// On a failed step, run this agent type on the failure instead of stopping.
    #[serde(default)]
    pub recover: Option<String>,
    /// On a failed step, use this text as its output instead of stopping.
    #[serde(default)]
    pub recover_value: Option<String>,
}

/// An agent an LLM agent may delegate to, offered as the tool `agent_run_<agent>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegateSpec {
    /// Who: an agent type or a capability set.
    pub target: Target,
    /// What it is good for (the tool's description).
    pub description: Option<String>,
}

/// The kind of agent with its settings.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A program.
    Exec(ExecSpec),
    /// A model.
    Llm(LlmSpec),
    /// A person.
    Human(HumanSpec),
    /// A chain of agents.
    Chain(ChainSpec),
    /// A remote A2A agent.
    A2a(A2aSpec),
}

/// A validated spec: everything needed to run the agent type.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    /// The file it came from.
    pub file: PathBuf,
    /// Agent type.
    pub name: AgentName,
    /// The version of the agent type this spec is: its `version`, or a
    /// short hash of the file's bytes.
    pub version: Version,
    /// Whether the spec named its version: its workers then take only
    /// that version's work. A hash is only shown.
    pub version_named: bool,
    /// What it does.
    pub description: String,
    /// Capabilities, domains and tier, for the registry.
    pub profile: Profile,
    /// Tasks one worker handles at once.
    pub concurrency: usize,
    /// How long one attempt may take.
    pub timeout: Duration,
    /// Retries.
    pub retry: RetryPolicy,
    /// Where escalations, loops and exhausted tasks go.
    pub fallback: Option<AgentName>,
    /// The kind and its settings.
    pub kind: Kind,
    /// The routing rules.
    pub routing: Routing,
    /// Agents an LLM agent may delegate to, as tools.
    pub delegates: Vec<DelegateSpec>,
    /// The MCP servers whose tools an LLM agent calls.
    pub mcp: Vec<McpSpec>,
    /// How deep delegations may nest below the session's root.
    pub max_delegation_depth: u32,
    /// How long a delegation waits for its children.
    pub join_timeout: Option<Duration>,
    /// `[team]`: it coordinates a team for each task (see [`baton_worker::Team`]).
    pub team: Option<baton_worker::TeamSpec>,
    /// Where a conversation's next turn starts after a turn this agent
    /// takes part in.
    pub next_turn: NextTurn,
    /// Whether a conversation pinned to this version moves to the current
    /// version at its next turn once another version is current.
    pub upgrade: Upgrade,
    /// `[rollout]`: the gated rollout its first worker starts, when its
    /// version waits for one (its id and start are made anew then).
    pub rollout: Option<baton_proto::Gated>,
}

/// `upgrade`: what becomes of a conversation pinned to this version when
/// another version becomes current.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Upgrade {
    /// It stays on this version until it ends (or the version is retired
    /// with `--upgrade-conversations`).
    #[default]
    Pinned,
    /// It moves to the current version at its next turn, never within one.
    NextTurn,
}

/// `next_turn`: where a conversation's next turn starts after a turn the
/// agent takes part in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NextTurn {
    /// At the agent that answered the turn: it holds the conversation.
    #[default]
    Holder,
    /// At the conversation's entry: the turn hands the conversation back.
    Entry,
}

impl AgentSpec {
    /// The folder relative paths in the spec are resolved against.
    #[must_use]
    pub fn dir(&self) -> &Path {
        // `triage.toml` (a spec in the current folder) has the parent "".
        match self.file.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        }
    }
}

/// Reads and validates the spec at `path`.
///
/// # Errors
///
/// [`ErrorKind::Spec`](crate::ErrorKind::Spec): every problem found, each
/// with the file, the line and the fix.
pub fn load(path: &Path) -> Result<AgentSpec, crate::Error> {
    read(path).map_err(|problems| said(&problems))
}

/// Validates spec `text`, reporting problems against `file`.
///
/// # Errors
///
/// [`ErrorKind::Spec`](crate::ErrorKind::Spec): every problem found, each
/// with the file, the line and the fix.
pub fn parse(file: &Path, text: &str) -> Result<AgentSpec, crate::Error> {
    problems_of(file, text).map_err(|problems| said(&problems))
}

/// The error that says `problems`, one a line.
fn said(problems: &[Problem]) -> crate::Error {
    let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
    crate::Error::new(crate::ErrorKind::Spec, lines.join("\n"))
}

/// The spec at `path`, or every problem found in it.
fn read(path: &Path) -> Result<AgentSpec, Vec<Problem>> {
    let text = std::fs::read_to_string(path).map_err(|err| {
        vec![Problem {
            file: path.to_owned(),
            line: None,
            message: format!("cannot read the spec: {err}"),
        }]
    })?;
    problems_of(path, &text)
}

/// The spec `text` says, or every problem found in it.
fn problems_of(file: &Path, text: &str) -> Result<AgentSpec, Vec<Problem>> {
    let mut report = raw::Report {
        file: file.to_owned(),
        text,
        errors: Vec::new(),
    };
    let raw: raw::RawSpec = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(err) => {
            let line = err.span().map(|span| report.line(&span));
            let message = err.message().trim_end().to_owned();
            let hint = if message.starts_with("unknown field") {
                " (remove it, or check its spelling against the spec reference, docs/agents/specs.md)"
            } else if message.starts_with("missing field") {
                " (add it; see the spec reference, docs/agents/specs.md)"
            } else {
                ""
            };
            return Err(vec![Problem {
                file: file.to_owned(),
                line,
                message: format!("{message}{hint}"),
            }]);
        }
    };
    let spec = report.validate(raw);
    if report.errors.is_empty() {
        spec.ok_or_else(Vec::new)
    } else {
        Err(report.errors)
    }
}

/// What `baton check` found in a set of specs.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// The specs that are valid.
    pub specs: Vec<AgentSpec>,
    /// Problems that stop a spec from running.
    pub errors: Vec<Problem>,
    /// Things that look wrong across the set (a route to an agent no spec defines).
    pub warnings: Vec<String>,
}

/// Validates every spec in `paths`, then checks that the routes between them
/// name agents the set defines.
#[must_use]
pub fn check(paths: &[PathBuf]) -> CheckReport {
    let mut report = CheckReport::default();
    for path in paths {
        match read(path) {
            Ok(spec) => report.specs.push(spec),
            Err(problems) => report.errors.extend(problems),
        }
    }
    let defined: BTreeSet<&str> = report.specs.iter().map(|s| s.name.as_str()).collect();
    let mut seen = BTreeMap::<&str, &AgentSpec>::new();
    for spec in &report.specs {
        if let Some(first) = seen.insert(spec.name.as_str(), spec) {
            report.warnings.push(format!(
                "{}: agent type {} is also defined in {}",
                spec.file.display(),
                spec.name,
                first.file.display()
            ));
        }
        let chain_steps = match &spec.kind {
            Kind::Chain(chain) => chain
                .steps
                .iter()
                .chain(chain.recover.iter())
                .map(String::as_str)
                .collect(),
            Kind::A2a(a2a) => a2a.input_required.iter().map(String::as_str).collect(),
            _ => Vec::new(),
        };
        let targets = spec
            .routing
            .routes()
            .filter_map(|route| route.target.as_ref())
            .chain(spec.delegates.iter().map(|d| &d.target));
        let named = targets
            .filter_map(|target| match target {
                Target::Agent(agent) => Some(agent.as_str()),
                _ => None,
            })
            .chain(spec.fallback.as_ref().map(AgentName::as_str))
            .chain(chain_steps);
        for agent in named.collect::<BTreeSet<_>>() {
            if !defined.contains(agent) {
                report.warnings.push(format!(
                    "{}: routes to agent type {agent}, which none of the given specs defines",
                    spec.file.display()
                ));
            }
        }
    }
    report
}

mod llm;
mod mcp;
mod raw;
mod rollout;

pub use mcp::{Approve, McpAuth, McpElicitation, McpSpec, SigningAlgorithm};

pub use llm::{HistorySpec, LimitsSpec, LlmSpec, Older, PriceSpec};
#[cfg(test)]
mod tests;
