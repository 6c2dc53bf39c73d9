//! Running a deployment: the CLI, clusters, TLS, permissions, deployment files, the doctor, metrics and traces, setup, stopping on time, specs, persistent agents, the docs' links.

pub(crate) mod cli;
pub(crate) mod cluster;
pub(crate) mod deploy;
pub(crate) mod docs;
pub(crate) mod doctor;
pub(crate) mod lifecycle;
pub(crate) mod metrics;
pub(crate) mod permissions;
pub(crate) mod persistent;
pub(crate) mod python;
pub(crate) mod setup;
pub(crate) mod shutdown;
pub(crate) mod specs;
pub(crate) mod tls;
pub(crate) mod traces;
