//! One task in flight: the calls its program makes, until its answer
//! comes or a call ends the hop.

use std::sync::Arc;

use baton_worker::{AgentError, Outcome};
use tokio::sync::{mpsc, oneshot};

use super::super::calls::{self, Hop};
use super::lines::{Writer, write_result};
use super::{Answer, Finished};
use baton_proto::ExecCall;

/// One task in flight: its answer to come, its calls, what makes them,
/// and where their results go.
pub(super) struct Serving<'a> {
    pub(super) answer: &'a mut oneshot::Receiver<Answer>,
    pub(super) calls: &'a mut mpsc::UnboundedReceiver<ExecCall>,
    pub(super) hop: Option<&'a Arc<Hop>>,
    pub(super) stdin: &'a Writer,
}

/// How a task in flight ended.
pub(super) enum Served {
    Finished(Finished),
    /// The line that answered it is not an answer.
    Malformed(serde_json::Error),
    /// The program ended first.
    Gone,
}

/// Makes the task's calls (many at once) until its answer comes or a call
/// ends its hop.
///
/// A call the program does not wait for (`wait: false`, a step's value) is
/// answered only when it fails or ends the hop. The calls that come after
/// it are made once it is, so the record keeps the order the program
/// made them in; and the answer counts only once it is made, so a step's
/// value is in the journal before the hop's outcome.
pub(super) async fn serve(serving: Serving<'_>) -> Result<Served, AgentError> {
    let Serving {
        answer,
        calls,
        hop,
        stdin,
    } = serving;
    let mut making = tokio::task::JoinSet::new();
    let mut unawaited = tokio::task::JoinSet::new();
    // Held (shared) by each call not waited for; taken whole, for a moment,
    // by a later call before it is made.
    let order = Arc::new(tokio::sync::RwLock::new(()));
    loop {
        tokio::select! {
            answered = &mut *answer => {
                let served = match answered {
                    Ok(Ok(reply)) => Served::Finished(Finished::Replied(Box::new(reply))),
                    Ok(Err(why)) => Served::Malformed(why),
                    Err(_) => Served::Gone,
                };
                // Calls the program sent before its answer are in the
                // channel already (one reader hands both on, in order).
                while let (Some(hop), Ok(call)) = (hop, calls.try_recv()) {
                    if !call.wait {
                        let hop = Arc::clone(hop);
                        unawaited.spawn(async move { (call.call, Box::pin(hop.answer(call.op)).await) });
                    }
                }
                return Ok(match made_all(&mut unawaited, stdin).await? {
                    Some(ended) => Served::Finished(Finished::Ended(Box::new(ended))),
                    None => served,
                });
            }
            Some(call) = calls.recv() => match hop {
                Some(hop) if !call.wait => {
                    let hop = Arc::clone(hop);
                    let held = Arc::clone(&order).read_owned().await;
                    unawaited.spawn(async move {
                        let made = Box::pin(hop.answer(call.op)).await;
                        drop(held);
                        (call.call, made)
                    });
                }
                Some(hop) => {
                    let hop = Arc::clone(hop);
                    let after = (!unawaited.is_empty()).then(|| Arc::clone(&order));
                    making.spawn(async move {
                        if let Some(after) = after {
                            drop(after.write().await);
                        }
                        (call.call, Box::pin(hop.answer(call.op)).await)
                    });
                }
                None => {
                    let refused = calls::Answer::Error("refused", "this worker answers no calls".to_owned());
                    write_result(stdin, call.call, &refused);
                }
            },
            Some(made) = making.join_next(), if !making.is_empty() => {
                let (call, made) = made.map_err(|err| AgentError::fatal(format!("a call failed: {err}")))?;
                write_result(stdin, call, &made);
                if let calls::Answer::End(ended) = made {
                    made_all(&mut unawaited, stdin).await?;
                    return ended.map(|outcome| Served::Finished(Finished::Ended(Box::new(outcome))));
                }
            }
            Some(made) = unawaited.join_next(), if !unawaited.is_empty() => {
                let (call, made) = made.map_err(|err| AgentError::fatal(format!("a call failed: {err}")))?;
                if let Some(ended) = unawaited_made(stdin, call, made) {
                    made_all(&mut unawaited, stdin).await?;
                    return ended.map(|outcome| Served::Finished(Finished::Ended(Box::new(outcome))));
                }
            }
        }
    }
}

/// Waits for the calls not waited for that are still being made: the first
/// that ended the hop, if one did.
async fn made_all(
    unawaited: &mut tokio::task::JoinSet<(String, calls::Answer)>,
    stdin: &Writer,
) -> Result<Option<Outcome>, AgentError> {
    let mut first = None;
    while let Some(made) = unawaited.join_next().await {
        let (call, made) =
            made.map_err(|err| AgentError::fatal(format!("a call failed: {err}")))?;
        if let Some(ended) = unawaited_made(stdin, call, made) {
            first.get_or_insert(ended);
        }
    }
    first.transpose()
}

/// Writes the result of a call not waited for when it failed or ended the
/// hop; how the hop ended, when it did.
fn unawaited_made(
    stdin: &Writer,
    call: String,
    made: calls::Answer,
) -> Option<Result<Outcome, AgentError>> {
    match made {
        calls::Answer::Result(_) => None,
        calls::Answer::Error(..) => {
            write_result(stdin, call, &made);
            None
        }
        calls::Answer::End(_) => {
            write_result(stdin, call, &made);
            let calls::Answer::End(ended) = made else {
                unreachable!("matched above")
            };
            Some(*ended)
        }
    }
}
