//! Why an inbox operation failed.

/// Why an inbox operation failed: a kind to branch on, and a message that
/// names the fix.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct InboxError {
    kind: InboxErrorKind,
    message: String,
}

/// What failed in an inbox operation, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InboxErrorKind {
    /// NATS or JetStream refused: the inbox bucket, the hop journal, or a
    /// publish. Trying again later may succeed.
    Store,
    /// A task or decision could not be encoded.
    Encode,
    /// What is stored is not what the inbox keeps (not an envelope, or
    /// naming no agent type).
    Malformed,
    /// Nothing waits in the inbox under the id: settled already, or wrong.
    NotWaiting,
    /// The entry waits for another kind of answer: a question answered as a
    /// tool call's decision, or the other way round.
    Mismatch,
    /// The entry's session was cancelled or passed its deadline.
    Ended,
    /// The agent type an answer hands the task to has no worker.
    NotServed,
}

impl InboxError {
    fn new(kind: InboxErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// See [`InboxErrorKind::Store`].
    pub(super) fn store(message: impl Into<String>) -> Self {
        Self::new(InboxErrorKind::Store, message)
    }

    /// See [`InboxErrorKind::Encode`].
    pub(super) fn encode(message: impl Into<String>) -> Self {
        Self::new(InboxErrorKind::Encode, message)
    }

    /// See [`InboxErrorKind::Malformed`].
    pub(super) fn malformed(message: impl Into<String>) -> Self {
        Self::new(InboxErrorKind::Malformed, message)
    }

    /// See [`InboxErrorKind::NotWaiting`].
    pub(super) fn not_waiting(message: impl Into<String>) -> Self {
        Self::new(InboxErrorKind::NotWaiting, message)
    }

    /// See [`InboxErrorKind::Mismatch`].
    pub(super) fn mismatch(message: impl Into<String>) -> Self {
        Self::new(InboxErrorKind::Mismatch, message)
    }

    /// See [`InboxErrorKind::Ended`].
    pub(super) fn ended(message: impl Into<String>) -> Self {
        Self::new(InboxErrorKind::Ended, message)
    }

    /// See [`InboxErrorKind::NotServed`].
    pub(super) fn not_served(message: impl Into<String>) -> Self {
        Self::new(InboxErrorKind::NotServed, message)
    }

    /// What failed.
    #[must_use]
    pub fn kind(&self) -> InboxErrorKind {
        self.kind
    }
}
