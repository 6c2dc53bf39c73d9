//! The routing rules of a spec, applied in a fixed priority:
//!
//! 1. **function-driven:** the agent's own outcome names the target;
//! 2. **context conditions:** CEL expressions over the context variables, in order;
//! 3. **LLM conditions:** natural-language conditions the agent's LLM judged true;
//! 4. **after-work:** a fixed target, `terminate` or `fallback`;
//! 5. otherwise the session completes with the agent's answer.

use std::sync::Arc;

use baton_proto::{Envelope, Reason, Value};
use baton_worker::{ContextUpdate, Need, Outcome, RouteOptions};

/// Where a route goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    /// An agent type, by name.
    Agent(String),
    /// The registry's best agent with these capabilities.
    Capabilities(Need),
    /// The worker's fallback agent.
    Fallback,
    /// End the session with the agent's answer.
    Terminate,
}

impl Dest {
    /// A short name for tools and messages: the agent, the capabilities, `fallback` or `terminate`.
    #[must_use]
    pub fn label(&self) -> String {
        match self {
            Self::Agent(agent) => agent.clone(),
            Self::Capabilities(need) => need.requires.join("_"),
            Self::Fallback => "fallback".to_owned(),
            Self::Terminate => "terminate".to_owned(),
        }
    }
}

/// One route: where, with which options.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// Where it goes.
    pub dest: Dest,
    /// Visit budget and context policy.
    pub options: RouteOptions,
    /// What the target is for (offered to LLMs as the tool's description).
    pub description: Option<String>,
}

impl Route {
    /// The outcome that takes this route, carrying `update`; `output` is the
    /// answer if the route terminates.
    fn outcome(&self, reason: &str, output: Value, update: ContextUpdate) -> Outcome {
        let reason = Reason::parse(reason);
        let mut outcome = match &self.dest {
            Dest::Agent(agent) => Outcome::handoff(agent.clone(), reason),
            Dest::Capabilities(need) => Outcome::handoff_to(need.clone(), reason),
            Dest::Fallback => Outcome::fallback(reason),
            Dest::Terminate => Outcome::complete(output),
        };
        *outcome.update_mut() = update;
        with_options(outcome, self.options)
    }
}

fn with_options(outcome: Outcome, options: RouteOptions) -> Outcome {
    let outcome = outcome.context_policy(options.context);
    match options.max_visits {
        Some(visits) => outcome.max_visits(visits),
        None => outcome,
    }
}

/// A context condition: a compiled CEL expression and its route.
#[derive(Clone)]
pub struct Condition {
    /// The expression as written.
    pub expression: String,
    program: Arc<cel::Program>,
    /// Where it goes when the expression is true.
    pub route: Route,
}

impl std::fmt::Debug for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Condition")
            .field("expression", &self.expression)
            .field("route", &self.route)
            .finish_non_exhaustive()
    }
}

impl Condition {
    /// Compiles `expression`.
    ///
    /// # Errors
    ///
    /// The parser's message when `expression` is not valid CEL.
    pub fn new(expression: &str, route: Route) -> Result<Self, String> {
        let program = cel::Program::compile(expression).map_err(|err| err.to_string())?;
        Ok(Self {
            expression: expression.to_owned(),
            program: Arc::new(program),
            route,
        })
    }

    /// Whether the expression is true over `variables`. A variable it names
    /// that is not set, or a result that is not a boolean, counts as false.
    #[must_use]
    pub fn holds(&self, variables: &baton_proto::Map) -> bool {
        let mut context = cel::Context::default();
        for (name, value) in variables {
            context.add_variable_from_value(name.clone(), to_cel(value));
        }
        match self.program.execute(&context) {
            Ok(cel::Value::Bool(result)) => result,
            Ok(other) => {
                tracing::warn!(expression = %self.expression, result = ?other, "condition is not a boolean; taken as false");
                false
            }
            Err(err) => {
                tracing::debug!(expression = %self.expression, error = %err, "condition not evaluable; taken as false");
                false
            }
        }
    }
}

/// A msgpack value as a CEL value: integers as `int` when they fit, so they
/// compare with integer literals.
fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Nil | Value::Ext(..) => cel::Value::Null,
        Value::Boolean(b) => cel::Value::Bool(*b),
        Value::Integer(n) => n
            .as_i64()
            .map(cel::Value::Int)
            .or_else(|| n.as_u64().map(cel::Value::UInt))
            .unwrap_or(cel::Value::Null),
        Value::F32(f) => cel::Value::Float(f64::from(*f)),
        Value::F64(f) => cel::Value::Float(*f),
        Value::String(s) => s.as_str().map_or(cel::Value::Null, |s| {
            cel::Value::String(Arc::new(s.to_owned()))
        }),
        Value::Binary(bytes) => cel::Value::Bytes(Arc::new(bytes.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Map(entries) => {
            let map: std::collections::HashMap<String, cel::Value> = entries
                .iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_owned(), to_cel(v))))
                .collect();
            cel::Value::from(map)
        }
    }
}

/// A natural-language condition the agent's LLM judges, and its route.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmCondition {
    /// The condition, as offered to the model.
    pub condition: String,
    /// Where it goes when the model says it holds.
    pub route: Route,
}

/// What an agent produced, before the routing rules.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Decision {
    /// The agent decided itself (function-driven): this outcome stands.
    Decided(Outcome),
    /// The agent answered and left the next step to the rules.
    Answer {
        /// The answer.
        output: Value,
        /// Context changes.
        update: ContextUpdate,
    },
    /// The agent's LLM judged LLM condition number `index` true.
    Judged {
        /// Index into [`Routing::llm_conditions`].
        index: usize,
        /// The answer so far (used if a rule terminates).
        output: Value,
        /// Context changes.
        update: ContextUpdate,
    },
}

/// A spec's routing rules.
#[derive(Debug, Clone, Default)]
pub struct Routing {
    /// Targets the agent may name itself; their options apply to such handoffs.
    pub handoffs: Vec<Route>,
    /// Context conditions, first true wins.
    pub conditions: Vec<Condition>,
    /// LLM conditions.
    pub llm_conditions: Vec<LlmCondition>,
    /// Where to go when nothing else decided.
    pub after_work: Option<Route>,
}

impl Routing {
    /// The outcome after the rules, in their priority order. Conditions are
    /// evaluated over the variables as the agent left them.
    #[must_use]
    pub fn decide(&self, envelope: &Envelope, decision: Decision) -> Outcome {
        let (output, update, judged) = match decision {
            Decision::Decided(outcome) => return self.with_declared_options(outcome),
            Decision::Answer { output, update } => (output, update, None),
            Decision::Judged {
                index,
                output,
                update,
            } => (output, update, Some(index)),
        };
        let mut variables = envelope.context.variables.clone();
        variables.extend(update.variables.clone());
        if let Some(condition) = self.conditions.iter().find(|c| c.holds(&variables)) {
            return condition.route.outcome("context_condition", output, update);
        }
        if let Some(condition) = judged.and_then(|index| self.llm_conditions.get(index)) {
            return condition.route.outcome("llm_condition", output, update);
        }
        match &self.after_work {
            Some(route) => route.outcome("after_work", output, update),
            None => Outcome::Complete { output, update },
        }
    }

    /// A function-driven handoff to a declared target takes that target's
    /// options unless the agent set its own.
    fn with_declared_options(&self, outcome: Outcome) -> Outcome {
        let Outcome::Handoff {
            target: baton_worker::Target::Agent(agent),
            options,
            ..
        } = &outcome
        else {
            return outcome;
        };
        if *options != RouteOptions::default() {
            return outcome;
        }
        match self
            .handoffs
            .iter()
            .find(|route| route.dest == Dest::Agent(agent.clone()))
        {
            Some(route) => with_options(outcome, route.options),
            None => outcome,
        }
    }

    /// Every agent type a route names, for cross-checking specs.
    pub fn named_agents(&self) -> impl Iterator<Item = &str> {
        self.handoffs
            .iter()
            .chain(self.conditions.iter().map(|c| &c.route))
            .chain(self.llm_conditions.iter().map(|c| &c.route))
            .chain(self.after_work.iter())
            .filter_map(|route| match &route.dest {
                Dest::Agent(agent) => Some(agent.as_str()),
                _ => None,
            })
    }
}

#[cfg(test)]
mod tests {
    use baton_worker::{ContextPolicy, Target};

    use super::*;

    fn to(agent: &str) -> Route {
        Route {
            dest: Dest::Agent(agent.into()),
            options: RouteOptions::default(),
            description: None,
        }
    }

    fn rules() -> Routing {
        Routing {
            handoffs: vec![Route {
                options: RouteOptions {
                    max_visits: Some(4),
                    context: ContextPolicy::Full,
                },
                ..to("engineer")
            }],
            conditions: vec![
                Condition::new("n_attempts >= max_n_attempts", to("terminator")).unwrap(),
                Condition::new("status == 'failed'", to("engineer")).unwrap(),
            ],
            llm_conditions: vec![LlmCondition {
                condition: "the user wants a refund".into(),
                route: to("refund"),
            }],
            after_work: Some(to("control")),
        }
    }

    fn envelope(vars: &[(&str, Value)]) -> Envelope {
        let mut envelope = Envelope::task("x");
        for (k, v) in vars {
            envelope
                .context
                .variables
                .insert((*k).to_owned(), v.clone());
        }
        envelope
    }

    fn target(outcome: &Outcome) -> Option<(Target, String)> {
        match outcome {
            Outcome::Handoff { target, reason, .. } => Some((target.clone(), reason.to_string())),
            _ => None,
        }
    }

    fn answer() -> Decision {
        Decision::Answer {
            output: Value::from("done"),
            update: ContextUpdate::default(),
        }
    }

    fn judged() -> Decision {
        Decision::Judged {
            index: 0,
            output: Value::Nil,
            update: ContextUpdate::default(),
        }
    }

    #[test]
    fn a_function_driven_handoff_overrides_every_rule() {
        let env = envelope(&[("n_attempts", 3.into()), ("max_n_attempts", 3.into())]);
        let outcome = rules().decide(
            &env,
            Decision::Decided(Outcome::handoff("engineer", Reason::ToolFailure)),
        );
        assert_eq!(
            target(&outcome),
            Some((Target::Agent("engineer".into()), "tool_failure".into()))
        );
        // It takes the declared target's options.
        let Outcome::Handoff { options, .. } = outcome else {
            panic!()
        };
        assert_eq!(options.max_visits, Some(4));
    }

    #[test]
    fn a_context_condition_overrides_llm_conditions_and_after_work() {
        let env = envelope(&[("n_attempts", 3.into()), ("max_n_attempts", 3.into())]);
        let outcome = rules().decide(&env, judged());
        assert_eq!(
            target(&outcome),
            Some((
                Target::Agent("terminator".into()),
                "context_condition".into()
            ))
        );
        // Conditions are tried in order, and see the agent's own updates.
        let env = envelope(&[("n_attempts", 1.into()), ("max_n_attempts", 3.into())]);
        let mut update = ContextUpdate::default();
        update.variables.insert("status".into(), "failed".into());
        let outcome = rules().decide(
            &env,
            Decision::Answer {
                output: Value::Nil,
                update,
            },
        );
        assert_eq!(
            target(&outcome),
            Some((Target::Agent("engineer".into()), "context_condition".into()))
        );
    }

    #[test]
    fn an_llm_condition_overrides_after_work() {
        let env = envelope(&[("n_attempts", 1.into()), ("max_n_attempts", 3.into())]);
        let outcome = rules().decide(&env, judged());
        assert_eq!(
            target(&outcome),
            Some((Target::Agent("refund".into()), "llm_condition".into()))
        );
    }

    #[test]
    fn after_work_overrides_completion_and_nothing_completes() {
        let env = envelope(&[]);
        let outcome = rules().decide(&env, answer());
        assert_eq!(
            target(&outcome),
            Some((Target::Agent("control".into()), "after_work".into()))
        );
        let outcome = Routing::default().decide(&env, answer());
        assert!(
            matches!(outcome, Outcome::Complete { output, .. } if output == Value::from("done"))
        );
        let terminate = Routing {
            after_work: Some(Route {
                dest: Dest::Terminate,
                ..to("x")
            }),
            ..Routing::default()
        };
        let outcome = terminate.decide(&env, answer());
        assert!(matches!(outcome, Outcome::Complete { .. }));
    }

    #[test]
    fn missing_variables_and_non_booleans_are_false() {
        let condition = Condition::new("feedback_left > 0", to("planner")).unwrap();
        assert!(!condition.holds(&baton_proto::Map::new()));
        let mut vars = baton_proto::Map::new();
        vars.insert("feedback_left".into(), Value::from(2));
        assert!(condition.holds(&vars));
        vars.insert("feedback_left".into(), Value::from(0));
        assert!(!condition.holds(&vars));
        let not_bool = Condition::new("feedback_left + 1", to("planner")).unwrap();
        assert!(!not_bool.holds(&vars));
        assert!(Condition::new("feedback_left >", to("planner")).is_err());
    }

    #[test]
    fn conditions_read_strings_floats_lists_and_maps() {
        let mut vars = baton_proto::Map::new();
        vars.insert("plan".into(), Value::Array(vec!["a".into(), "b".into()]));
        vars.insert("score".into(), Value::F64(0.75));
        vars.insert(
            "user".into(),
            Value::Map(vec![("tier".into(), Value::from("gold"))]),
        );
        for (expression, expected) in [
            ("size(plan) == 2", true),
            ("score > 0.5", true),
            ("user.tier == 'gold'", true),
            ("'c' in plan", false),
        ] {
            let condition = Condition::new(expression, to("x")).unwrap();
            assert_eq!(condition.holds(&vars), expected, "{expression}");
        }
    }
}
