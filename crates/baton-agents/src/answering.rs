//! How a worker answers an MCP server: it introduces itself as Baton at
//! this build's version, and, when a server asks the user something during
//! a call (`elicitation/create`), it answers as the spec's `[[mcp]]
//! elicitation` says.

use rmcp::ErrorData as McpError;
use rmcp::handler::client::ClientHandler;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    Implementation,
};
use rmcp::service::{RequestContext, RoleClient};
use serde_json::{Map, Value as Json};

use crate::spec::McpElicitation;

/// A worker's side of one MCP connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answering {
    elicitation: McpElicitation,
}

impl Answering {
    /// Answering as `elicitation` says.
    pub(crate) fn new(elicitation: McpElicitation) -> Self {
        Self { elicitation }
    }
}

impl ClientHandler for Answering {
    /// Baton at this build's version, speaking MCP 2025-11-25. It declares form elicitation only
    /// when it answers one (`defaults`); declining, it declares none, so a
    /// server does not ask.
    fn get_info(&self) -> ClientConfig {
        let capabilities = match self.elicitation {
            McpElicitation::Decline => ClientCapabilities::default(),
            McpElicitation::Defaults => ClientCapabilities::builder().enable_elicitation().build(),
        };
        // MCP 2025-11-25, the version Baton is tested against (the SDK's
        // default is its newest, 2026-07-28); a server on an older one
        // answers with it, and the session goes on in that.
        ClientConfig::new(
            capabilities,
            Implementation::new("baton", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(rmcp::model::ProtocolVersion::V_2025_11_25)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let decline = ElicitResult::new(ElicitationAction::Decline);
        let ElicitRequestParams::FormElicitationParams {
            requested_schema,
            message,
            ..
        } = request
        else {
            return Ok(decline);
        };
        if self.elicitation == McpElicitation::Decline {
            return Ok(decline);
        }
        let schema = serde_json::to_value(&requested_schema).unwrap_or(Json::Null);
        match defaults(&schema) {
            Some(content) => {
                tracing::info!(%message, "an MCP server asked the user: accepted with the schema's defaults");
                Ok(ElicitResult::new(ElicitationAction::Accept).with_content(content))
            }
            None => {
                tracing::info!(%message, "an MCP server asked the user for a field without a default: declined");
                Ok(decline)
            }
        }
    }
}

/// Every property of `schema` with its `default` (SEP-1034); `None` when a
/// required property has none.
fn defaults(schema: &Json) -> Option<Json> {
    let properties = schema.get("properties").and_then(Json::as_object)?;
    let mut content = Map::new();
    for (name, property) in properties {
        if let Some(default) = property.get("default") {
            content.insert(name.clone(), default.clone());
        }
    }
    let required = schema.get("required").and_then(Json::as_array);
    let all_there = required
        .into_iter()
        .flatten()
        .filter_map(Json::as_str)
        .all(|name| content.contains_key(name));
    all_there.then_some(Json::Object(content))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_every_field_that_has_one_and_a_required_one_without_declines() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "status": {"type": "string", "enum": ["active", "inactive"], "default": "active"},
                "note": {"type": "string"}
            },
            "required": ["name"]
        });
        assert_eq!(
            defaults(&schema),
            Some(serde_json::json!({"name": "John Doe", "age": 30, "status": "active"}))
        );
        let mut needs = schema.clone();
        needs["required"] = serde_json::json!(["name", "note"]);
        assert_eq!(defaults(&needs), None);
    }
}
