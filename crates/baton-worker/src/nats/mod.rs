//! NATS plumbing, below everything else: nothing here knows of agents,
//! plans or sessions beyond their subjects.
//!
//! - [`connection`]: a client that learns its user's publish permissions;
//! - [`provision`]: the protocol's streams, consumers and buckets, created
//!   idempotently;
//! - [`publish`]: durable publishing (deduplicated ids, PubAcks awaited with
//!   backoff), live publishing, and the guarded writes that end a session;
//! - [`ending`]: whether a session has ended, read from its events;
//! - [`claimcheck`]: large payloads parked in the object store;
//! - [`served`]: which agent types have workers;
//! - [`watched`]: a key-value bucket followed into memory;
//! - [`trace`]: the trace context in message headers.

pub(crate) mod claimcheck;
pub(crate) mod connection;
pub(crate) mod ending;
pub(crate) mod ordered;
pub(crate) mod provision;
pub(crate) mod publish;
pub(crate) mod served;
pub(crate) mod trace;
pub(crate) mod watched;
