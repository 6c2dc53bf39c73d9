//! `baton mcp serve`: Baton agent types as MCP tools, through the official
//! Rust SDK (`rmcp`), over stdio or streamable HTTP.
//!
//! Each agent type is a tool named after it, described by its registry
//! entry, taking a `question`, optional `variables` and an optional
//! `budget_tokens` and `budget_cost` (capped by the gateway's own budget). A call starts a
//! session at that agent type, relays the session's events as progress
//! notifications (when the caller asked for progress; then the answers as
//! they are written come among them, `delta <agent>: <text>`), and returns
//! the answer, or the failure as a tool error. Each result names its
//! session in `_meta` (`baton/session`). A client that sets a log level
//! (`logging/setLevel`) gets the session's events as log notifications.
//! The tool `baton.feedback` takes a
//! session, a `score` from 0 to 1 and a `note`, and gives the registry
//! that feedback.
//!
//! The parts:
//!
//! - `gateway`: the [`Gateway`], how it is built, and MCP over stdio;
//! - `server`: the MCP server `rmcp` runs (its info, the tools listed, a
//!   tool called);
//! - `tools`: the tools, one per exposed agent type, and `baton.feedback`;
//! - `call`: a tool call, one session followed to its end and turned into
//!   a tool result;
//! - `answer`: an agent's answer as a tool result (an `mcp` entry in its
//!   output says it in MCP's terms);
//! - `conversation`: a call that continues a conversation;
//! - `elicit`: an agent's question to the user asked of the client
//!   (`elicitation/create`), when it answers elicitations;
//! - `logging`: the level an MCP session sets, and its calls' session
//!   events as log notifications;
//! - `http`: MCP over streamable HTTP ([`serve_http`]).

mod answer;
mod call;
mod conversation;
mod elicit;
mod gateway;
mod http;
mod logging;
mod server;
mod tools;

pub use baton_gateway::Error;
pub use gateway::Gateway;
pub use http::serve_http;
pub use tools::FEEDBACK_TOOL;
