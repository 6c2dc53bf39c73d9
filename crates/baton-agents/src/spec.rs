//! Agent spec files (TOML): parsing, validation with line numbers, and the
//! cross-check of a set of specs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use baton_proto::AgentName;
use baton_worker::{ContextPolicy, Need, Profile, RetryPolicy, RouteOptions};
use serde::Deserialize;
use toml::Spanned;

use crate::routing::{Condition, Dest, LlmCondition, Route, Routing};

/// One problem in a spec file, with where it is and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// The file.
    pub file: PathBuf,
    /// The line, counting from 1, when known.
    pub line: Option<usize>,
    /// What is wrong, and the fix.
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file.display(), self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

/// Every problem found in one spec file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct SpecErrors(pub Vec<SpecError>);

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
}

/// Settings of an exec agent.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
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
}

/// Settings of an LLM agent.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSpec {
    /// The endpoint's base URL, up to and including `/v1`.
    #[serde(default = "default_base_url")]
    pub base_url: String,
    /// The model name.
    pub model: String,
    /// The environment variable that holds the API key; no key is sent when unset.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// The system prompt, first in every conversation.
    #[serde(default)]
    pub system_prompt: String,
    /// Sampling temperature.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Longest answer, in tokens.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// How long one HTTP request may take, in ms.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
}

fn default_base_url() -> String {
    "https://api.openai.com/v1".to_owned()
}

fn default_request_timeout_ms() -> u64 {
    60_000
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
    pub dest: Dest,
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
}

/// A validated spec: everything needed to run the agent type.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    /// The file it came from.
    pub file: PathBuf,
    /// Agent type.
    pub name: AgentName,
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
    /// How deep delegations may nest below the session's root.
    pub max_delegation_depth: u32,
    /// How long a delegation waits for its children.
    pub join_timeout: Option<Duration>,
}

impl AgentSpec {
    /// The folder relative paths in the spec are resolved against.
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.file.parent().unwrap_or(Path::new("."))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    name: Spanned<String>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    capabilities: Vec<String>,
    #[serde(default)]
    domains: Vec<String>,
    #[serde(default = "one")]
    tier: u32,
    #[serde(default = "eight")]
    concurrency: Spanned<usize>,
    #[serde(default = "minute")]
    timeout_ms: Spanned<u64>,
    #[serde(default)]
    fallback: Option<Spanned<String>>,
    kind: Spanned<KindName>,
    #[serde(default)]
    retry: Option<Spanned<RawRetry>>,
    #[serde(default)]
    exec: Option<Spanned<ExecSpec>>,
    #[serde(default)]
    llm: Option<Spanned<LlmSpec>>,
    #[serde(default)]
    human: Option<Spanned<HumanSpec>>,
    #[serde(default)]
    chain: Option<Spanned<ChainSpec>>,
    #[serde(default)]
    delegates: Vec<Spanned<RawDelegate>>,
    #[serde(default = "four")]
    max_delegation_depth: u32,
    #[serde(default)]
    join_timeout_ms: Option<u64>,
    #[serde(default)]
    handoffs: Vec<Spanned<RawRoute>>,
    #[serde(default)]
    conditions: Vec<Spanned<RawRoute>>,
    #[serde(default)]
    llm_conditions: Vec<Spanned<RawRoute>>,
    #[serde(default)]
    after_work: Option<Spanned<RawRoute>>,
}

fn one() -> u32 {
    1
}

fn four() -> u32 {
    4
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDelegate {
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    requires: Vec<String>,
    #[serde(default)]
    description: Option<String>,
}

fn eight() -> Spanned<usize> {
    Spanned::new(0..0, 8)
}

fn minute() -> Spanned<u64> {
    Spanned::new(0..0, 60_000)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetry {
    #[serde(default = "three")]
    max_attempts: u32,
    #[serde(default = "default_min_backoff")]
    min_backoff_ms: u64,
    #[serde(default = "default_max_backoff")]
    max_backoff_ms: u64,
}

fn three() -> u32 {
    3
}

fn default_min_backoff() -> u64 {
    200
}

fn default_max_backoff() -> u64 {
    30_000
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    #[serde(default)]
    when: Option<String>,
    #[serde(default)]
    to: Option<String>,
    #[serde(default)]
    requires: Vec<String>,
    #[serde(default)]
    domains: Vec<String>,
    #[serde(default)]
    min_tier: Option<u32>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    max_visits: Option<u32>,
    #[serde(default)]
    context: Option<RawContext>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum RawContext {
    Full,
    None,
    LastN(usize),
}

/// Which list a route is in: decides which fields it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Handoffs,
    Conditions,
    LlmConditions,
    AfterWork,
}

impl Section {
    fn name(self) -> &'static str {
        match self {
            Self::Handoffs => "[[handoffs]]",
            Self::Conditions => "[[conditions]]",
            Self::LlmConditions => "[[llm_conditions]]",
            Self::AfterWork => "[after_work]",
        }
    }
}

/// Reads and validates the spec at `path`.
///
/// # Errors
///
/// Every problem found, each with the file, the line and the fix.
pub fn load(path: &Path) -> Result<AgentSpec, SpecErrors> {
    let text = std::fs::read_to_string(path).map_err(|err| {
        SpecErrors(vec![SpecError {
            file: path.to_owned(),
            line: None,
            message: format!("cannot read the spec: {err}"),
        }])
    })?;
    parse(path, &text)
}

/// Validates spec `text`, reporting problems against `file`.
///
/// # Errors
///
/// Every problem found, each with the file, the line and the fix.
pub fn parse(file: &Path, text: &str) -> Result<AgentSpec, SpecErrors> {
    let mut report = Report {
        file: file.to_owned(),
        text,
        errors: Vec::new(),
    };
    let raw: RawSpec = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(err) => {
            let line = err.span().map(|span| report.line(&span));
            let message = err.message().trim_end().to_owned();
            let hint = if message.starts_with("unknown field") {
                " (remove it, or check its spelling against the spec reference in the README)"
            } else if message.starts_with("missing field") {
                " (add it; see the spec reference in the README)"
            } else {
                ""
            };
            return Err(SpecErrors(vec![SpecError {
                file: file.to_owned(),
                line,
                message: format!("{message}{hint}"),
            }]));
        }
    };
    let spec = report.validate(raw);
    if report.errors.is_empty() {
        spec.ok_or_else(|| SpecErrors(Vec::new()))
    } else {
        Err(SpecErrors(report.errors))
    }
}

struct Report<'a> {
    file: PathBuf,
    text: &'a str,
    errors: Vec<SpecError>,
}

impl Report<'_> {
    fn line(&self, span: &Range<usize>) -> usize {
        let end = span.start.min(self.text.len());
        self.text[..end].matches('\n').count() + 1
    }

    fn error(&mut self, span: &Range<usize>, message: impl Into<String>) {
        let line = (span.end > 0).then(|| self.line(span));
        self.errors.push(SpecError {
            file: self.file.clone(),
            line,
            message: message.into(),
        });
    }

    fn agent_name(&mut self, name: &str, span: &Range<usize>, what: &str) -> Option<AgentName> {
        match AgentName::new(name) {
            Ok(name) if matches!(name.as_str(), "terminate" | "fallback") => {
                self.error(
                    span,
                    format!("{what} {name:?} is a reserved word: choose another agent type name"),
                );
                None
            }
            Ok(name) => Some(name),
            Err(err) => {
                self.error(span, format!("{what}: {err}"));
                None
            }
        }
    }

    fn validate(&mut self, raw: RawSpec) -> Option<AgentSpec> {
        let name = self.agent_name(raw.name.get_ref(), &raw.name.span(), "name");
        let fallback = raw
            .fallback
            .as_ref()
            .and_then(|fallback| self.agent_name(fallback.get_ref(), &fallback.span(), "fallback"));
        if *raw.concurrency.get_ref() == 0 {
            self.error(&raw.concurrency.span(), "concurrency must be at least 1");
        }
        if *raw.timeout_ms.get_ref() == 0 {
            self.error(&raw.timeout_ms.span(), "timeout_ms must be at least 1");
        }
        let retry = match &raw.retry {
            None => RetryPolicy::default(),
            Some(retry) => {
                let r = retry.get_ref();
                if r.max_attempts == 0 {
                    self.error(&retry.span(), "[retry] max_attempts must be at least 1");
                }
                if r.max_backoff_ms < r.min_backoff_ms {
                    self.error(
                        &retry.span(),
                        "[retry] max_backoff_ms is below min_backoff_ms: raise max_backoff_ms",
                    );
                }
                RetryPolicy {
                    max_attempts: r.max_attempts.max(1),
                    min_backoff: Duration::from_millis(r.min_backoff_ms),
                    max_backoff: Duration::from_millis(r.max_backoff_ms.max(r.min_backoff_ms)),
                }
            }
        };
        let kind = self.kind(&raw);
        let routing = self.routing(&raw, kind.as_ref());
        let delegates = self.delegates(&raw, kind.as_ref());
        Some(AgentSpec {
            file: self.file.clone(),
            name: name?,
            description: raw.description,
            profile: Profile {
                capabilities: raw.capabilities,
                domains: raw.domains,
                tier: raw.tier,
            },
            concurrency: (*raw.concurrency.get_ref()).max(1),
            timeout: Duration::from_millis(*raw.timeout_ms.get_ref()),
            retry,
            fallback,
            kind: kind?,
            routing,
            delegates,
            max_delegation_depth: raw.max_delegation_depth,
            join_timeout: raw.join_timeout_ms.map(Duration::from_millis),
        })
    }

    fn kind(&mut self, raw: &RawSpec) -> Option<Kind> {
        let kind = *raw.kind.get_ref();
        let tables = [
            (KindName::Exec, "exec", raw.exec.as_ref().map(Spanned::span)),
            (KindName::Llm, "llm", raw.llm.as_ref().map(Spanned::span)),
            (
                KindName::Human,
                "human",
                raw.human.as_ref().map(Spanned::span),
            ),
            (
                KindName::Chain,
                "chain",
                raw.chain.as_ref().map(Spanned::span),
            ),
        ];
        for (table_kind, table, span) in &tables {
            if let Some(span) = span {
                if *table_kind != kind {
                    self.error(
                        span,
                        format!(
                            "a [{table}] table in a spec of kind {:?}: remove it, or set kind = \"{table}\"",
                            format!("{kind:?}").to_lowercase()
                        ),
                    );
                }
            }
        }
        let kind_span = raw.kind.span();
        match kind {
            KindName::Exec => {
                let Some(exec) = &raw.exec else {
                    self.error(
                        &kind_span,
                        "kind = \"exec\" needs an [exec] table with command = [\"program\", \"arg\", ...]",
                    );
                    return None;
                };
                if exec.get_ref().command.is_empty() {
                    self.error(
                        &exec.span(),
                        "[exec] command is empty: name the program, e.g. command = [\"python3\", \"agent.py\"]",
                    );
                    return None;
                }
                Some(Kind::Exec(exec.get_ref().clone()))
            }
            KindName::Llm => {
                let Some(llm) = &raw.llm else {
                    self.error(
                        &kind_span,
                        "kind = \"llm\" needs an [llm] table with at least model = \"...\"",
                    );
                    return None;
                };
                let settings = llm.get_ref();
                if !(settings.base_url.starts_with("http://")
                    || settings.base_url.starts_with("https://"))
                {
                    self.error(
                        &llm.span(),
                        format!(
                            "[llm] base_url {:?} is not an http(s) URL: use e.g. \"http://127.0.0.1:8080/v1\"",
                            settings.base_url
                        ),
                    );
                }
                Some(Kind::Llm(settings.clone()))
            }
            KindName::Chain => {
                let Some(chain) = &raw.chain else {
                    self.error(
                        &kind_span,
                        "kind = \"chain\" needs a [chain] table with steps = [\"agent\", ...]",
                    );
                    return None;
                };
                let settings = chain.get_ref();
                if settings.steps.is_empty() {
                    self.error(
                        &chain.span(),
                        "[chain] steps is empty: list the agent types in order",
                    );
                }
                if settings.recover.is_some() && settings.recover_value.is_some() {
                    self.error(
                        &chain.span(),
                        "[chain] has both recover and recover_value: keep one",
                    );
                }
                for step in settings.steps.iter().chain(settings.recover.iter()) {
                    self.agent_name(step, &chain.span(), "[chain] step");
                }
                Some(Kind::Chain(settings.clone()))
            }
            KindName::Human => Some(Kind::Human(
                raw.human
                    .as_ref()
                    .map(|h| h.get_ref().clone())
                    .unwrap_or_default(),
            )),
        }
    }

    fn delegates(&mut self, raw: &RawSpec, kind: Option<&Kind>) -> Vec<DelegateSpec> {
        if let (Some(first), false) = (
            raw.delegates.first(),
            matches!(kind, Some(Kind::Llm(_)) | None),
        ) {
            self.error(
                &first.span(),
                "[[delegates]] are offered to an LLM as tools: use kind = \"llm\" (exec agents delegate with \"action\": \"delegate\")",
            );
            return Vec::new();
        }
        let mut delegates = Vec::new();
        let mut tools = BTreeSet::new();
        for spanned in &raw.delegates {
            let span = spanned.span();
            let entry = spanned.get_ref();
            let dest = match (&entry.agent, entry.requires.is_empty()) {
                (Some(agent), true) => match self.agent_name(agent, &span, "[[delegates]] agent") {
                    Some(name) => Dest::Agent(name.to_string()),
                    None => continue,
                },
                (None, false) => Dest::Capabilities(Need::capabilities(entry.requires.clone())),
                _ => {
                    self.error(
                        &span,
                        "[[delegates]] needs exactly one of agent = \"...\" and requires = [...]",
                    );
                    continue;
                }
            };
            if !tools.insert(dest.label()) {
                self.error(
                    &span,
                    format!("a second delegate {:?}: keep one", dest.label()),
                );
                continue;
            }
            delegates.push(DelegateSpec {
                dest,
                description: entry.description.clone(),
            });
        }
        delegates
    }

    fn routing(&mut self, raw: &RawSpec, kind: Option<&Kind>) -> Routing {
        let mut routing = Routing::default();
        for route in &raw.handoffs {
            if let Some(parsed) = self.route(route, Section::Handoffs) {
                routing.handoffs.push(parsed);
            }
        }
        for route in &raw.conditions {
            let Some(parsed) = self.route(route, Section::Conditions) else {
                continue;
            };
            let when = route.get_ref().when.clone().unwrap_or_default();
            match Condition::new(&when, parsed) {
                Ok(condition) => routing.conditions.push(condition),
                Err(err) => self.error(
                    &route.span(),
                    format!("[[conditions]] when = {when:?} is not a valid CEL expression: {err}"),
                ),
            }
        }
        if !raw.llm_conditions.is_empty() && !matches!(kind, Some(Kind::Llm(_)) | None) {
            self.error(
                &raw.llm_conditions[0].span(),
                "[[llm_conditions]] are judged by the agent's LLM: use kind = \"llm\", or make them [[conditions]]",
            );
        }
        for route in &raw.llm_conditions {
            if let Some(parsed) = self.route(route, Section::LlmConditions) {
                routing.llm_conditions.push(LlmCondition {
                    condition: route.get_ref().when.clone().unwrap_or_default(),
                    route: parsed,
                });
            }
        }
        if let Some(route) = &raw.after_work {
            routing.after_work = self.route(route, Section::AfterWork);
        }
        if matches!(kind, Some(Kind::Llm(_))) {
            let mut tools = BTreeSet::new();
            let routes = raw.handoffs.iter().chain(&raw.llm_conditions);
            for (route, parsed) in routes.zip(
                routing
                    .handoffs
                    .iter()
                    .chain(routing.llm_conditions.iter().map(|c| &c.route)),
            ) {
                if !tools.insert(parsed.dest.label()) {
                    self.error(
                        &route.span(),
                        format!(
                            "a second route to {:?} would offer the model a second transfer_to_{} tool: keep one",
                            parsed.dest.label(),
                            parsed.dest.label()
                        ),
                    );
                }
            }
        }
        routing
    }

    fn route(&mut self, spanned: &Spanned<RawRoute>, section: Section) -> Option<Route> {
        let span = spanned.span();
        let raw = spanned.get_ref();
        let where_ = section.name();
        let needs_when = matches!(section, Section::Conditions | Section::LlmConditions);
        match (&raw.when, needs_when) {
            (None, true) => {
                self.error(&span, format!("{where_} needs when = \"...\""));
                return None;
            }
            (Some(_), false) => {
                self.error(
                    &span,
                    format!("{where_} takes no `when`: move the route to [[conditions]]"),
                );
                return None;
            }
            _ => {}
        }
        let dest = match (&raw.to, raw.requires.is_empty()) {
            (Some(_), false) => {
                self.error(
                    &span,
                    format!("{where_} has both `to` and `requires`: keep one"),
                );
                return None;
            }
            (None, true) => {
                self.error(
                    &span,
                    format!(
                        "{where_} needs a target: to = \"agent\" (or \"terminate\" / \"fallback\"), or requires = [\"capability\"]"
                    ),
                );
                return None;
            }
            (None, false) => Dest::Capabilities(Need {
                requires: raw.requires.clone(),
                domains: raw.domains.clone(),
                min_tier: raw.min_tier,
            }),
            (Some(to), true) => match to.as_str() {
                "terminate" | "fallback" if section == Section::Handoffs => {
                    self.error(
                        &span,
                        format!(
                            "[[handoffs]] lists agents the agent may name; {to:?} is not one (use [after_work] to = {to:?})"
                        ),
                    );
                    return None;
                }
                "terminate" => Dest::Terminate,
                "fallback" => Dest::Fallback,
                agent => Dest::Agent(self.agent_name(agent, &span, "to")?.to_string()),
            },
        };
        if !raw.domains.is_empty() && raw.requires.is_empty()
            || raw.min_tier.is_some() && raw.requires.is_empty()
        {
            self.error(
                &span,
                format!("{where_}: `domains` and `min_tier` go with `requires`, not with `to`"),
            );
        }
        if matches!(dest, Dest::Terminate | Dest::Fallback)
            && (raw.max_visits.is_some() || raw.context.is_some())
        {
            self.error(
                &span,
                format!("{where_}: `max_visits` and `context` apply to agent targets only"),
            );
        }
        if raw.max_visits == Some(0) {
            self.error(&span, format!("{where_}: max_visits must be at least 1"));
        }
        let context = match raw.context {
            None | Some(RawContext::Full) => ContextPolicy::Full,
            Some(RawContext::None) => ContextPolicy::None,
            Some(RawContext::LastN(n)) => ContextPolicy::LastN(n),
        };
        Some(Route {
            dest,
            options: RouteOptions {
                max_visits: raw.max_visits,
                context,
            },
            description: raw.description.clone(),
        })
    }
}

/// What `baton check` found in a set of specs.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// The specs that are valid.
    pub specs: Vec<AgentSpec>,
    /// Problems that stop a spec from running.
    pub errors: Vec<SpecError>,
    /// Things that look wrong across the set (a route to an agent no spec defines).
    pub warnings: Vec<String>,
}

/// Validates every spec in `paths`, then checks that the routes between them
/// name agents the set defines.
#[must_use]
pub fn check(paths: &[PathBuf]) -> CheckReport {
    let mut report = CheckReport::default();
    for path in paths {
        match load(path) {
            Ok(spec) => report.specs.push(spec),
            Err(SpecErrors(errors)) => report.errors.extend(errors),
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
            _ => Vec::new(),
        };
        let named = spec
            .routing
            .named_agents()
            .chain(spec.fallback.as_ref().map(AgentName::as_str))
            .chain(chain_steps)
            .chain(spec.delegates.iter().filter_map(|d| match &d.dest {
                Dest::Agent(agent) => Some(agent.as_str()),
                _ => None,
            }));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<AgentSpec, SpecErrors> {
        parse(Path::new("agents/x.toml"), text)
    }

    fn problems(text: &str) -> Vec<String> {
        parse_str(text)
            .unwrap_err()
            .0
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    const EXEC: &str = r#"
name = "executor"
kind = "exec"
capabilities = ["run_code"]
tier = 2
concurrency = 2
timeout_ms = 5000
fallback = "human_support"

[retry]
max_attempts = 5
min_backoff_ms = 10
max_backoff_ms = 100

[exec]
command = ["python3", "agent.py", "executor"]

[[handoffs]]
to = "engineer"
max_visits = 4

[[conditions]]
when = "n_attempts >= max_n_attempts"
to = "terminator"

[[conditions]]
when = "last_run == 'failed'"
to = "engineer"
max_visits = 4
context = { last_n = 2 }

[after_work]
requires = ["control"]
min_tier = 1
"#;

    #[test]
    fn a_full_exec_spec_parses() {
        let spec = parse_str(EXEC).unwrap();
        assert_eq!(spec.name.as_str(), "executor");
        assert_eq!(spec.profile.tier, 2);
        assert_eq!(spec.concurrency, 2);
        assert_eq!(spec.timeout, Duration::from_secs(5));
        assert_eq!(spec.retry.max_attempts, 5);
        assert_eq!(
            spec.fallback.as_ref().map(AgentName::as_str),
            Some("human_support")
        );
        assert!(matches!(&spec.kind, Kind::Exec(exec) if exec.command[1] == "agent.py"));
        assert_eq!(spec.routing.conditions.len(), 2);
        assert_eq!(
            spec.routing.conditions[1].route.options,
            RouteOptions {
                max_visits: Some(4),
                context: ContextPolicy::LastN(2)
            }
        );
        assert!(matches!(
            &spec.routing.after_work,
            Some(Route { dest: Dest::Capabilities(need), .. }) if need.requires == ["control"] && need.min_tier == Some(1)
        ));
        assert_eq!(spec.dir(), Path::new("agents"));
    }

    #[test]
    fn unknown_keys_are_errors_with_the_line() {
        let text = "name = \"a\"\nkind = \"exec\"\ncommnd = 1\n[exec]\ncommand = [\"x\"]\n";
        let errors = problems(text);
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with("agents/x.toml:3: unknown field `commnd`"),
            "{errors:?}"
        );
        assert!(
            errors[0].contains("remove it, or check its spelling"),
            "{errors:?}"
        );

        let text = "name = \"a\"\nkind = \"exec\"\n[exec]\ncommand = [\"x\"]\n\n[[conditions]]\nwhen = \"x > 1\"\nto = \"b\"\nmax_visit = 2\n";
        let errors = problems(text);
        assert!(
            errors[0].starts_with("agents/x.toml:9: unknown field `max_visit`"),
            "{errors:?}"
        );
    }

    #[test]
    fn semantic_errors_name_the_line_and_the_fix() {
        let text = r#"name = "Bad Name"
kind = "exec"

[exec]
command = []

[[conditions]]
when = "n_attempts >="
to = "terminator"

[[conditions]]
to = "x"

[after_work]
to = "a"
requires = ["b"]
"#;
        let errors = problems(text);
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("agents/x.toml:1: name: invalid agent type name")),
            "{errors:#?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("agents/x.toml:4: [exec] command is empty")),
            "{errors:#?}"
        );
        assert!(errors.iter().any(|e| e.starts_with("agents/x.toml:7: [[conditions]] when = \"n_attempts >=\" is not a valid CEL expression")), "{errors:#?}");
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("agents/x.toml:11: [[conditions]] needs when")),
            "{errors:#?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e
                    .starts_with("agents/x.toml:14: [after_work] has both `to` and `requires`")),
            "{errors:#?}"
        );
    }

    #[test]
    fn kinds_need_their_table_and_no_other() {
        let errors = problems("name = \"a\"\nkind = \"llm\"\n");
        assert!(
            errors[0].contains("kind = \"llm\" needs an [llm] table"),
            "{errors:?}"
        );
        let errors = problems("name = \"a\"\nkind = \"human\"\n[exec]\ncommand = [\"x\"]\n");
        assert!(
            errors[0].starts_with("agents/x.toml:3: a [exec] table in a spec of kind \"human\""),
            "{errors:?}"
        );
        let errors = problems("name = \"a\"\nkind = \"robot\"\n");
        assert!(errors[0].contains("unknown variant `robot`"), "{errors:?}");
        let errors = problems(
            "name = \"a\"\nkind = \"exec\"\n[exec]\ncommand = [\"x\"]\n[[llm_conditions]]\nwhen = \"asks for refunds\"\nto = \"refund\"\n",
        );
        assert!(
            errors[0].contains("judged by the agent's LLM"),
            "{errors:?}"
        );
        let spec = parse_str("name = \"h\"\nkind = \"human\"\n").unwrap();
        assert_eq!(spec.kind, Kind::Human(HumanSpec {}));
    }

    #[test]
    fn llm_specs_need_one_tool_per_target() {
        let text = r#"name = "chat"
kind = "llm"

[llm]
base_url = "http://127.0.0.1:9/v1"
model = "m"

[[handoffs]]
to = "refund"

[[llm_conditions]]
when = "the user wants money back"
to = "refund"
"#;
        let errors = problems(text);
        assert!(
            errors[0].starts_with("agents/x.toml:11: a second route to \"refund\""),
            "{errors:?}"
        );
    }

    #[test]
    fn chains_and_delegates_parse_and_are_checked() {
        let spec = parse_str(
            "name = \"pipeline\"\nkind = \"chain\"\nmax_delegation_depth = 2\njoin_timeout_ms = 500\n[chain]\nsteps = [\"a\", \"b\"]\nrecover = \"fixer\"\n",
        )
        .unwrap();
        assert!(
            matches!(&spec.kind, Kind::Chain(chain) if chain.steps == ["a", "b"] && chain.recover.as_deref() == Some("fixer"))
        );
        assert_eq!(spec.max_delegation_depth, 2);
        assert_eq!(spec.join_timeout, Some(Duration::from_millis(500)));
        let errors = problems(
            "name = \"p\"\nkind = \"chain\"\n[chain]\nsteps = []\nrecover = \"x\"\nrecover_value = \"y\"\n",
        );
        assert!(
            errors.iter().any(|e| e.contains("[chain] steps is empty")),
            "{errors:?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.contains("both recover and recover_value")),
            "{errors:?}"
        );

        let spec = parse_str(
            "name = \"editor\"\nkind = \"llm\"\n[llm]\nmodel = \"m\"\n[[delegates]]\nagent = \"researcher\"\n[[delegates]]\nrequires = [\"writing\"]\n",
        )
        .unwrap();
        assert_eq!(spec.delegates.len(), 2);
        assert_eq!(spec.delegates[1].dest.label(), "writing");
        let errors = problems(
            "name = \"x\"\nkind = \"exec\"\n[exec]\ncommand = [\"y\"]\n[[delegates]]\nagent = \"z\"\n",
        );
        assert!(
            errors[0].contains("offered to an LLM as tools"),
            "{errors:?}"
        );
    }

    #[test]
    fn check_warns_about_routes_to_agents_nobody_defines() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.toml");
        let b = dir.path().join("b.toml");
        std::fs::write(
            &a,
            "name = \"a\"\nkind = \"exec\"\n[exec]\ncommand = [\"x\"]\n[after_work]\nto = \"b\"\n",
        )
        .unwrap();
        std::fs::write(&b, "name = \"b\"\nkind = \"exec\"\nfallback = \"nobody\"\n[exec]\ncommand = [\"x\"]\n[after_work]\nto = \"ghost\"\n").unwrap();
        let report = check(&[a, b]);
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert_eq!(report.specs.len(), 2);
        assert_eq!(report.warnings.len(), 2, "{:?}", report.warnings);
        assert!(
            report
                .warnings
                .iter()
                .any(|w| w.contains("routes to agent type ghost"))
        );
        assert!(
            report
                .warnings
                .iter()
                .any(|w| w.contains("routes to agent type nobody"))
        );
    }
}
