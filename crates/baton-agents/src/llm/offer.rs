//! The tools an LLM agent offers its model for the spec's routes: a
//! `transfer_to_<target>` per handoff and per LLM condition, an
//! `agent_run_<target>` per delegate, and `hand_back` when the spec
//! offers it.

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
    /// `hand_back`: the answer, and the conversation back to its entry.
    HandBack,
}

/// The built-in tool that answers and hands the conversation back.
pub(super) const HAND_BACK: &str = "hand_back";

fn target_text(target: Option<&Target>) -> String {
    match target {
        Some(Target::Agent(agent)) => format!("the {agent} agent"),
        Some(Target::Capabilities(need)) => {
            format!("an agent that can {}", need.requires.join(", "))
        }
        Some(Target::Escalate(_)) => "an agent of a higher tier".to_owned(),
        Some(Target::Fallback) => "a person".to_owned(),
        None => "nobody: the conversation ends".to_owned(),
    }
}

/// The tools the model is offered for the spec's routes: a handoff per
/// route, one per LLM condition, a delegate per delegate, and `hand_back`
/// when the spec offers it.
pub(super) fn offered(routing: &Routing, delegates: &[DelegateSpec], hand_back: bool) -> Vec<Tool> {
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
    if hand_back {
        tools.push(Tool {
            name: HAND_BACK.to_owned(),
            description: "Give the user your final answer and hand the conversation back to its \
                          entry agent: their next message starts there, not with you. Use it \
                          when your part is done."
                .to_owned(),
            source: ToolSource::HandBack,
        });
    }
    tools
}
