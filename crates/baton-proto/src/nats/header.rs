/// NATS header names of the protocol.
pub mod headers {
    /// JetStream's dedup key: the message's `id`.
    pub const MSG_ID: &str = "Nats-Msg-Id";
    /// W3C trace context.
    pub const TRACEPARENT: &str = "traceparent";
    /// W3C trace state.
    pub const TRACESTATE: &str = "tracestate";
    /// Dead letters: reason code.
    pub const ERROR: &str = "Baton-Error";
    /// Dead letters: human-readable detail.
    pub const ERROR_DETAIL: &str = "Baton-Error-Detail";
    /// Dead letters: agent type whose worker gave up.
    pub const AGENT: &str = "Baton-Agent";
    /// Dead letters: subject to replay to.
    pub const ORIGINAL_SUBJECT: &str = "Baton-Original-Subject";
    /// Dead letters: delivery count when it gave up.
    pub const DELIVERIES: &str = "Baton-Deliveries";
    /// Dead letters whose original bytes and reason headers were over the
    /// server's `max_payload`: the original size in bytes. The payload was
    /// cut to fit, so such a letter cannot be replayed.
    pub const TRUNCATED: &str = "Baton-Truncated";
}

wire_enum! {
    /// Reason code of a dead letter (`Baton-Error` header).
    pub enum DeadLetterReason {
        /// Not a decodable envelope.
        Malformed = "malformed",
        /// A protocol version this worker does not read.
        UnsupportedVersion = "unsupported_version",
        /// Larger than the size limit.
        TooLarge = "too_large",
        /// Retries exhausted.
        MaxAttempts = "max_attempts",
        /// The agent said the task can never succeed.
        Fatal = "fatal",
        /// The session's deadline passed.
        DeadlineExceeded = "deadline_exceeded",
        /// No agent could take the task.
        NoRoute = "no_route",
        /// Extension: a claim-check object the envelope refers to is gone
        /// (expired with the bucket's max age) or does not match its hash.
        ClaimMissing = "claim_missing",
        /// Extension: the message was delivered `max_deliver` times without
        /// being settled (caught from JetStream's advisory).
        MaxDeliveries = "max_deliveries",
        /// Extension: what the agent's outcome leads to may not be published
        /// by this worker's NATS user (a permissions violation).
        Forbidden = "forbidden",
        /// Extension: no stream takes the subject the outcome goes to.
        NoStream = "no_stream",
        /// Extension: a root task arrived for a session that has a terminal
        /// event already; it is not run again, and no event is written.
        SessionEnded = "session_ended",
    }
}

impl From<&DeadLetterReason> for crate::Reason {
    /// The event reason that reports a dead letter of this kind.
    fn from(code: &DeadLetterReason) -> Self {
        match code {
            DeadLetterReason::MaxAttempts => Self::MaxAttempts,
            DeadLetterReason::Fatal => Self::Fatal,
            DeadLetterReason::DeadlineExceeded => Self::DeadlineExceeded,
            DeadLetterReason::NoRoute => Self::NoRoute,
            other => Self::Other(other.as_str().to_owned()),
        }
    }
}
