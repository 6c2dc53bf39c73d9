//! The raw TOML form of a spec, and its validation into an [`AgentSpec`].

use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use baton_proto::{AgentName, Version};
use baton_worker::{Profile, RetryPolicy};
use serde::Deserialize;
use toml::Spanned;

use super::{
    A2aSpec, AgentSpec, ChainSpec, ExecMode, ExecSpec, HistorySpec, HumanSpec, Kind, KindName,
    LlmSpec, McpSpec, Problem,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSpec {
    name: Spanned<String>,
    #[serde(default)]
    version: Option<Spanned<String>>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    tool_schema: Option<Spanned<String>>,
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
    a2a: Option<Spanned<A2aSpec>>,
    #[serde(default)]
    chain: Option<Spanned<ChainSpec>>,
    #[serde(default)]
    delegates: Vec<Spanned<RawDelegate>>,
    #[serde(default)]
    mcp: Vec<Spanned<McpSpec>>,
    #[serde(default = "four")]
    max_delegation_depth: u32,
    #[serde(default)]
    join_timeout_ms: Option<u64>,
    #[serde(default)]
    team: Option<Spanned<baton_worker::TeamSpec>>,
    #[serde(default)]
    handoffs: Vec<Spanned<RawRoute>>,
    #[serde(default)]
    conditions: Vec<Spanned<RawRoute>>,
    #[serde(default)]
    llm_conditions: Vec<Spanned<RawRoute>>,
    #[serde(default)]
    after_work: Option<Spanned<RawRoute>>,
    #[serde(default)]
    next_turn: super::NextTurn,
    #[serde(default)]
    upgrade: super::Upgrade,
    #[serde(default)]
    rollout: Option<Spanned<super::rollout::RawRollout>>,
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

pub(super) struct Report<'a> {
    pub(super) file: PathBuf,
    pub(super) text: &'a str,
    pub(super) errors: Vec<Problem>,
}

impl Report<'_> {
    pub(super) fn line(&self, span: &Range<usize>) -> usize {
        let end = span.start.min(self.text.len());
        self.text[..end].matches('\n').count() + 1
    }

    fn error(&mut self, span: &Range<usize>, message: impl Into<String>) {
        let line = (span.end > 0).then(|| self.line(span));
        self.errors.push(Problem {
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

    pub(super) fn validate(&mut self, raw: RawSpec) -> Option<AgentSpec> {
        let name = self.agent_name(raw.name.get_ref(), &raw.name.span(), "name");
        let version = self.version(raw.version.as_ref());
        let tool_schema = raw
            .tool_schema
            .as_ref()
            .and_then(|schema| self.tool_schema(schema));
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
        let mcp = self.mcp(&raw, kind.as_ref());
        let team = self.team(&raw);
        let rollout = self.rollout(&raw);
        Some(AgentSpec {
            file: self.file.clone(),
            name: name?,
            version: version?,
            version_named: raw.version.is_some(),
            profile: Profile {
                capabilities: raw.capabilities,
                domains: raw.domains,
                tier: raw.tier,
                description: (!raw.description.is_empty()).then(|| raw.description.clone()),
                tool_schema,
            },
            description: raw.description,
            concurrency: (*raw.concurrency.get_ref()).max(1),
            timeout: Duration::from_millis(*raw.timeout_ms.get_ref()),
            retry,
            fallback,
            kind: kind?,
            routing,
            delegates,
            mcp,
            max_delegation_depth: raw.max_delegation_depth,
            join_timeout: raw.join_timeout_ms.map(Duration::from_millis),
            team,
            next_turn: raw.next_turn,
            upgrade: raw.upgrade,
            rollout,
        })
    }

    /// The gated rollout `[rollout]` asks for, checked.
    fn rollout(&mut self, raw: &RawSpec) -> Option<baton_proto::Gated> {
        let section = raw.rollout.as_ref()?;
        let version = raw.version.as_ref().map(|v| v.get_ref().as_str());
        match section.get_ref().plan(version) {
            Ok(plan) => Some(plan),
            Err(wrong) => {
                for problem in wrong {
                    self.error(&section.span(), problem);
                }
                None
            }
        }
    }

    /// The spec's `version`, checked; without one, a short hash of the
    /// file's bytes, so that any change to the file is a new version.
    /// `tool_schema`: a JSON Schema of an object, as compact JSON text.
    fn tool_schema(&mut self, schema: &Spanned<String>) -> Option<String> {
        let why = match serde_json::from_str::<serde_json::Value>(schema.get_ref()) {
            Ok(value) if value.get("type").and_then(|t| t.as_str()) == Some("object") => {
                return Some(value.to_string());
            }
            Ok(_) => "it must be a JSON Schema of an object (\"type\": \"object\"), as MCP asks of a tool's input".to_owned(),
            Err(err) => format!("it is not JSON: {err}"),
        };
        self.error(&schema.span(), format!("tool_schema: {why}"));
        None
    }

    fn version(&mut self, label: Option<&Spanned<String>>) -> Option<Version> {
        let Some(label) = label else {
            return Some(Version::of_bytes(self.text.as_bytes()));
        };
        match Version::new(label.get_ref().as_str()) {
            Ok(version) => Some(version),
            Err(err) => {
                self.error(&label.span(), format!("version: {err}"));
                None
            }
        }
    }

    /// The `[team]` section, checked: member names, capability sets, depth.
    fn team(&mut self, raw: &RawSpec) -> Option<baton_worker::TeamSpec> {
        let team = raw.team.as_ref()?;
        let span = team.span();
        let spec = team.get_ref().clone();
        for member in &spec.members {
            self.agent_name(member, &span, "[team] members entry");
        }
        if spec.members.is_empty() && spec.find.is_empty() {
            self.error(
                &span,
                "[team] needs `members` (agent types) or `find` (capability sets), or both",
            );
        }
        if spec.find.iter().any(Vec::is_empty) {
            self.error(
                &span,
                "[team] find: each entry is a non-empty list of capabilities, e.g. [[\"review\"]]",
            );
        }
        if spec.max_depth == 0 {
            self.error(
                &span,
                "[team] max_depth must be at least 1 (1: it forms a team only as the top team)",
            );
        }
        Some(spec)
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
            (KindName::A2a, "a2a", raw.a2a.as_ref().map(Spanned::span)),
        ];
        for (table_kind, table, span) in &tables {
            if let Some(span) = span {
                // An exec program's model (`ctx.model`) is the [llm] table's.
                let model = kind == KindName::Exec && *table_kind == KindName::Llm;
                if *table_kind != kind && !model {
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
            KindName::Exec => self.exec_kind(raw, &kind_span),
            KindName::Llm => self.llm(raw.llm.as_ref(), &kind_span),
            KindName::Chain => self.chain(raw.chain.as_ref(), &kind_span),
            KindName::A2a => self.a2a(raw.a2a.as_ref(), &kind_span),
            KindName::Human => Some(Kind::Human(
                raw.human
                    .as_ref()
                    .map(|h| h.get_ref().clone())
                    .unwrap_or_default(),
            )),
        }
    }

    fn a2a(&mut self, a2a: Option<&Spanned<A2aSpec>>, kind_span: &Range<usize>) -> Option<Kind> {
        let Some(a2a) = a2a else {
            self.error(
                kind_span,
                "kind = \"a2a\" needs an [a2a] table with url = \"https://remote-agent.example\"",
            );
            return None;
        };
        let settings = a2a.get_ref();
        if !(settings.url.starts_with("http://") || settings.url.starts_with("https://")) {
            self.error(
                &a2a.span(),
                format!(
                    "[a2a] url {:?} is not an http(s) URL: give the remote agent's base URL, e.g. \"http://127.0.0.1:9999\"",
                    settings.url
                ),
            );
        }
        if let Some(agent) = &settings.input_required {
            self.agent_name(agent, &a2a.span(), "[a2a] input_required");
        }
        Some(Kind::A2a(settings.clone()))
    }

    fn chain(
        &mut self,
        chain: Option<&Spanned<ChainSpec>>,
        kind_span: &Range<usize>,
    ) -> Option<Kind> {
        let Some(chain) = chain else {
            self.error(
                kind_span,
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
}

mod kinds;
mod mcp;
mod routes;
