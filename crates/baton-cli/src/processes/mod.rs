//! The long-running processes: the demo, workers, the router, registry
//! replicas, and the servers people and other programs reach (the console,
//! the MCP and A2A gateways).

pub mod a2a;
pub mod console;
pub mod dev;
pub mod mcp;
pub mod metrics;
pub mod registry;
pub mod router;
pub mod stop;
pub mod worker;
