//! What a session records: [`crate::Event`] and its kinds, live answer pieces ([`crate::Delta`]), reading a session through the router, and deadline timers.

pub(crate) mod delta;
pub(crate) mod event;
pub(crate) mod folding;
pub(crate) mod reads;
pub(crate) mod refs;
pub(crate) mod timer;
