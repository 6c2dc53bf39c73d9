//! One task in flight: the calls its program makes, until its answer
//! comes or a call ends the hop.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use baton_worker::{AgentError, Outcome};
use tokio::sync::{mpsc, oneshot};

use super::super::calls::{self, Hop};
use super::lines::{Writer, write_result};
use super::{Answer, Finished};
use baton_proto::{ExecCall, ExecOp};

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

/// The calls of one task being made: those waited for, and those not
/// (`wait: false` on a `step_done`), with what orders the two.
struct Making<'a> {
    hop: &'a Arc<Hop>,
    waited: tokio::task::JoinSet<(String, Option<calls::Answer>)>,
    unawaited: tokio::task::JoinSet<(String, calls::Answer)>,
    /// Held (shared) by each call not waited for; taken whole, for a
    /// moment, by a later call before it is made.
    order: Arc<tokio::sync::RwLock<()>>,
    /// Set by a call not waited for that ended the hop, before it lets the
    /// later calls go: they are then not made.
    ended: Arc<AtomicBool>,
}

impl Making<'_> {
    /// Whether `call` is one the program does not wait for: the worker
    /// takes `wait: false` on a step's value only, and answers any other
    /// call as it always did.
    fn unawaited(call: &ExecCall) -> bool {
        !call.wait && matches!(call.op, ExecOp::StepDone { .. })
    }

    /// Starts a call not waited for, once the calls waited for that came
    /// before it have been let go.
    async fn start_unawaited(&mut self, call: ExecCall) {
        let hop = Arc::clone(self.hop);
        let held = Arc::clone(&self.order).read_owned().await;
        let ended = Arc::clone(&self.ended);
        self.unawaited.spawn(async move {
            let made = Box::pin(hop.answer(call.op)).await;
            if matches!(made, calls::Answer::End(_)) {
                ended.store(true, Ordering::Release);
            }
            drop(held);
            (call.call, made)
        });
    }

    /// Starts a call waited for: after the calls not waited for that came
    /// before it, and not at all when one of them ended the hop.
    fn start_waited(&mut self, call: ExecCall) {
        let hop = Arc::clone(self.hop);
        let after = (!self.unawaited.is_empty()).then(|| Arc::clone(&self.order));
        let ended = Arc::clone(&self.ended);
        self.waited.spawn(async move {
            if let Some(after) = after {
                drop(after.write().await);
            }
            if ended.load(Ordering::Acquire) {
                return (call.call, None);
            }
            (call.call, Some(Box::pin(hop.answer(call.op)).await))
        });
    }

    /// The calls not waited for that the program sent before its answer,
    /// or before the hop ended (in the channel already: one reader hands
    /// both on, in order), are made too; the others are dropped with the
    /// task.
    fn last(&mut self, calls: &mut mpsc::UnboundedReceiver<ExecCall>) {
        while let Ok(call) = calls.try_recv() {
            if Self::unawaited(&call) {
                let hop = Arc::clone(self.hop);
                (self.unawaited)
                    .spawn(async move { (call.call, Box::pin(hop.answer(call.op)).await) });
            }
        }
    }
}

/// Makes the task's calls (many at once) until its answer comes or a call
/// ends its hop.
///
/// A call the program does not wait for (`wait: false` on a step's value)
/// is answered only when it fails or ends the hop. The calls that come
/// after it are made once it is, so the record keeps the order the
/// program made them in; and the answer counts only once it is made, so a
/// step's value is in the journal before the hop's outcome.
pub(super) async fn serve(serving: Serving<'_>) -> Result<Served, AgentError> {
    let Serving {
        answer,
        calls,
        hop,
        stdin,
    } = serving;
    let Some(hop) = hop else {
        return refusing(answer, calls, stdin).await;
    };
    let mut making = Making {
        hop,
        waited: tokio::task::JoinSet::new(),
        unawaited: tokio::task::JoinSet::new(),
        order: Arc::default(),
        ended: Arc::default(),
    };
    loop {
        tokio::select! {
            answered = &mut *answer => {
                making.last(calls);
                return Ok(match made_all(&mut making.unawaited, stdin).await? {
                    Some(ended) => Served::Finished(Finished::Ended(Box::new(ended))),
                    None => served(answered),
                });
            }
            Some(call) = calls.recv() => {
                if Making::unawaited(&call) {
                    making.start_unawaited(call).await;
                } else {
                    making.start_waited(call);
                }
            }
            Some(made) = making.waited.join_next(), if !making.waited.is_empty() => {
                let (call, made) = made.map_err(|err| AgentError::fatal(format!("a call failed: {err}")))?;
                // Not made: a call not waited for ended the hop, and says how.
                let Some(made) = made else { continue };
                write_result(stdin, call, &made);
                if let calls::Answer::End(ended) = made {
                    making.last(calls);
                    made_all(&mut making.unawaited, stdin).await?;
                    return ended.map(|outcome| Served::Finished(Finished::Ended(Box::new(outcome))));
                }
            }
            Some(made) = making.unawaited.join_next(), if !making.unawaited.is_empty() => {
                let (call, made) = made.map_err(|err| AgentError::fatal(format!("a call failed: {err}")))?;
                if let Some(ended) = unawaited_made(stdin, call, made) {
                    making.last(calls);
                    made_all(&mut making.unawaited, stdin).await?;
                    return ended.map(|outcome| Served::Finished(Finished::Ended(Box::new(outcome))));
                }
            }
        }
    }
}

/// How the program's answer ended the task.
fn served(answered: Result<Answer, oneshot::error::RecvError>) -> Served {
    match answered {
        Ok(Ok(reply)) => Served::Finished(Finished::Replied(Box::new(reply))),
        Ok(Err(why)) => Served::Malformed(why),
        Err(_) => Served::Gone,
    }
}

/// A worker that answers no calls: each is refused until the answer comes.
async fn refusing(
    answer: &mut oneshot::Receiver<Answer>,
    calls: &mut mpsc::UnboundedReceiver<ExecCall>,
    stdin: &Writer,
) -> Result<Served, AgentError> {
    loop {
        tokio::select! {
            answered = &mut *answer => return Ok(served(answered)),
            Some(call) = calls.recv() => {
                let refused = calls::Answer::Error("refused", "this worker answers no calls".to_owned());
                write_result(stdin, call.call, &refused);
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
