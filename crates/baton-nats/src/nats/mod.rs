//! NATS plumbing, below everything else: nothing here knows of agents,
//! plans or sessions beyond their subjects.
//!
//! - [`connection`]: a client that learns its user's publish permissions;
//! - [`provision`]: the protocol's streams, consumers and buckets, created
//!   idempotently;
//! - [`publish`]: durable publishing (deduplicated ids, PubAcks awaited with
//!   backoff), live publishing, and the guarded writes that end a session;
//! - [`events`]: a session's events read by subject (the last, each up
//!   to a sequence);
//! - [`claimcheck`]: large payloads parked in the object store;
//! - [`served`]: which agent types have workers;
//! - [`watched`]: a key-value bucket followed into memory;
//! - [`trace`]: the trace context in message headers.

pub mod claimcheck;
pub mod connection;
pub mod events;
pub mod ordered;
pub mod provision;
pub mod publish;
pub mod served;
pub mod trace;
pub mod watched;
