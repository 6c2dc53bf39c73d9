//! The worker's model and tools for a Python agent: `ctx.model` and
//! `ctx.tool` through the same code as an LLM agent's, with the stand-in
//! model counting its requests and the order server logging each refund.
