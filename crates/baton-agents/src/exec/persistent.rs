//! Persistent exec programs: started once per worker, then fed one JSON line
//! per task ([`ExecRequest`]) and read for one JSON line per answer
//! ([`ExecResponse`]) with the same id, many in flight at once.
//!
//! A program that dies (exits, is killed) fails the tasks it had in flight
//! as retryable: they are delivered again, to the restarted program or to
//! another worker. The next task starts it again.
//!
//! While a task is in flight, the program may call the worker
//! ([`ExecCall`] lines, answered by [`ExecCallResult`] lines; see
//! `calls` and proto-schemas/exec-calls.md), many calls at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use baton_proto::{ExecCall, ExecReply, ExecRequest, ExecResponse};
use baton_worker::{AgentError, Outcome, Task};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tokio::sync::{Mutex, mpsc, oneshot};

use super::Program;
use super::calls::Hop;

mod lines;
mod serving;

use lines::{Writer, route_call};
use serving::{Served, Serving, serve};

/// The answer, or why the line that named its id is not one.
type Answer = Result<ExecReply, serde_json::Error>;

/// A task in flight: where its answer goes, and its calls.
struct Waiter {
    answer: oneshot::Sender<Answer>,
    calls: mpsc::UnboundedSender<ExecCall>,
}

/// The tasks in flight, by request id.
type Waiting = Arc<std::sync::Mutex<HashMap<String, Waiter>>>;

/// How a task's request ended.
pub(crate) enum Finished {
    /// The program answered.
    Replied(Box<ExecReply>),
    /// A call ended the hop first (it waits, or failed): the program's
    /// handler was told to stop.
    Ended(Box<Outcome>),
}

/// One start of the program.
struct Running {
    stdin: Writer,
    waiting: Waiting,
    /// Set by the reader when stdout closes: the program is gone.
    gone: Arc<std::sync::atomic::AtomicBool>,
    /// Which start this is, from 1.
    generation: u64,
    started: std::time::Instant,
    life: Arc<Life>,
    _child: Child,
}

/// A program that serves every task of one worker.
pub(crate) struct Persistent {
    program: Program,
    running: Mutex<Option<Running>>,
    next_id: AtomicU64,
    starts: AtomicU64,
    /// Starts in a row that ended soon, answering nothing: the next start
    /// waits longer each time, so a program that cannot start does not spin.
    quick_ends: std::sync::atomic::AtomicU32,
}

/// How soon an end counts as a failed start.
const QUICK_END: std::time::Duration = std::time::Duration::from_secs(5);

/// The longest wait before starting a program that keeps failing to start.
const MOST_BACKOFF: std::time::Duration = std::time::Duration::from_secs(30);

/// Stderr lines a program's end is reported with.
const LAST_WORDS: usize = 5;

/// What one start of the program left: whether it answered at all, and
/// its last stderr lines.
#[derive(Default)]
struct Life {
    answered: std::sync::atomic::AtomicBool,
    last_words: std::sync::Mutex<std::collections::VecDeque<String>>,
}

impl Life {
    /// The last stderr lines, for a message: empty, or `; stderr: ...`.
    fn last_words(&self) -> String {
        let words = self
            .last_words
            .lock()
            .map(|w| w.iter().cloned().collect::<Vec<_>>());
        match words {
            Ok(words) if !words.is_empty() => format!("; stderr: {}", words.join(" | ")),
            _ => String::new(),
        }
    }
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
            quick_ends: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// Sends `task` to the program (starting it if it is not running) and
    /// waits for its answer, making the calls it sends meanwhile through
    /// `hop` (`None`: this worker answers no calls).
    pub(crate) async fn request(
        &self,
        task: &Task,
        resume: bool,
        hop: Option<Arc<Hop>>,
    ) -> Result<Finished, AgentError> {
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
            calls: hop.is_some(),
            messages: hop
                .is_some()
                .then(|| crate::llm::chat_messages(&task.envelope.context.messages)),
            no_wait: hop.is_some(),
        };
        let mut line = serde_json::to_vec(&request)
            .map_err(|err| AgentError::fatal(format!("cannot write the request: {err}")))?;
        line.push(b'\n');
        let (calls_in, mut calls) = mpsc::unbounded_channel();
        let (mut answer, (generation, life), stdin, _forget) = {
            let mut running = self.running.lock().await;
            if running
                .as_ref()
                .is_none_or(|r| r.gone.load(Ordering::Acquire))
            {
                self.back_off(running.as_ref()).await;
                *running = Some(self.start(task)?);
            }
            let Some(current) = running.as_mut() else {
                unreachable!("started above");
            };
            let (send, answer) = oneshot::channel();
            if let Ok(mut waiting) = current.waiting.lock() {
                let waiter = Waiter {
                    answer: send,
                    calls: calls_in,
                };
                waiting.insert(id.clone(), waiter);
            }
            let forget = Forget {
                waiting: Arc::clone(&current.waiting),
                id: id.clone(),
            };
            if current.stdin.line(line).is_err() {
                current.gone.store(true, Ordering::Release);
                return Err(AgentError::retryable(format!(
                    "cannot write to {program} (it is restarted for the next task): it is gone"
                )));
            }
            let life = (current.generation, Arc::clone(&current.life));
            (answer, life, current.stdin.clone(), forget)
        };
        let answered = serve(Serving {
            answer: &mut answer,
            calls: &mut calls,
            hop: hop.as_ref(),
            stdin: &stdin,
        })
        .await?;
        match answered {
            Served::Finished(finished) => Ok(finished),
            Served::Malformed(why) => Err(AgentError::fatal(format!(
                "{program} answered request {id} with a line that is not an exec response ({why}); see proto-schemas/schema/exec_response.schema.json"
            ))),
            Served::Gone => Err(AgentError::retryable(format!(
                "{program} (start {generation}) ended before it answered; it is restarted for the next task{}",
                life.last_words()
            ))),
        }
    }

    /// Waits before starting the program again when its last start ended
    /// soon without answering: 0.25 s, then twice as long each time, up to
    /// 30 s, so a program that cannot start is not started in a loop.
    async fn back_off(&self, ended: Option<&Running>) {
        let Some(ended) = ended else {
            return;
        };
        let failed =
            ended.started.elapsed() < QUICK_END && !ended.life.answered.load(Ordering::Acquire);
        if !failed {
            self.quick_ends.store(0, Ordering::Relaxed);
            return;
        }
        let ends = self.quick_ends.fetch_add(1, Ordering::Relaxed);
        let wait = std::time::Duration::from_millis(250)
            .saturating_mul(1 << ends.min(10))
            .min(MOST_BACKOFF);
        tracing::warn!(
            program = %self.program.name(), start = ended.generation, ?wait,
            "the program ended soon after it started, answering nothing{}; starting it again after a pause",
            ended.life.last_words()
        );
        tokio::time::sleep(wait).await;
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
        let stdin = Writer::new(stdin, Arc::clone(&gone));
        let life = Arc::new(Life::default());
        let agent = task.agent.clone();
        let heard = Arc::clone(&life);
        let stderr = tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(%agent, start = generation, "stderr: {line}");
                if let Ok(mut words) = heard.last_words.lock() {
                    if words.len() == LAST_WORDS {
                        words.pop_front();
                    }
                    words.push_back(line);
                }
            }
        });
        tokio::spawn(read_answers(
            stdout,
            (Arc::clone(&waiting), stdin.clone()),
            (Arc::clone(&gone), Arc::clone(&life), stderr),
            format!("{program} (start {generation})"),
        ));
        Ok(Running {
            stdin,
            waiting,
            gone,
            generation,
            started: std::time::Instant::now(),
            life,
            _child: child,
        })
    }
}

/// Hands each answer line to the task waiting for its id. When stdout
/// closes, the program is gone: every task still waiting is failed (its
/// sender dropped), and the next task starts the program again.
async fn read_answers(
    stdout: tokio::process::ChildStdout,
    (waiting, stdin): (Waiting, Writer),
    (gone, life, stderr): (
        Arc<std::sync::atomic::AtomicBool>,
        Arc<Life>,
        tokio::task::JoinHandle<()>,
    ),
    program: String,
) {
    let mut lines = BufReader::new(stdout).lines();
    loop {
        match lines.next_line().await {
            Ok(Some(line)) if line.trim().is_empty() => {}
            Ok(Some(line)) => {
                // Most lines are calls while tasks take steps: read as one
                // first, rather than as an answer that fails.
                if line.contains("\"call\"") && route_call(&line, &waiting, &stdin) {
                    continue;
                }
                let (id, answer) = parse(&line);
                let sender = id.as_ref().and_then(|id| {
                    waiting
                        .lock()
                        .ok()
                        .and_then(|mut waiting| waiting.remove(id))
                });
                match (sender, answer) {
                    (Some(sender), answer) => {
                        life.answered.store(true, Ordering::Release);
                        let _ = sender.answer.send(answer);
                    }
                    (None, Ok(_)) => tracing::warn!(
                        %program, id = id.as_deref().unwrap_or_default(),
                        "an answer for no waiting request (timed out, or answered twice) is dropped"
                    ),
                    (None, Err(why)) => {
                        let shown: String = line.chars().take(200).collect();
                        tracing::warn!(
                            %program, error = %why,
                            "a stdout line is not an answer {{\"id\", \"reply\"}} (see proto-schemas/schema/exec_response.schema.json): {shown}"
                        );
                    }
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    // Its last words explain the end: read them before failing its tasks.
    let _ = tokio::time::timeout(std::time::Duration::from_millis(500), stderr).await;
    gone.store(true, Ordering::Release);
    let failed = waiting.lock().map(|mut w| w.drain().count()).unwrap_or(0);
    tracing::warn!(%program, in_flight = failed, "persistent exec program ended; its tasks in flight are retried");
}

/// A stdout line as the id it answers (when it names one) and the answer,
/// or why it is not one: a request whose answer is malformed fails at once
/// with the reason, instead of waiting for its timeout.
fn parse(line: &str) -> (Option<String>, Answer) {
    match serde_json::from_str::<ExecResponse>(line) {
        Ok(response) => (Some(response.id), Ok(response.reply)),
        Err(err) => {
            let id = serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|v| v.get("id").and_then(|id| id.as_str()).map(str::to_owned));
            (id, Err(err))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_malformed_answer_is_matched_to_its_request_when_it_names_one() {
        let (id, answer) = parse(r#"{"id": "7", "reply": {"action": "terminate", "output": 1}}"#);
        assert_eq!(id.as_deref(), Some("7"));
        assert!(answer.is_ok());
        let (id, answer) = parse(r#"{"id": "8", "reply": {"acton": "terminate"}}"#);
        assert_eq!(id.as_deref(), Some("8"));
        assert!(answer.unwrap_err().to_string().contains("acton"));
        let (id, answer) = parse("hello");
        assert_eq!(id, None);
        assert!(answer.is_err());
    }
}
