//! The tools an LLM agent offers its model for the spec's routes: a
//! `transfer_to_<target>` per handoff and per LLM condition, and an
//! `agent_run_<target>` per delegate.

use baton_worker::{Route, Routing, Target};

use crate::spec::DelegateSpec;

/// One tool offered to the model.
#[derive(Debug, Clone)]
pub(super) struct Tool {
    pub(super) name: String,
    pub(super) description: String,
    /// Index into the spec's handoffs, or into its LLM conditions.
    pub(super) source: ToolSource,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ToolSource {
    Handoff(usize),
    Condition(usize),
    /// A delegate: the call is a child task.
    Delegate(usize),
}

fn target_text(target: Option<&Target>) -> String {
    match target {
        Some(Target::Agent(agent)) => format!("the {agent} agent"),
        Some(Target::Capabilities(need)) => {
            format!("an agent that can {}", need.requires.join(", "))
        }
        Some(Target::Escalate(_)) => "an agent of a higher tier".to_owned(),
        Some(Target::Fallback | _) => "a person".to_owned(),
        None => "nobody: the conversation ends".to_owned(),
    }
}

/// The tools the model is offered for the spec's routes: a handoff per
/// route, one per LLM condition, and a delegate per delegate.
pub(super) fn offered(routing: &Routing, delegates: &[DelegateSpec]) -> Vec<Tool> {
    let describe = |route: &Route, fallback: String| route.description.clone().unwrap_or(fallback);
    let mut tools: Vec<Tool> = routing
        .handoffs
        .iter()
        .enumerate()
        .map(|(index, route)| Tool {
            name: format!("transfer_to_{}", route.label()),
            description: describe(
                route,
                format!(
                    "Hand the conversation to {}.",
                    target_text(route.target.as_ref())
                ),
            ),
            source: ToolSource::Handoff(index),
        })
        .collect();
    tools.extend(
        routing
            .llm_conditions
            .iter()
            .enumerate()
            .map(|(index, condition)| Tool {
                name: format!("transfer_to_{}", condition.route.label()),
                description: condition.condition.clone(),
                source: ToolSource::Condition(index),
            }),
    );
    tools.extend(delegates.iter().enumerate().map(|(index, delegate)| Tool {
        name: format!("agent_run_{}", delegate.target.label()),
        description: delegate.description.clone().unwrap_or_else(|| {
            format!(
                "Ask {} to do a task and get its answer.",
                target_text(Some(&delegate.target))
            )
        }),
        source: ToolSource::Delegate(index),
    }));
    tools
}
