//! An agent's answer as a tool result. An output map with an `mcp` entry
//! answers in MCP's terms, whatever the agent's kind: the entry is a
//! `CallToolResult` (`content` of text, image, audio, embedded resources
//! and resource links; `isError`; `structuredContent`). Any other output is
//! one text block: a string as itself, anything else as JSON.

use baton_proto::Value;
use rmcp::model::{CallToolResult, ContentBlock};

/// The tool result of a session that completed with `output`.
pub(crate) fn result_of(output: Option<&Value>) -> CallToolResult {
    if let Some(said) = baton_gateway::text::entry(output, "mcp") {
        match serde_json::to_value(said).map(serde_json::from_value::<CallToolResult>) {
            Ok(Ok(result)) => return result,
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "an answer's `mcp` entry is not a tool result: shown as text");
            }
            Err(err) => tracing::warn!(error = %err, "an answer's `mcp` entry cannot be read"),
        }
    }
    let text = output.map(baton_gateway::text::value).unwrap_or_default();
    CallToolResult::success(vec![ContentBlock::text(text)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(json: serde_json::Value) -> Value {
        rmpv::ext::to_value(json).expect("a value")
    }

    #[test]
    fn an_mcp_entry_is_the_tool_result_and_anything_else_is_text() {
        let said = output(serde_json::json!({"mcp": {
            "content": [
                {"type": "text", "text": "the chart"},
                {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
            ],
            "isError": true,
            "structuredContent": {"points": 3}
        }}));
        let result = result_of(Some(&said));
        assert_eq!(result.content.len(), 2);
        assert_eq!(
            result.content[0].as_text().map(|t| t.text.as_str()),
            Some("the chart")
        );
        assert!(result.content[1].as_image().is_some());
        assert_eq!(result.is_error, Some(true));
        assert_eq!(
            result.structured_content,
            Some(serde_json::json!({"points": 3}))
        );
        let plain = result_of(Some(&output(serde_json::json!({"points": 3}))));
        assert_eq!(
            plain.content[0].as_text().map(|t| t.text.as_str()),
            Some(r#"{"points":3}"#)
        );
        let wrong = output(serde_json::json!({"mcp": {"content": "not a list"}}));
        let shown = result_of(Some(&wrong));
        assert_eq!(shown.is_error, Some(false));
        assert!(
            shown.content[0]
                .as_text()
                .is_some_and(|t| t.text.contains("not a list"))
        );
    }
}
