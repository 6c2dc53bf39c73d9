//! The tools: every exposed agent type, described from its registry
//! entry, and `baton.feedback`, which gives the registry a session's score.

use baton_proto::LookupRequest;
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};

use crate::Gateway;

impl Gateway {
    /// The tools: every exposed agent type, described from the registry.
    pub(crate) async fn tools(&self) -> Result<Vec<Tool>, McpError> {
        let candidates = match self.registry.lookup(&LookupRequest::default()).await {
            Ok(answer) => answer.candidates,
            // Without a registry, the named agent types are still tools.
            Err(err) if !self.only.is_empty() => {
                tracing::warn!(error = %err, "no registry: the tools have no descriptions");
                Vec::new()
            }
            Err(err) => {
                return Err(McpError::internal_error(
                    format!(
                        "{err}: start a registry (`baton registry`), or name the agent types with --agents"
                    ),
                    None,
                ));
            }
        };
        Ok(baton_gateway::exposed(&self.only, &candidates)
            .into_iter()
            .map(|name| {
                let found = candidates.iter().find(|c| c.agent == name);
                let mut description = found
                    .and_then(|c| c.description.clone())
                    .unwrap_or_else(|| format!("The Baton agent type {name}"));
                if let Some(c) = found.filter(|c| !c.capabilities.is_empty()) {
                    description.push_str(&format!(
                        ". Capabilities: {}; domains: {}; tier {}.",
                        c.capabilities.join(", "),
                        if c.domains.is_empty() {
                            "any".to_owned()
                        } else {
                            c.domains.join(", ")
                        },
                        c.tier
                    ));
                }
                let schema = found
                    .and_then(|c| c.tool_schema.as_deref())
                    .and_then(own_schema)
                    .unwrap_or_else(input_schema);
                Tool::new(name, description, schema)
            })
            .chain(std::iter::once(feedback_tool()))
            .collect())
    }

    /// Whether `agent` takes arguments of its own (a spec's `tool_schema`),
    /// as the registry says; without a registry, it takes the gateway's.
    pub(crate) async fn takes_own_arguments(&self, agent: &baton_proto::AgentName) -> bool {
        match self.registry.lookup(&LookupRequest::default()).await {
            Ok(answer) => answer.candidates.iter().any(|c| {
                &c.agent == agent && c.tool_schema.as_deref().and_then(own_schema).is_some()
            }),
            Err(err) => {
                tracing::warn!(error = %err, %agent, "no registry: the call is read with the gateway's own arguments");
                false
            }
        }
    }

    /// `baton.feedback`: says how well a session went.
    pub(crate) async fn feedback(&self, arguments: JsonObject) -> CallToolResult {
        let session = arguments.get("session").and_then(|s| s.as_str());
        let score = arguments.get("score").and_then(serde_json::Value::as_f64);
        let (Some(session), Some(score)) = (session, score) else {
            return CallToolResult::error(vec![ContentBlock::text(
                "the arguments `session` (a session id) and `score` (a number from 0 to 1) are required",
            )]);
        };
        let request = baton_proto::FeedbackRequest {
            session: session.to_owned(),
            score,
            note: arguments
                .get("note")
                .and_then(|n| n.as_str())
                .map(str::to_owned),
            extra: baton_proto::Map::new(),
        };
        match self.registry.feedback(&request).await {
            Ok(reply) => CallToolResult::success(vec![ContentBlock::text(format!(
                "feedback {score} recorded for session {session}, credited to {}",
                reply.credited.join(", ")
            ))]),
            Err(err) => CallToolResult::error(vec![ContentBlock::text(format!(
                "no feedback was recorded: {err}"
            ))]),
        }
    }
}

/// The name of the feedback tool: a dot, which no agent type has.
pub const FEEDBACK_TOOL: &str = "baton.feedback";

/// `baton.feedback`: how well a session (named in a result's `_meta`,
/// `baton/session`) went.
fn feedback_tool() -> Tool {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "session": {"type": "string", "description": "The session, as a tool result's _meta `baton/session` names it"},
            "score": {"type": "number", "minimum": 0, "maximum": 1, "description": "How well it went: 0 (not resolved) to 1 (fully resolved)"},
            "note": {"type": "string", "description": "What to say about it (optional)"}
        },
        "required": ["session", "score"]
    });
    let schema = match schema {
        serde_json::Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    Tool::new(
        FEEDBACK_TOOL,
        "Say how well a finished session went, from 0 to 1: the agents of its path are credited, and the registry learns from it.",
        schema,
    )
}

/// An agent type's own input schema, as its spec wrote it (every keyword
/// kept: `$schema`, `$defs`, `additionalProperties`).
fn own_schema(text: &str) -> Option<JsonObject> {
    match serde_json::from_str(text) {
        Ok(serde_json::Value::Object(map)) => Some(map),
        _ => None,
    }
}

/// The tools' input: the question and optional shared variables.
fn input_schema() -> JsonObject {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "The task for the agent, as the user would ask it"},
            "variables": {"type": "object", "description": "Shared context variables the agents may read (optional)"},
            "budget_tokens": {"type": "integer", "minimum": 1, "description": "The most tokens the session may spend on models (optional; the server's own budget, when it has one, caps it)"},
            "budget_cost": {"type": ["number", "string"], "description": "The most the session may cost, as an amount such as 0.50 in the currency of the agents' price tables (optional; the server's own budget, when it has one, caps it)"},
            "conversation": {"type": "string", "description": "Continue this conversation: any id, a new one starts it at this agent type (optional). The question goes to the agent that holds the conversation, with the conversation so far; when an agent asked the user something, it is the answer. The result's structuredContent names the conversation and the session."}
        },
        "required": ["question"]
    });
    match schema {
        serde_json::Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}
