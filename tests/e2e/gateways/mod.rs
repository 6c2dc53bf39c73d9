//! The gateways, with the protocols' own clients: A2A (both ways), MCP, and the console in a headless browser.

pub(crate) mod a2a;
pub(crate) mod a2a_llm;
pub(crate) mod a2a_remote;
pub(crate) mod a2a_tck;
pub(crate) mod console;
pub(crate) mod console_conversations;
pub(crate) mod console_versions;
pub(crate) mod console_versions_labels;
pub(crate) mod mcp;
pub(crate) mod mcp_conformance;
pub(crate) mod mcp_oauth;
