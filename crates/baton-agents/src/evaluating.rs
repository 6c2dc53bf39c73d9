//! What an evaluation (`baton eval`, [`baton_proto::Replay::eval`]) may
//! not do besides writing: ask a person, or hand work to a remote agent.
//! A question, an approval, a call in doubt, a sign-in or a human agent's
//! task ends the evaluated hop instead, failed with the reason it would
//! have waited for; an A2A agent's task, which may act anywhere, fails it
//! as `would_write`.

use baton_proto::Reason;
use baton_worker::{AgentError, Task};

/// `Err` (the hop's end) when `task` belongs to an evaluation, which must
/// not wait for a person for `reason`; `what` says what would have waited.
pub(crate) fn asks_no_person(task: &Task, reason: &Reason, what: &str) -> Result<(), AgentError> {
    let why = format!("an evaluation asks no person, and {what} would wait for one ({reason})");
    refused(task, reason, why)
}

/// `Err` (the hop's end, `would_write`) when `task`, an A2A agent's, belongs
/// to an evaluation: the remote agent may act, and nothing recorded says
/// what it would answer.
pub(crate) fn calls_no_remote(task: &Task) -> Result<(), AgentError> {
    let why = format!(
        "would write: the remote A2A agent {} may act, and an evaluation sends it nothing",
        task.agent
    );
    refused(task, &Reason::WouldWrite, why)
}

/// `Err` failing the hop with `reason` and `why`, when `task` belongs to
/// an evaluation.
fn refused(task: &Task, reason: &Reason, why: String) -> Result<(), AgentError> {
    match &task.envelope.replay {
        Some(replay) if replay.eval => Err(AgentError::fail(reason.clone(), why)),
        _ => Ok(()),
    }
}
