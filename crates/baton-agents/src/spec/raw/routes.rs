//! The routing sections of a spec: handoffs, conditions, LLM conditions,
//! after-work and delegates.

use std::collections::BTreeSet;

use baton_worker::{
    Condition, ContextPolicy, LlmCondition, Need, Route, RouteOptions, Routing, Target,
};
use toml::Spanned;

use super::{RawContext, RawRoute, RawSpec, Report, Section};
use crate::spec::{DelegateSpec, Kind};

impl Report<'_> {
    pub(super) fn delegates(&mut self, raw: &RawSpec, kind: Option<&Kind>) -> Vec<DelegateSpec> {
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
            let target = match (&entry.agent, entry.requires.is_empty()) {
                (Some(agent), true) => match self.agent_name(agent, &span, "[[delegates]] agent") {
                    Some(name) => Target::Agent(name),
                    None => continue,
                },
                (None, false) => Target::Capabilities(Need::capabilities(entry.requires.clone())),
                _ => {
                    self.error(
                        &span,
                        "[[delegates]] needs exactly one of agent = \"...\" and requires = [...]",
                    );
                    continue;
                }
            };
            if !tools.insert(target.label()) {
                self.error(
                    &span,
                    format!("a second delegate {:?}: keep one", target.label()),
                );
                continue;
            }
            delegates.push(DelegateSpec {
                target,
                description: entry.description.clone(),
            });
        }
        delegates
    }

    pub(super) fn routing(&mut self, raw: &RawSpec, kind: Option<&Kind>) -> Routing {
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
                if !tools.insert(parsed.label()) {
                    self.error(
                        &route.span(),
                        format!(
                            "a second route to {:?} would offer the model a second transfer_to_{} tool: keep one",
                            parsed.label(),
                            parsed.label()
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
        let target = self.target(raw, &span, section)?;
        if !raw.domains.is_empty() && raw.requires.is_empty()
            || raw.min_tier.is_some() && raw.requires.is_empty()
        {
            self.error(
                &span,
                format!("{where_}: `domains` and `min_tier` go with `requires`, not with `to`"),
            );
        }
        if matches!(target, None | Some(Target::Fallback))
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
            target,
            options: RouteOptions {
                max_visits: raw.max_visits,
                context,
            },
            description: raw.description.clone(),
        })
    }

    /// A route's target: `Some(None)` for `terminate`, `None` after an error.
    fn target(
        &mut self,
        raw: &RawRoute,
        span: &std::ops::Range<usize>,
        section: Section,
    ) -> Option<Option<Target>> {
        let where_ = section.name();
        match (&raw.to, raw.requires.is_empty()) {
            (Some(_), false) => {
                self.error(
                    span,
                    format!("{where_} has both `to` and `requires`: keep one"),
                );
                None
            }
            (None, true) => {
                self.error(
                    span,
                    format!(
                        "{where_} needs a target: to = \"agent\" (or \"terminate\" / \"fallback\"), or requires = [\"capability\"]"
                    ),
                );
                None
            }
            (None, false) => Some(Some(Target::Capabilities(Need {
                requires: raw.requires.clone(),
                domains: raw.domains.clone(),
                min_tier: raw.min_tier,
            }))),
            (Some(to), true) => match to.as_str() {
                "terminate" | "fallback" if section == Section::Handoffs => {
                    self.error(
                        span,
                        format!(
                            "[[handoffs]] lists agents the agent may name; {to:?} is not one (use [after_work] to = {to:?})"
                        ),
                    );
                    None
                }
                "terminate" => Some(None),
                "fallback" => Some(Some(Target::Fallback)),
                agent => Some(Some(Target::Agent(self.agent_name(agent, span, "to")?))),
            },
        }
    }
}
