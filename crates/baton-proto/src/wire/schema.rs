use schemars::JsonSchema;

use crate::{Envelope, Event, ExecReply, Heartbeat, LookupRequest, LookupResponse};

/// The JSON Schema of every payload, by file stem (`envelope`, `event`, ...).
///
/// `proto-schemas/` holds these, checked in; a test fails when they drift.
#[must_use]
pub fn schemas() -> Vec<(&'static str, serde_json::Value)> {
    fn one<T: JsonSchema>() -> serde_json::Value {
        schemars::schema_for!(T).to_value()
    }
    vec![
        ("envelope", one::<Envelope>()),
        ("event", one::<Event>()),
        ("heartbeat", one::<Heartbeat>()),
        ("lookup_request", one::<LookupRequest>()),
        ("lookup_response", one::<LookupResponse>()),
        ("exec_reply", one::<ExecReply>()),
        ("exec_request", one::<crate::ExecRequest>()),
        ("exec_response", one::<crate::ExecResponse>()),
        ("exec_call", one::<crate::ExecCall>()),
        ("exec_call_result", one::<crate::ExecCallResult>()),
        ("deadline_timer", one::<crate::DeadlineTimer>()),
        ("read_request", one::<crate::ReadRequest>()),
        ("read_reply", one::<crate::ReadReply>()),
        ("cancel_request", one::<crate::CancelRequest>()),
        ("cancel_reply", one::<crate::CancelReply>()),
        ("outcome", one::<crate::Outcome>()),
        ("feedback_request", one::<crate::FeedbackRequest>()),
        ("feedback_reply", one::<crate::FeedbackReply>()),
        ("notebook_request", one::<crate::NotebookRequest>()),
        ("notebook", one::<crate::Notebook>()),
        ("rollout", one::<crate::Rollout>()),
        ("rollout_decision", one::<crate::RolloutDecision>()),
    ]
}
