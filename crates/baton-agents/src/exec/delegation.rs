//! An exec reply's `delegate`: its children and mode, as a delegation.

use baton_proto::ExecReply;
use baton_worker::{AgentError, AgentName, ChildTask, DelegateMode, Need, Outcome, Target};

/// A `delegate` reply's children and mode, as a delegation.
pub(super) fn delegation(reply: &ExecReply) -> Result<Outcome, AgentError> {
    let name = |to: &str| {
        AgentName::new(to).map_err(|err| {
            AgentError::fatal(format!("the program's reply names no agent type: {err}"))
        })
    };
    let mode = match reply.mode.as_deref().unwrap_or("parallel") {
        "parallel" => DelegateMode::Parallel,
        "serial" => DelegateMode::Serial,
        "async" => DelegateMode::Async,
        "chain" => DelegateMode::Chain { recover: None },
        other => {
            return Err(AgentError::fatal(format!(
                "unknown delegation mode {other:?}: use parallel, serial, async or chain"
            )));
        }
    };
    let mut children = Vec::with_capacity(reply.children.len());
    for child in &reply.children {
        let target: Target = match (&child.to, child.requires.is_empty()) {
            (Some(to), true) => name(to)?.into(),
            (None, false) => Need::capabilities(child.requires.clone()).into(),
            _ => {
                return Err(AgentError::fatal(
                    "each of `children` needs exactly one of `to` and `requires`",
                ));
            }
        };
        let mut task = ChildTask::new(target, child.input.clone());
        match child.assignment.as_deref() {
            None | Some("sync") => {}
            Some("async") => task = task.tag("async"),
            Some(other) => {
                return Err(AgentError::fatal(format!(
                    "unknown assignment {other:?}: use sync or async"
                )));
            }
        }
        children.push(task);
    }
    Ok(Outcome::delegate(children, mode).into())
}
