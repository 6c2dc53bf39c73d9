//! Where things go on NATS: subject and stream names ([`crate::Subjects`]), headers, the claim-check of large contexts, and footprints (what a process does on NATS, from which `baton-ops` derives permissions).
//!
//! Footprints stay in this crate rather than beside the operator tools: every crate that talks to NATS declares its own beside its code, and `baton-ops`, which turns them into permissions, sits above those crates; the type must live below all of them, and this is the only crate that does.

pub(crate) mod claim;
pub mod footprint;
pub(crate) mod header;
pub(crate) mod name;
pub(crate) mod subject;
