//! What an LLM agent offers its model besides the conversation:
//!
//! - [`Offered`]: the agent's tools, a `transfer_to_<target>` per handoff
//!   and per LLM condition, an `agent_run_<target>` per delegate,
//!   `hand_back` when the spec offers it (each a [`Tool`]), and the tools of
//!   its MCP servers;
//! - [`Builtins`]: which built-in tools one call offers besides
//!   (`ask_user`, `a2a_reply`);
//! - [`Offered::listed`]: the tools as the chat-completions API lists them.

use std::sync::Arc;

use baton_worker::{Route, Routing, Target};
use serde_json::{Value as Json, json};

use crate::spec::DelegateSpec;
use crate::tools::Toolbox;

/// The built-in tools a call of the agent's turn offers beside the
/// agent's own (a summary's call offers no tools at all).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Builtins {
    /// `ask_user`, in a conversation's turn.
    pub(crate) ask_user: bool,
    /// `a2a_reply`, for a task that came through A2A.
    pub(crate) a2a_reply: bool,
}

/// The built-in tool that asks the user.
pub(crate) const ASK_USER: &str = "ask_user";

/// What the model is told of `ask_user`.
pub(crate) const ASK_USER_DESCRIPTION: &str = "Ask the user a question and wait for their answer, which comes back as this tool's result. Use it when only the user can tell you what you need.";

/// The built-in tool that answers an A2A client in A2A's own terms.
pub(crate) const A2A_REPLY: &str = "a2a_reply";

/// What the model is told of `a2a_reply`.
pub(crate) const A2A_REPLY_DESCRIPTION: &str = "Answer the A2A client in A2A's own terms, which ends the task: `message` for a direct answer (a Message, not a task), `artifacts` for results made of text, file or data parts, or `reject` with the reason to decline the task. Answer in plain text when none of these is needed.";

/// The parameters of `a2a_reply`: the `a2a` entry of an agent's output, in
/// A2A's JSON (proto-schemas/PROTOCOL.md, "A2A answers").
fn a2a_reply_parameters() -> Json {
    let part = json!({
        "type": "object",
        "description": "One part: `text`, `raw` (base64 bytes), `url` or `data` (any JSON), with `filename` and `mediaType` for a file",
        "properties": {
            "text": {"type": "string"},
            "raw": {"type": "string"},
            "url": {"type": "string"},
            "data": {},
            "filename": {"type": "string"},
            "mediaType": {"type": "string"},
        },
    });
    json!({
        "type": "object",
        "properties": {
            "message": {"type": "array", "items": part, "description": "The parts of a direct answer"},
            "artifacts": {"type": "array", "description": "The task's results", "items": {
                "type": "object",
                "properties": {
                    "artifactId": {"type": "string"},
                    "name": {"type": "string"},
                    "parts": {"type": "array", "items": part},
                    "append": {"type": "boolean", "description": "This is a chunk added to the artifact with this id"},
                    "lastChunk": {"type": "boolean"},
                },
                "required": ["artifactId", "parts"],
            }},
            "reject": {"type": "string", "description": "Why you decline the task"},
        },
    })
}

/// The agent's tools, and where their calls go.
#[derive(Debug, Clone)]
pub(crate) struct Offered {
    /// The tools for the spec's routes.
    pub(crate) tools: Vec<Tool>,
    /// The routes of the handoff tools, by [`ToolSource::Handoff`] index.
    pub(crate) handoffs: Vec<Route>,
    /// The delegates, by [`ToolSource::Delegate`] index.
    pub(crate) delegates: Vec<DelegateSpec>,
    /// Tools from the spec's MCP servers.
    pub(crate) toolbox: Arc<Toolbox>,
}

impl Offered {
    /// The tools for `routing` and `delegates` (no MCP tools yet).
    pub(crate) fn new(routing: &Routing, delegates: &[DelegateSpec], hand_back: bool) -> Self {
        Self {
            tools: offered(routing, delegates, hand_back),
            handoffs: routing.handoffs.clone(),
            delegates: delegates.to_vec(),
            toolbox: Arc::default(),
        }
    }

    /// The route tool named `name`.
    pub(crate) fn find(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|tool| tool.name == name)
    }

    /// The names of every tool, the MCP servers' after the routes'.
    pub(crate) fn names(&self) -> Vec<&str> {
        let mcp = self.toolbox.tools().iter().map(|tool| tool.name.as_str());
        self.tools
            .iter()
            .map(|tool| tool.name.as_str())
            .chain(mcp)
            .collect()
    }

    /// The tools a turn's call offers the model with `builtins`, as the
    /// API lists them; `None` when there are none.
    pub(crate) fn listed(&self, builtins: Builtins) -> Option<Vec<Json>> {
        let tools = !self.tools.is_empty()
            || !self.toolbox.tools().is_empty()
            || builtins.ask_user
            || builtins.a2a_reply;
        if !tools {
            return None;
        }
        let mcp = self
            .toolbox
            .tools()
            .iter()
            .map(|tool| function(&tool.name, &tool.description, tool.schema.clone()));
        let own = self
            .tools
            .iter()
            .map(|tool| function(&tool.name, &tool.description, parameters(&tool.source)));
        let ask = builtins.ask_user.then(|| {
            let question = json!({"type": "object", "properties": {"question": {"type": "string", "description": "The question, as the user should read it"}}, "required": ["question"]});
            function(ASK_USER, ASK_USER_DESCRIPTION, question)
        });
        let reply = builtins
            .a2a_reply
            .then(|| function(A2A_REPLY, A2A_REPLY_DESCRIPTION, a2a_reply_parameters()));
        Some(own.chain(mcp).chain(ask).chain(reply).collect())
    }
}

/// A tool as the chat completions API lists it.
pub(crate) fn function(name: &str, description: &str, parameters: Json) -> Json {
    json!({
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    })
}

/// The parameters of a delegate, handoff or condition tool.
pub(crate) fn parameters(source: &ToolSource) -> Json {
    match source {
        ToolSource::Delegate(_) => json!({
            "type": "object",
            "properties": {"task": {"type": "string", "description": "What to do, in full."}},
            "required": ["task"],
        }),
        ToolSource::HandBack => json!({
            "type": "object",
            "properties": {"answer": {"type": "string", "description": "Your final answer to the user."}},
            "required": ["answer"],
        }),
        _ => json!({
            "type": "object",
            "properties": {"reason": {"type": "string", "description": "Why the conversation moves on."}},
        }),
    }
}

/// One tool offered to the model.
#[derive(Debug, Clone)]
pub(crate) struct Tool {
    pub(crate) name: String,
    pub(crate) description: String,
    /// Index into the spec's handoffs, or into its LLM conditions.
    pub(crate) source: ToolSource,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ToolSource {
    Handoff(usize),
    Condition(usize),
    /// A delegate: the call is a child task.
    Delegate(usize),
    /// `hand_back`: the answer, and the conversation back to its entry.
    HandBack,
}

/// The built-in tool that answers and hands the conversation back.
pub(crate) const HAND_BACK: &str = "hand_back";

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
fn offered(routing: &Routing, delegates: &[DelegateSpec], hand_back: bool) -> Vec<Tool> {
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
