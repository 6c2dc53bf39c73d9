//! Persistent exec programs: started once per worker, then fed one JSON line
//! per task ([`ExecRequest`]) and read for one JSON line per answer
//! ([`ExecResponse`]) with the same id, many in flight at once.
//!
//! A program that dies (exits, is killed) fails the tasks it had in flight
//! as retryable: they are delivered again, to the restarted program or to
//! another worker. The next task starts it again.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use baton_proto::{ExecReply, ExecRequest, ExecResponse};
use baton_worker::{AgentError, Task};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{Mutex, oneshot};

use super::Program;

/// Where an answer goes: the task waiting for the request id.
type Waiting = Arc<std::sync::Mutex<HashMap<String, oneshot::Sender<ExecReply>>>>;

/// One start of the program.
struct Running {
    stdin: ChildStdin,
    waiting: Waiting,
    /// Set by the reader when stdout closes: the program is gone.
    gone: Arc<std::sync::atomic::AtomicBool>,
    /// Which start this is, from 1.
    generation: u64,
    _child: Child,
}

/// A program that serves every task of one worker.
pub(crate) struct Persistent {
    program: Program,
    running: Mutex<Option<Running>>,
    next_id: AtomicU64,
    starts: AtomicU64,
}

impl std::fmt::Debug for Persistent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persistent")
            .field("program", &self.program.name())
            .field("starts", &self.starts.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Removes a request from the waiting table when its task ends, whether
/// answered, timed out (the future dropped) or failed.
struct Forget {
    waiting: Waiting,
    id: String,
}

impl Drop for Forget {
    fn drop(&mut self) {
        if let Ok(mut waiting) = self.waiting.lock() {
            waiting.remove(&self.id);
        }
    }
}

impl Persistent {
    pub(crate) fn new(program: Program) -> Self {
        Self {
            program,
            running: Mutex::new(None),
            next_id: AtomicU64::new(1),
            starts: AtomicU64::new(0),
        }
    }

    /// Sends `task` to the program (starting it if it is not running) and
    /// waits for its answer.
    pub(crate) async fn request(&self, task: &Task, resume: bool) -> Result<ExecReply, AgentError> {
        let program = self.program.name();
        let envelope = serde_json::to_value(&task.envelope).map_err(|err| {
            AgentError::fatal(format!("cannot write the envelope as JSON: {err}"))
        })?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed).to_string();
        let request = ExecRequest {
            id: id.clone(),
            envelope,
            attempt: task.attempt,
            resume,
        };
        let mut line = serde_json::to_vec(&request)
            .map_err(|err| AgentError::fatal(format!("cannot write the request: {err}")))?;
        line.push(b'\n');
        let (answer, generation, _forget) = {
            let mut running = self.running.lock().await;
            if running
                .as_ref()
                .is_none_or(|r| r.gone.load(Ordering::Acquire))
            {
                *running = Some(self.start(task)?);
            }
            let Some(current) = running.as_mut() else {
                unreachable!("started above");
            };
            let (send, answer) = oneshot::channel();
            if let Ok(mut waiting) = current.waiting.lock() {
                waiting.insert(id.clone(), send);
            }
            let forget = Forget {
                waiting: Arc::clone(&current.waiting),
                id: id.clone(),
            };
            if let Err(err) = current.stdin.write_all(&line).await {
                current.gone.store(true, Ordering::Release);
                return Err(AgentError::retryable(format!(
                    "cannot write to {program} (it is restarted for the next task): {err}"
                )));
            }
            (answer, current.generation, forget)
        };
        answer.await.map_err(|_| {
            AgentError::retryable(format!(
                "{program} (start {generation}) ended before it answered; it is restarted for the next task"
            ))
        })
    }

    /// Starts the program and its stdout and stderr readers.
    fn start(&self, task: &Task) -> Result<Running, AgentError> {
        let program = self.program.name();
        let generation = self.starts.fetch_add(1, Ordering::Relaxed) + 1;
        let mut child = self
            .program
            .spawn(task, &[("BATON_EXEC_MODE", "persistent".to_owned())])?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(AgentError::fatal("the program's pipes were not opened"));
        };
        tracing::info!(agent = %task.agent, program = %program, pid = child.id(), start = generation, "persistent exec program started");
        let waiting: Waiting = Arc::default();
        let gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
        tokio::spawn(read_answers(
            stdout,
            Arc::clone(&waiting),
            Arc::clone(&gone),
            format!("{program} (start {generation})"),
        ));
        let agent = task.agent.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(%agent, start = generation, "stderr: {line}");
            }
        });
        Ok(Running {
            stdin,
            waiting,
            gone,
            generation,
            _child: child,
        })
    }
}

/// Hands each answer line to the task waiting for its id. When stdout
/// closes, the program is gone: every task still waiting is failed (its
/// sender dropped), and the next task starts the program again.
async fn read_answers(
    stdout: tokio::process::ChildStdout,
    waiting: Waiting,
    gone: Arc<std::sync::atomic::AtomicBool>,
    program: String,
) {
    let mut lines = BufReader::new(stdout).lines();
    loop {
        match lines.next_line().await {
            Ok(Some(line)) if line.trim().is_empty() => {}
            Ok(Some(line)) => match serde_json::from_str::<ExecResponse>(&line) {
                Ok(response) => {
                    let sender = waiting
                        .lock()
                        .ok()
                        .and_then(|mut waiting| waiting.remove(&response.id));
                    match sender {
                        Some(sender) => {
                            let _ = sender.send(response.reply);
                        }
                        None => tracing::warn!(
                            %program, id = %response.id,
                            "an answer for no waiting request (timed out, or answered twice) is dropped"
                        ),
                    }
                }
                Err(err) => {
                    let shown: String = line.chars().take(200).collect();
                    tracing::warn!(
                        %program, error = %err,
                        "a stdout line is not an answer {{\"id\", \"reply\"}} (see proto-schemas/schema/exec_response.schema.json): {shown}"
                    );
                }
            },
            Ok(None) | Err(_) => break,
        }
    }
    gone.store(true, Ordering::Release);
    let failed = waiting.lock().map(|mut w| w.drain().count()).unwrap_or(0);
    tracing::warn!(%program, in_flight = failed, "persistent exec program ended; its tasks in flight are retried");
}
