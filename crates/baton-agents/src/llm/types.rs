//! The lowest layer of a model call: its types, which import nothing of
//! the layers above them.
//!
//! - `chat`: typed chat messages and the model's tool calls;
//! - `response`: what the endpoint answers, plain or streamed, read through
//!   typed fields;
//! - `offer`: the tools an agent offers its model, and what one call offers;
//! - `prompt`: the system prompt and the conversation as chat messages, and
//!   what a summarising model is asked;
//! - `request`: one call's request, and its body written byte for byte as
//!   earlier versions wrote it (so recorded digests still match).

pub(crate) mod chat;
pub(crate) mod offer;
pub(crate) mod prompt;
pub(crate) mod request;
pub(crate) mod response;
