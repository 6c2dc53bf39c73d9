//! `baton a2a serve`: Baton agent types, and the ingress, as A2A agents
//! (Agent2Agent protocol v1.0, JSON-RPC and HTTP+JSON bindings, streaming
//! over SSE).
//!
//! - `GET /.well-known/agent-card.json`: the ingress's card; its skills are
//!   the exposed agent types. `POST /` takes its JSON-RPC calls: a task
//!   goes to the ingress, and the router's rules pick the first agent.
//! - `GET /agents/{name}/.well-known/agent-card.json` and
//!   `POST /agents/{name}`: agent type `name` as an agent of its own.
//! - HTTP+JSON at the same bases: `POST /message:send`, `/message:stream`,
//!   `GET /tasks`, `/tasks/{id}`, `POST /tasks/{id}:cancel`,
//!   `/tasks/{id}:subscribe` (and under `/agents/{name}`). Both bindings
//!   call the same operations (`calls`, `ops`); only the encoding differs.
//!
//! An A2A task is a Baton session (the task id is the session id). Its state
//! follows the session's events; a session waiting for a person is
//! `TASK_STATE_INPUT_REQUIRED`, and the client's next message to the task is
//! the person's answer, through the inbox. `CancelTask` cancels the session.
//!
//! An A2A context is a Baton conversation (`baton_client::conversation`):
//! a message without a task id is the next turn of its context, which goes
//! to the agent that holds the conversation, with the transcript so far. A
//! message that arrives while a turn runs waits for it (`enqueue`), or is
//! refused (`reject`), as the gateway's `--overlap` or the message's
//! metadata `overlap` says.
//!
//! The wire types are the A2A project's own (`a2a-lf`). Its server and
//! client crates are not used: they bring a gRPC stack (tonic, prost and a
//! vendored protoc at build time) and a second major version of reqwest,
//! for a JSON-RPC binding that is a few routes of axum here.
//!
//! The parts:
//!
//! - `serve`: [`serve`] and its [`Settings`];
//! - `gateway`: the [`Gateway`], and which agent types it exposes;
//! - `http`: the routes, and who may call them; `rpc` and `rest`: the
//!   JSON-RPC and HTTP+JSON bindings; `calls` and `ops`: the operations
//!   both call; `errors`: A2A's errors;
//! - `card`: the agent cards;
//! - `task`, `list`: a session as an A2A task, and tasks listed;
//! - `terms`: what an agent says in A2A's terms, and what of a message
//!   reaches it;
//! - `turns`: a message to a context, a turn of its conversation;
//! - `index`: the tasks' index ([`footprint`]).

mod calls;
mod card;
mod errors;
mod gateway;
mod http;
mod index;
mod list;
mod ops;
mod rest;
mod rpc;
mod serve;
mod task;
mod terms;
mod turns;

pub use baton_gateway::Error;
pub use gateway::Gateway;
pub use index::footprint;
pub use serve::{Settings, serve};
