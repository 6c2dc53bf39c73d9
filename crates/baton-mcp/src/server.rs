//! The MCP server: what `rmcp` asks of the gateway (its info, the log
//! level, the tools listed, a tool called).

use baton_proto::AgentName;
use rmcp::ErrorData as McpError;
use rmcp::handler::server::ServerHandler;
#[allow(deprecated)] // SetLevelRequestParams: see `logging`.
use rmcp::model::{
    CallToolRequestParams, CallToolResult, Implementation, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, SetLevelRequestParams,
};
use rmcp::service::{RequestContext, RoleServer};

use crate::Gateway;
use crate::tools::FEEDBACK_TOOL;

impl ServerHandler for Gateway {
    // Logging is deprecated from MCP 2026-07-28 (SEP-2577) and works
    // through its deprecation window: see `logging`.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            // Completions: declared, and always empty (the SDK's answer):
            // there are no prompts or resource templates to complete.
            ServerCapabilities::builder()
                .enable_tools()
                .enable_logging()
                .enable_completions()
                .build(),
        )
        .with_server_info(Implementation::new("baton", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Each tool is a Baton agent type. A call runs a whole session, which may \
                 hand off across agents, and returns its answer.",
        )
    }

    /// The level of the log notifications this MCP session gets from now
    /// on: its calls' session events at that level and above.
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.log_level.set(request.level);
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools().await?))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, McpError> {
        // Boxed: the call's future is large (it follows a session to its
        // end), and the SDK's own is around it.
        Box::pin(self.called(request, context))
            .await
            .map(Into::into)
    }
}

impl Gateway {
    /// A call of one of the tools: the feedback tool, or an agent type's
    /// session, run to its end.
    async fn called(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let name = request.name.to_string();
        if name == FEEDBACK_TOOL {
            return Ok(self.feedback(request.arguments.unwrap_or_default()).await);
        }
        let exposed = if self.only.is_empty() {
            self.client
                .check_served(&AgentName::new(name.as_str()).map_err(|err| {
                    McpError::invalid_params(format!("no tool {name:?}: {err}"), None)
                })?)
                .await
                .is_ok()
        } else {
            self.only.iter().any(|a| a.as_str() == name)
        };
        let agent = match AgentName::new(name.as_str()) {
            Ok(agent) if exposed => agent,
            _ => {
                return Err(McpError::invalid_params(
                    format!("no tool {name:?}: list the tools with tools/list"),
                    None,
                ));
            }
        };
        self.run(agent, request.arguments.unwrap_or_default(), &context)
            .await
    }
}
