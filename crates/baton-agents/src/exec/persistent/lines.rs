//! A program's calls as lines: which stdout line is a call, where it goes,
//! and the result line written back on stdin.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use baton_proto::{ExecCall, ExecCallError, ExecCallResult};
use baton_worker::AgentError;
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;
use tokio::sync::mpsc;

use super::super::calls;
use super::Waiting;

/// Most bytes one write to the program gathers from the lines waiting.
const BATCH: usize = 1 << 20;

/// The program's stdin, written whole lines at a time by one task of its
/// own. Lines that wait while it writes go out together in its next
/// write: with many tasks in flight, one system call (and one wake-up of
/// the program) carries many requests and call results.
#[derive(Clone)]
pub(super) struct Writer(mpsc::UnboundedSender<Vec<u8>>);

/// The program is gone: a line cannot be written.
pub(super) struct Closed;

impl Writer {
    /// Starts the task that writes on `stdin`. When a write fails (the
    /// program is gone), it sets `gone` and ends, and later lines are refused.
    pub(super) fn new(mut stdin: ChildStdin, gone: Arc<AtomicBool>) -> Self {
        let (send, mut lines) = mpsc::unbounded_channel::<Vec<u8>>();
        tokio::spawn(async move {
            while let Some(mut batch) = lines.recv().await {
                while batch.len() < BATCH {
                    let Ok(more) = lines.try_recv() else { break };
                    batch.extend_from_slice(&more);
                }
                if let Err(err) = stdin.write_all(&batch).await {
                    tracing::debug!(error = %err, "cannot write to the program: it is gone");
                    gone.store(true, Ordering::Release);
                    break;
                }
            }
        });
        Self(send)
    }

    /// Queues `line` (ending in a newline) to be written.
    pub(super) fn line(&self, line: Vec<u8>) -> Result<(), Closed> {
        self.0.send(line).map_err(|_| Closed)
    }
}

/// Hands a call line to its task: whether `line` is a call
/// (`{"call": ...}`). A call that is malformed, or for a task not in
/// flight, is answered at once.
///
/// Results are queued for the writer's task: the reader of the program's
/// stdout never waits on its stdin, which a program busy writing may not
/// be reading.
pub(super) fn route_call(line: &str, waiting: &Waiting, stdin: &Writer) -> bool {
    let answer = |call: String, answer: calls::Answer| {
        write_result(stdin, call, &answer);
    };
    let call = match serde_json::from_str::<ExecCall>(line) {
        Ok(call) => call,
        Err(err) => {
            let Ok(serde_json::Value::Object(object)) = serde_json::from_str(line) else {
                return false;
            };
            let Some(id) = object.get("call") else {
                return false;
            };
            let id = id.as_str().map_or_else(|| id.to_string(), str::to_owned);
            let why = format!("not a call ({err}); see proto-schemas/schema/exec_call.schema.json");
            answer(id, calls::Answer::Error("refused", why));
            return true;
        }
    };
    let to = waiting
        .lock()
        .ok()
        .and_then(|waiting| waiting.get(&call.task).map(|waiter| waiter.calls.clone()));
    // A task that ended, or never was, has no handler to answer for it.
    let unsent = match to {
        Some(to) => to.send(call).err().map(|unsent| unsent.0),
        None => Some(call),
    };
    if let Some(call) = unsent {
        let why = format!("task {} is not in flight", call.task);
        let ended = calls::Answer::End(Box::new(Err(AgentError::fatal(why))));
        answer(call.call, ended);
    }
    true
}

/// Writes the result of call `call` on the program's stdin, a whole line.
/// A program that is gone reads nothing; its tasks fail anyway.
pub(super) fn write_result(stdin: &Writer, call: String, answer: &calls::Answer) {
    let (result, error, end, message) = match answer {
        calls::Answer::Result(result) => (Some(result.clone()), None, None, None),
        calls::Answer::Error(kind, message) => (
            None,
            Some(ExecCallError {
                kind: (*kind).to_owned(),
                message: message.clone(),
            }),
            None,
            None,
        ),
        calls::Answer::End(ended) => match ended.as_ref() {
            Ok(_) => (None, None, Some("waiting".to_owned()), None),
            Err(err) => (None, None, Some("failed".to_owned()), Some(err.to_string())),
        },
    };
    let written = ExecCallResult {
        call,
        result,
        error,
        end,
        message,
    };
    let Ok(mut line) = serde_json::to_vec(&written) else {
        return;
    };
    line.push(b'\n');
    let _ = stdin.line(line);
}
