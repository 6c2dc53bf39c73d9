//! Whether a tool's call may be made again when its outcome is unknown,
//! and whether it waits for a person's approval first.

use rmcp::model::ToolAnnotations;

use crate::spec::{Approve, McpSpec};

/// Whether a tool's call may be made again when its outcome is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// Annotated `readOnlyHint`: it changes nothing.
    ReadOnly,
    /// Annotated `idempotentHint`, or listed in `idempotent_tools`: a
    /// repeat has no further effect.
    Idempotent,
    /// The spec says the server honours the idempotency key: a repeat
    /// carries the same key, and the server makes the call once.
    Keyed,
    /// Anything else: never made twice; an unknown outcome goes to a person.
    NotRepeatable,
}

impl Class {
    /// What `baton check`, the start log and the metrics call it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::Idempotent => "idempotent",
            Self::Keyed => "keyed",
            Self::NotRepeatable => "not repeatable",
        }
    }

    /// Whether a call whose outcome is unknown may be made again.
    pub(crate) fn repeatable(self) -> bool {
        self != Self::NotRepeatable
    }

    /// The class of `tool` (by the server's name) on the server of `spec`:
    /// the spec's per-tool lists first, then its server-wide `idempotent =
    /// false`, then the annotations, then `idempotent = true` (keyed).
    pub(crate) fn of(spec: &McpSpec, tool: &str, annotations: Option<&ToolAnnotations>) -> Self {
        let hint = |pick: fn(&ToolAnnotations) -> Option<bool>| {
            annotations.and_then(pick).unwrap_or(false)
        };
        if spec.not_idempotent.iter().any(|name| name == tool) {
            Self::NotRepeatable
        } else if spec.idempotent_tools.iter().any(|name| name == tool) {
            Self::Idempotent
        } else if spec.idempotent == Some(false) {
            Self::NotRepeatable
        } else if hint(|a| a.read_only_hint) {
            Self::ReadOnly
        } else if hint(|a| a.idempotent_hint) {
            Self::Idempotent
        } else if spec.idempotent == Some(true) {
            Self::Keyed
        } else {
            Self::NotRepeatable
        }
    }
}

/// Whether `approve` asks a person before each call of `tool` (by the
/// server's name), which is read-only when its annotations say so.
pub(super) fn approved_first(approve: Option<&Approve>, tool: &str, read_only: bool) -> bool {
    match approve {
        None => false,
        Some(Approve::Class(class)) if class == "all" => true,
        Some(Approve::Class(_)) => !read_only,
        Some(Approve::Tools(tools)) => tools.iter().any(|name| name == tool),
    }
}
