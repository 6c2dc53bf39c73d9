//! Routing rules, applied by the runtime to every agent's outcome in a fixed
//! priority (step 4 of the worker loop):
//!
//! 1. **function-driven:** the agent's own outcome names the target;
//! 2. **context conditions:** CEL expressions over the context variables, in order;
//! 3. **LLM conditions:** natural-language conditions the agent's model judged true;
//! 4. **after-work:** a fixed route, which may terminate;
//! 5. otherwise the session completes with the agent's answer.
//!
//! Rust agents return their rules from [`crate::Agent::routing`]; spec agents
//! get theirs from the spec file. Both go through [`Routing`].

use std::sync::Arc;

use baton_proto::{Envelope, Map, Reason, Value};

use crate::outcome::{Answer, Complete, ContextUpdate, Delegation, Handoff, Outcome, Wait};
use crate::policy::RouteOptions;
use crate::target::Target;

/// One route: where, with which options.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// Where it goes; `None` terminates: the session completes with the answer.
    pub target: Option<Target>,
    /// Visit budget and context policy.
    pub options: RouteOptions,
    /// What the target is for (offered to LLMs as the tool's description).
    pub description: Option<String>,
}

impl Route {
    /// A route to `target` with default options.
    #[must_use]
    pub fn to(target: impl Into<Target>) -> Self {
        Self {
            target: Some(target.into()),
            options: RouteOptions::default(),
            description: None,
        }
    }

    /// A route that ends the session with the agent's answer.
    #[must_use]
    pub fn terminate() -> Self {
        Self {
            target: None,
            options: RouteOptions::default(),
            description: None,
        }
    }

    /// A short name for tools and messages: the target's label, or `terminate`.
    #[must_use]
    pub fn label(&self) -> String {
        self.target
            .as_ref()
            .map_or_else(|| "terminate".to_owned(), Target::label)
    }

    /// The outcome that takes this route for `reason`, carrying `update`;
    /// `output` is the answer if the route terminates.
    #[must_use]
    pub fn take(&self, reason: Reason, output: Value, update: ContextUpdate) -> Outcome {
        self.step(reason, output, update).into()
    }

    fn step(&self, reason: Reason, output: Value, update: ContextUpdate) -> Step {
        match &self.target {
            Some(target) => Step::Handoff(Handoff {
                target: target.clone(),
                reason,
                suggested_next_action: None,
                update,
                options: self.options,
            }),
            None => Step::Complete(Complete { output, update }),
        }
    }
}

/// A context condition: a compiled CEL expression over the context
/// variables, and its route.
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
    /// [`ErrorKind::Condition`](crate::ErrorKind::Condition) with the
    /// parser's message when `expression` is not valid CEL.
    pub fn new(expression: &str, route: Route) -> Result<Self, crate::Error> {
        let program = cel::Program::compile(expression).map_err(|err| {
            crate::Error::new(
                crate::ErrorKind::Condition,
                format!("invalid condition {expression:?}: {err}"),
            )
        })?;
        Ok(Self {
            expression: expression.to_owned(),
            program: Arc::new(program),
            route,
        })
    }

    /// Whether the expression is true over `variables`. A variable it names
    /// that is not set, or a result that is not a boolean, counts as false.
    #[must_use]
    pub fn holds(&self, variables: &Map) -> bool {
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

/// A natural-language condition the agent's model judges, and its route.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmCondition {
    /// The condition, as offered to the model.
    pub condition: String,
    /// Where it goes when the model says it holds.
    pub route: Route,
}

/// An agent type's routing rules.
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

/// What the runtime carries out once the rules have spoken: a step to plan,
/// or a delegation to start.
#[derive(Debug, Clone, PartialEq)]
#[doc(hidden)]
pub enum Decided {
    /// Complete, hand off, or wait.
    Step(Step),
    /// Send children and wait for their results.
    Delegate(Delegation),
}

/// An outcome the planner turns into messages.
#[derive(Debug, Clone, PartialEq)]
#[doc(hidden)]
pub enum Step {
    Complete(Complete),
    Handoff(Handoff),
    Wait(Wait),
}

impl From<Step> for Outcome {
    fn from(step: Step) -> Self {
        match step {
            Step::Complete(complete) => Self::Complete(complete),
            Step::Handoff(handoff) => Self::Handoff(handoff),
            Step::Wait(wait) => Self::Wait(wait),
        }
    }
}

impl Routing {
    /// The outcome after `rules` (none: an answer completes), in their
    /// priority order. Conditions see the variables as the agent left them.
    #[doc(hidden)]
    pub fn decide(rules: Option<&Self>, envelope: &Envelope, outcome: Outcome) -> Decided {
        let step = match outcome {
            Outcome::Complete(complete) => Step::Complete(complete),
            Outcome::Handoff(handoff) => Step::Handoff(match rules {
                Some(rules) => rules.with_declared_options(handoff),
                None => handoff,
            }),
            Outcome::Delegate(delegation) => return Decided::Delegate(delegation),
            Outcome::Wait(wait) => Step::Wait(wait),
            Outcome::Answer(answer) => match rules {
                Some(rules) => rules.after(envelope, answer),
                None => Step::Complete(Complete {
                    output: answer.output,
                    update: answer.update,
                }),
            },
        };
        Decided::Step(step)
    }

    /// Where an answer goes: context conditions, the judged LLM condition,
    /// after-work, else completion.
    fn after(&self, envelope: &Envelope, answer: Answer) -> Step {
        let Answer {
            output,
            update,
            judged,
        } = answer;
        let mut variables = envelope.context.variables.clone();
        variables.extend(update.variables.clone());
        let (route, reason) = if let Some(condition) =
            self.conditions.iter().find(|c| c.holds(&variables))
        {
            (&condition.route, Reason::ContextCondition)
        } else if let Some(condition) = judged.and_then(|index| self.llm_conditions.get(index)) {
            (&condition.route, Reason::LlmCondition)
        } else if let Some(route) = &self.after_work {
            (route, Reason::AfterWork)
        } else {
            return Step::Complete(Complete { output, update });
        };
        route.step(reason, output, update)
    }

    /// A function-driven handoff to a declared target takes that target's
    /// options unless the agent set its own.
    fn with_declared_options(&self, mut handoff: Handoff) -> Handoff {
        if handoff.options != RouteOptions::default() {
            return handoff;
        }
        if let Some(route) = self
            .handoffs
            .iter()
            .find(|route| route.target.as_ref() == Some(&handoff.target))
        {
            handoff.options = route.options;
        }
        handoff
    }

    /// Every route, in priority order.
    pub fn routes(&self) -> impl Iterator<Item = &Route> {
        self.handoffs
            .iter()
            .chain(self.conditions.iter().map(|c| &c.route))
            .chain(self.llm_conditions.iter().map(|c| &c.route))
            .chain(self.after_work.iter())
    }
}

#[cfg(test)]
mod tests;
