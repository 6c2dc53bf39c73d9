//! A persistent program's calls while its task is in flight
//! (proto-schemas/exec-calls.md): `ctx.step`, `ctx.model`, `ctx.tool`,
//! `ctx.ask`, `ctx.delegate` and `ctx.say` of the Python package, or of
//! any program that speaks the protocol.
//!
//! Every call has a label (`step:NAME`, `tool:NAME:DIGEST`, `model:DIGEST`,
//! `ask`, `delegate`, `say`). The hop journal keeps the labels in the order
//! first made (`<envelope>.calls`), and the call at place `p` keeps its
//! result under step `1000 + p`, as an LLM agent's model answer and tool
//! call do. A program that runs the task again (after a crash, an answer,
//! the children's results, or in a replay) gets each recorded result back
//! instead of the call being made again; a call the record does not have,
//! while calls it has were not made again, is drift, and fails the hop.

use std::collections::HashMap;
use std::sync::Arc;

use baton_proto::{ExecOp, Value};
use baton_worker::{AgentError, ContextUpdate, Outcome, Results, Task};
use serde_json::{Value as Json, json};
use uuid::Uuid;

use super::Asking;

mod record;
mod waits;

use crate::journal::{Journal, Recorded};
use crate::llm::LlmRunner;
use crate::llm::program::Made;
use record::journal_of;
use waits::results_json;

/// The first journal step of a program's calls: the call at place `p`
/// (from 1) is step `FIRST_STEP + p`, clear of the steps that hold the
/// hop's questions (step `n` for question `n`).
const FIRST_STEP: u32 = 1000;

/// The state entry a delegating hop leaves for its continuation:
/// `{continuation, journal}`, the id the continuation runs under (its own)
/// and the hop journal it goes on with.
const JOURNAL: &str = "baton.journal";

/// What a call came to, for the program.
#[derive(Debug)]
pub(crate) enum Answer {
    /// Its result.
    Result(Json),
    /// It failed, and the task goes on: `refused` or `failed`.
    Error(&'static str, String),
    /// The hop ends here, with this.
    End(Box<Result<Outcome, AgentError>>),
}

/// The worker's side of a program's calls: the model, the tools, the hop
/// journal and the inbox (an exec spec's `[llm]` and `[[mcp]]`).
pub(crate) type Machinery = Arc<LlmRunner>;

/// One task's calls: what the hop recorded, what it said, and how it ends.
pub(crate) struct Hop {
    /// The task as the program sees it (with the answer that resumed it).
    task: Task,
    /// The task as delivered, which a new question parks.
    delivered: Task,
    journal_id: Uuid,
    machinery: Machinery,
    asking: Option<Arc<Asking>>,
    /// The children's results, when the task runs again after a delegation.
    results: Option<Json>,
    /// The hop's questions and answers so far (`context.state.answers`:
    /// `[{question, answer}]`).
    answers: Vec<Value>,
    record: tokio::sync::Mutex<Record>,
    /// Calls of this run being made now.
    in_flight: std::sync::atomic::AtomicUsize,
    /// What the hop said (the answer that resumed it, `ctx.say`).
    said: std::sync::Mutex<ContextUpdate>,
}

/// The hop's calls as recorded, and as made in this run.
#[derive(Default)]
struct Record {
    loaded: bool,
    labels: Vec<String>,
    /// Which recorded calls this run made again.
    claimed: Vec<bool>,
    /// How many calls of each label this run made.
    seen: HashMap<String, usize>,
    /// Steps that run now, by name, oldest first: their journal step and
    /// which call of the name each is.
    running: HashMap<String, Vec<(u32, usize, std::time::Instant)>>,
    /// The journal steps of this run's messages not yet kept.
    says: Vec<u32>,
}

/// Where a call is in the record.
struct Placed {
    step: u32,
    /// The record had it: its result may be there.
    recorded: bool,
    /// Which call of its label it is in this run, from 0.
    nth: usize,
}

impl Hop {
    /// The calls of `task`'s run; `update` is what the hop says before the
    /// program does (the answer that resumed it).
    pub(crate) fn new(
        (delivered, task): (&Task, &Task),
        machinery: Machinery,
        asking: Option<Arc<Asking>>,
        results: Option<&Results>,
        update: ContextUpdate,
    ) -> Self {
        let journal_id = journal_of(task);
        // The hop's own questions and answers: those of a hop resumed by an
        // answer, or of the hop a continuation goes on with; an earlier
        // hop's, left in the state, are not this hop's.
        let own = task.envelope.resumed.is_some() || journal_id != task.envelope.id;
        let answers = match task.envelope.context.state.get("answers") {
            Some(Value::Array(entries)) if own => entries.clone(),
            _ => Vec::new(),
        };
        // The model and tools read the hop's journal from the task: a
        // continuation's is the journal of the hop that delegated.
        let mut calls_task = task.clone();
        if journal_id != crate::llm::journal_of(task) {
            calls_task.envelope.resumed = Some(baton_proto::Resumed {
                journal: journal_id,
                decision: "continued".to_owned(),
                tool: String::new(),
                extra: baton_proto::Map::new(),
            });
        }
        Self {
            journal_id,
            task: calls_task,
            delivered: delivered.clone(),
            machinery,
            asking,
            results: results.map(results_json),
            answers,
            record: tokio::sync::Mutex::default(),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
            said: std::sync::Mutex::new(update),
        }
    }

    /// What the hop said, to go before the program's own reply.
    pub(crate) fn said(&self) -> ContextUpdate {
        self.said
            .lock()
            .map(|said| said.clone())
            .unwrap_or_default()
    }

    fn journal(&self) -> &Journal {
        self.machinery.journal()
    }

    /// Makes one call.
    pub(crate) async fn answer(&self, op: ExecOp) -> Answer {
        use std::sync::atomic::Ordering;
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        let answer = self.answered(op).await;
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        answer
    }

    async fn answered(&self, op: ExecOp) -> Answer {
        let made = match op {
            ExecOp::Tools => Ok(Answer::Result(
                json!({"tools": self.machinery.program_tools()}),
            )),
            // The model's, a tool's, a question's and a delegation's futures
            // are large: boxed, so that a step's call does not carry (and
            // copy) their size.
            ExecOp::Model {
                messages,
                tools,
                params,
            } => Box::pin(self.model(messages, tools, &params)).await,
            ExecOp::Tool { name, arguments } => Box::pin(self.tool(&name, &arguments)).await,
            ExecOp::Step { name, idempotent } => self.step(&name, idempotent).await,
            ExecOp::StepDone {
                name,
                key,
                value,
                error,
            } => self.step_done(&name, key.as_deref(), (value, error)).await,
            ExecOp::Ask { question, schema } => Box::pin(self.ask(question, schema)).await,
            ExecOp::Delegate { children, mode } => Box::pin(self.delegate(children, mode)).await,
            ExecOp::Say { text } => Box::pin(self.say(text)).await,
        };
        made.unwrap_or_else(|err| Answer::End(Box::new(Err(err))))
    }

    async fn model(
        &self,
        messages: Vec<Json>,
        tools: Option<Vec<Json>>,
        params: &serde_json::Map<String, Json>,
    ) -> Result<Answer, AgentError> {
        if !self.machinery.has_model() {
            return Ok(refused(
                "ctx.model needs an [llm] table in the agent's spec, with base_url and model",
            ));
        }
        // By its place, as an LLM agent's answers are: a rerun's messages
        // may hold more (an answer that came since), and get the answer
        // recorded for this call.
        let placed = self.place("model".to_owned(), false).await?;
        let said = self.said();
        let made = (self.machinery)
            .program_model(
                &self.task,
                (placed.step, placed.nth),
                messages,
                (tools.as_deref(), params),
                &said,
            )
            .await?;
        Ok(self.made(made, |reply| reply))
    }

    async fn tool(&self, name: &str, arguments: &Json) -> Result<Answer, AgentError> {
        let called = digest(&format!("tool\0{name}\0{arguments}"));
        let placed = self
            .place(format!("tool:{name}:{}", &called[..12]), false)
            .await?;
        // The same call made twice in a hop is indexed once each.
        let asked = digest(&format!("{called}\0{}", placed.nth));
        let source = self.replayed(|| asked.clone()).await?;
        let said = self.said();
        let made = (self.machinery)
            .program_tool(
                &self.task,
                (placed.step, source.as_deref()),
                (name, arguments),
                &said,
            )
            .await?;
        if matches!(made, Made::Done(_)) {
            self.indexed(|| asked, placed.step).await?;
        }
        Ok(self.made(
            made,
            |(text, is_error)| json!({"text": text, "is_error": is_error}),
        ))
    }

    async fn step(&self, name: &str, idempotent: bool) -> Result<Answer, AgentError> {
        let placed = self.place(format!("step:{name}"), true).await?;
        let journal = self.journal();
        let recorded = if placed.recorded {
            journal.call(self.journal_id, placed.step, 0).await?
        } else {
            Recorded::Nothing
        };
        match recorded {
            Recorded::Result(text, _) => return Ok(value_of(&text)),
            Recorded::Started { revision, at } if !idempotent => {
                let decided = journal.decision(self.journal_id, placed.step, 0, "failed");
                if let Some(failed) = decided.await? {
                    let by = failed.by.unwrap_or_else(|| "a person".to_owned());
                    return Ok(Answer::End(Box::new(Err(AgentError::fail(
                        baton_proto::Reason::ToolOutcomeUnknown,
                        format!(
                            "step {name:?} may or may not have run, and {by} chose to fail the session"
                        ),
                    )))));
                }
                let said = self.said();
                let waiting = Box::pin((self.machinery).program_step_in_doubt(
                    &self.task,
                    placed.step,
                    (name, revision, at),
                    &said,
                ))
                .await;
                return Ok(Answer::End(Box::new(waiting)));
            }
            Recorded::Started { .. } => {
                tracing::warn!(step = %name, "an idempotent step that left no result runs again");
            }
            Recorded::Nothing => {
                let asked = || digest(&format!("step\0{name}\0{}", placed.nth));
                // An evaluation reuses the step wherever the session ran it.
                let evaluation = (self.task.envelope.replay.as_ref()).is_some_and(|r| r.eval);
                if let Some(source) = self.replayed_when(asked, evaluation).await? {
                    if let Some((text, _)) = journal.result_at(&source, 0).await? {
                        journal
                            .record_result(self.journal_id, placed.step, 0, &text, false)
                            .await?;
                        return Ok(value_of(&text));
                    }
                }
                if evaluation {
                    return Ok(Answer::End(Box::new(Err(AgentError::fail(
                        baton_proto::Reason::WouldWrite,
                        format!(
                            "would write: step {name:?} (the evaluated session did not run it \
                             here, and an evaluation runs no step, which may write)"
                        ),
                    )))));
                }
                // A new place is marked by the step's start already.
                if placed.recorded && !idempotent {
                    journal
                        .record_start(self.journal_id, placed.step, 0)
                        .await?;
                }
            }
        }
        let mut record = self.record.lock().await;
        let started = std::time::Instant::now();
        (record.running.entry(name.to_owned()).or_default()).push((
            placed.step,
            placed.nth,
            started,
        ));
        let key = self.key_of(placed.step);
        Ok(Answer::Result(json!({"run": true, "key": key})))
    }

    /// The idempotency key of the step at journal step `step`.
    fn key_of(&self, step: u32) -> String {
        format!("{}/{step}/0", self.journal_id)
    }

    async fn step_done(
        &self,
        name: &str,
        key: Option<&str>,
        (value, error): (Option<Json>, Option<String>),
    ) -> Result<Answer, AgentError> {
        let (step, nth, started) = {
            let mut record = self.record.lock().await;
            let running = record
                .running
                .get_mut(name)
                .filter(|steps| !steps.is_empty());
            let Some(running) = running else {
                return Ok(refused(format!(
                    "step_done for {name:?}, which is not running: send `step` first"
                )));
            };
            // The step the key names, else the oldest of the name.
            let at = match (key, running.len()) {
                (Some(key), 2..) => (running.iter())
                    .position(|(step, ..)| key == self.key_of(*step))
                    .unwrap_or(0),
                _ => 0,
            };
            running.remove(at)
        };
        let journal = self.journal();
        let label = format!("step:{name}");
        let key = self.key_of(step);
        if let Some(error) = error {
            tracing::info!(step = %name, %error, "a step raised: it runs again next time");
            journal.forget_start(self.journal_id, step, &label).await?;
            self.shown(&label, &key, "error", started).await;
            return Ok(Answer::Result(json!({})));
        }
        let text = value.unwrap_or(Json::Null).to_string();
        journal
            .record_result(self.journal_id, step, 0, &text, false)
            .await?;
        self.indexed(|| digest(&format!("step\0{name}\0{nth}")), step)
            .await?;
        self.shown(&label, &key, "ok", started).await;
        Ok(Answer::Result(json!({})))
    }

    /// Shows a step that ran as a `tool_called` event (tool `step:NAME`),
    /// as an LLM agent's tool calls are shown: in `baton watch`, the
    /// console's session page and the trace.
    async fn shown(&self, label: &str, key: &str, outcome: &str, started: std::time::Instant) {
        let call = baton_worker::ToolCall {
            tool: label,
            call: key,
            outcome,
            took: started.elapsed(),
        };
        self.task.progress.step_ran(call).await;
    }

    /// Where a replay takes the result of what was `asked` (a digest, made
    /// only for a replay) from: the replayed session's `<envelope>.<step>`,
    /// when it recorded one in time.
    async fn replayed(&self, asked: impl FnOnce() -> String) -> Result<Option<String>, AgentError> {
        self.replayed_when(asked, false).await
    }

    /// As [`Hop::replayed`]; `anytime`: wherever the session recorded it,
    /// even after the hop the replay runs again from.
    async fn replayed_when(
        &self,
        asked: impl FnOnce() -> String,
        anytime: bool,
    ) -> Result<Option<String>, AgentError> {
        let Some(replay) = &self.task.envelope.replay else {
            return Ok(None);
        };
        let asked = crate::journal::placed(&self.task, &asked());
        let before = replay.before.filter(|_| !anytime);
        self.journal().asked_at(replay.of, &asked, before).await
    }

    /// Indexes the result at `step` under what was `asked` (a digest, made
    /// only for a replayable session), for replays of the session.
    async fn indexed(&self, asked: impl FnOnce() -> String, step: u32) -> Result<(), AgentError> {
        if !self.task.envelope.replayable {
            return Ok(());
        }
        let session = self.task.envelope.session;
        let asked = crate::journal::placed(&self.task, &asked());
        (self.journal())
            .index(session, &asked, self.journal_id, step)
            .await
    }

    /// `made` as an answer for the program, its result shown by `shown`.
    fn made<T>(&self, made: Made<T>, shown: impl FnOnce(T) -> Json) -> Answer {
        match made {
            Made::Done(result) => Answer::Result(shown(result)),
            Made::Refused(why) => Answer::Error("refused", why),
            Made::Ended(outcome) => Answer::End(Box::new(Ok(*outcome))),
        }
    }
}

fn refused(why: impl Into<String>) -> Answer {
    Answer::Error("refused", why.into())
}

/// The SHA-256 of `text`, in hex.
fn digest(text: &str) -> String {
    baton_proto::hex(&<sha2::Sha256 as sha2::Digest>::digest(text.as_bytes()))
}

/// A recorded value: JSON, or (a person's note) a string.
fn value_json(text: &str) -> Json {
    serde_json::from_str(text).unwrap_or_else(|_| Json::String(text.to_owned()))
}

fn value_of(text: &str) -> Answer {
    Answer::Result(json!({"recorded": true, "value": value_json(text)}))
}
