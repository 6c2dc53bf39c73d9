//! A program run per task: the envelope on stdin, one reply on stdout, its
//! exit code, and its stderr logged with the session id.

use std::collections::VecDeque;

use baton_proto::ExecReply;
use baton_worker::{AgentError, Task};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::{EXIT_RETRY, ExecRunner, MAX_REPLY, STDERR_TAIL};

impl ExecRunner {
    pub(super) async fn run_program(
        &self,
        task: &Task,
        resume: bool,
        span: &tracing::Span,
    ) -> Result<ExecReply, AgentError> {
        let envelope = &task.envelope;
        let input = serde_json::to_vec(envelope).map_err(|err| {
            AgentError::fatal(format!("cannot write the envelope as JSON: {err}"))
        })?;
        let program = self.program.name();
        let mut child = self.spawn(task, resume)?;
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(AgentError::fatal("the program's pipes were not opened"));
        };
        let stderr = tokio::spawn(stderr_tail(stderr, envelope.session, task.agent.clone()));
        // A program that exits without reading its input must not fail the write.
        let feed = tokio::spawn(async move {
            let _ = stdin.write_all(&input).await;
            let _ = stdin.shutdown().await;
        });
        let mut reply = Vec::new();
        stdout
            .take(MAX_REPLY + 1)
            .read_to_end(&mut reply)
            .await
            .map_err(|err| {
                AgentError::retryable(format!("cannot read the program's stdout: {err}"))
            })?;
        let status = child
            .wait()
            .await
            .map_err(|err| AgentError::retryable(format!("cannot wait for the program: {err}")))?;
        let _ = feed.await;
        if let Some(code) = status.code() {
            span.record("process.exit.code", code);
        }
        let tail = stderr.await.unwrap_or_default();
        let stderr_note = if tail.is_empty() {
            String::new()
        } else {
            format!("; stderr: {tail}")
        };
        match status.code() {
            Some(0) => {}
            Some(EXIT_RETRY) => {
                return Err(AgentError::retryable(format!(
                    "{program} exited with {EXIT_RETRY} (retry){stderr_note}"
                )));
            }
            Some(code) => {
                return Err(AgentError::fatal(format!(
                    "{program} exited with {code}{stderr_note}"
                )));
            }
            None => {
                return Err(AgentError::retryable(format!(
                    "{program} was killed by a signal{stderr_note}"
                )));
            }
        }
        if reply.len() as u64 > MAX_REPLY {
            return Err(AgentError::fatal(format!(
                "{program} printed more than {MAX_REPLY} bytes"
            )));
        }
        let reply: ExecReply = serde_json::from_slice(&reply).map_err(|err| {
            AgentError::fatal(format!(
                "{program} did not print an outcome object on stdout ({err}); see proto-schemas/schema/exec_reply.schema.json"
            ))
        })?;
        Ok(reply)
    }

    /// Starts the program with piped stdio and the `BATON_*` variables.
    pub(super) fn spawn(
        &self,
        task: &Task,
        resume: bool,
    ) -> Result<tokio::process::Child, AgentError> {
        let envelope = &task.envelope;
        self.program.spawn(
            task,
            &[
                ("BATON_SESSION", envelope.session.to_string()),
                ("BATON_ENVELOPE", envelope.id.to_string()),
                ("BATON_ATTEMPT", task.attempt.to_string()),
                ("BATON_RESUME", if resume { "1" } else { "0" }.to_owned()),
            ],
        )
    }
}

/// Logs the program's stderr line by line and returns its last lines, joined.
async fn stderr_tail(
    stderr: tokio::process::ChildStderr,
    session: uuid::Uuid,
    agent: baton_proto::AgentName,
) -> String {
    let mut lines = BufReader::new(stderr).lines();
    let mut tail = VecDeque::with_capacity(STDERR_TAIL);
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(%session, %agent, "stderr: {line}");
        if tail.len() == STDERR_TAIL {
            tail.pop_front();
        }
        tail.push_back(line);
    }
    tail.into_iter().collect::<Vec<_>>().join(" | ")
}
