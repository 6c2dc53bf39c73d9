//! A program's calls as lines: which stdout line is a call, where it goes,
//! and the result line written back on stdin.

use baton_proto::{ExecCall, ExecCallError, ExecCallResult};
use baton_worker::AgentError;
use tokio::io::AsyncWriteExt;

use super::super::calls;
use super::{Waiting, Writer};

/// Whether a stdout line is a call (`{"call": ...}`) rather than an answer.
pub(super) fn is_call(line: &str) -> bool {
    line.trim_start().starts_with('{')
        && serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(line)
            .is_ok_and(|object| object.contains_key("call"))
}

/// Hands a call line to its task; a call that is not one, or for a task
/// not in flight, is answered at once.
///
/// Results written from here go from a task of their own: the reader of
/// the program's stdout never waits on its stdin, which a program busy
/// writing may not be reading.
pub(super) fn route_call(line: &str, waiting: &Waiting, stdin: &Writer) {
    let answer = |call: String, answer: calls::Answer| {
        let stdin = std::sync::Arc::clone(stdin);
        tokio::spawn(async move { write_result(&stdin, call, &answer).await });
    };
    let call = match serde_json::from_str::<ExecCall>(line) {
        Ok(call) => call,
        Err(err) => {
            let id = serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|v| v.get("call").and_then(|id| id.as_str()).map(str::to_owned))
                .unwrap_or_default();
            let why = format!("not a call ({err}); see proto-schemas/schema/exec_call.schema.json");
            return answer(id, calls::Answer::Error("refused", why));
        }
    };
    let to = waiting
        .lock()
        .ok()
        .and_then(|waiting| waiting.get(&call.task).map(|waiter| waiter.calls.clone()));
    if let Some(to) = to {
        if let Err(unsent) = to.send(call) {
            let call = unsent.0;
            let why = format!("task {} ended", call.task);
            answer(
                call.call,
                calls::Answer::End(Box::new(Err(AgentError::fatal(why)))),
            );
        }
        return;
    }
    let why = format!("no task {} is in flight", call.task);
    answer(
        call.call,
        calls::Answer::End(Box::new(Err(AgentError::fatal(why)))),
    );
}

/// Writes the result of call `call` on the program's stdin, a whole line.
/// A program that is gone reads nothing; its tasks fail anyway.
pub(super) async fn write_result(stdin: &Writer, call: String, answer: &calls::Answer) {
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
    let _ = stdin.lock().await.write_all(&line).await;
}
