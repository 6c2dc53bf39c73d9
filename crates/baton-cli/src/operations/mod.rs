//! What operators run: dead letters, spec checks, the inbox of what waits
//! for a person, permissions, the deployment doctor, Kubernetes manifests,
//! new agents to start from, and the benchmarks.

pub mod authorize;
pub mod bench;
pub mod check;
pub mod dlq;
pub mod doctor;
pub mod inbox;
pub mod manifests;
pub mod new;
pub mod permissions;
