//! Operating a Baton deployment, as a library the `baton` command drives:
//!
//! - [`roles`]: the roles a process runs as, and what each does on NATS, the
//!   union of the footprints its components declare next to their code;
//! - [`permissions`]: a role's footprint as a NATS permissions block;
//! - [`doctor`]: what `baton doctor` reads from a deployment, its checks, and
//!   the report, each finding with its fix;
//! - [`manifests`]: Kubernetes resources (and KEDA autoscaling) from spec files.

pub mod doctor;
mod error;
pub mod manifests;
pub mod permissions;
pub mod roles;

pub use error::{Error, ErrorKind};
pub use roles::{Grants, Role, RoleKind};
