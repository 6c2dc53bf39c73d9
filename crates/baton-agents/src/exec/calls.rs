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

use baton_proto::{ExecAction, ExecOp, ExecReply, Message, Role, Value};
use baton_worker::{AgentError, ContextUpdate, Outcome, Results, Task};
use serde_json::{Value as Json, json};
use uuid::Uuid;

use super::Asking;
use crate::journal::{Journal, Recorded};
use crate::llm::LlmRunner;
use crate::llm::program::Made;

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
    /// The hop's questions and answers so far (`context.state.answers`).
    answers: Vec<Option<String>>,
    record: tokio::sync::Mutex<Record>,
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
    running: HashMap<String, Vec<(u32, usize)>>,
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
        let answers = match task.envelope.context.state.get("answers") {
            Some(Value::Array(entries)) => entries
                .iter()
                .map(|entry| {
                    let fields = entry.as_map()?;
                    let (_, answer) = fields.iter().find(|(k, _)| k.as_str() == Some("answer"))?;
                    answer.as_str().map(str::to_owned)
                })
                .collect(),
            _ => Vec::new(),
        };
        Self {
            journal_id: journal_of(task),
            task: task.clone(),
            delivered: delivered.clone(),
            machinery,
            asking,
            results: results.map(results_json),
            answers,
            record: tokio::sync::Mutex::default(),
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
        let made = match op {
            ExecOp::Tools => Ok(Answer::Result(
                json!({"tools": self.machinery.program_tools()}),
            )),
            ExecOp::Model {
                messages,
                tools,
                params,
            } => self.model(messages, tools, &params).await,
            ExecOp::Tool { name, arguments } => self.tool(&name, &arguments).await,
            ExecOp::Step { name, idempotent } => self.step(&name, idempotent).await,
            ExecOp::StepDone { name, value, error } => self.step_done(&name, value, error).await,
            ExecOp::Ask { question } => self.ask(question).await,
            ExecOp::Delegate { children, mode } => self.delegate(children, mode).await,
            ExecOp::Say { text } => self.say(text).await,
        };
        made.unwrap_or_else(|err| Answer::End(Box::new(Err(err))))
    }

    /// Where the next call of `label` is in the record: a recorded one,
    /// or a new place at its end, marked in the journal (`started`: by a
    /// step's start). Drift when the record holds another call this run
    /// has not made yet.
    async fn place(&self, label: String, started: bool) -> Result<Placed, AgentError> {
        let mut record = self.record.lock().await;
        if !record.loaded {
            record.labels = self.recorded().await?;
            record.claimed = vec![false; record.labels.len()];
            record.loaded = true;
        }
        let seen = record.seen.entry(label.clone()).or_default();
        let nth = *seen;
        *seen += 1;
        let found = (record.labels.iter().enumerate())
            .filter(|(_, recorded)| **recorded == label)
            .nth(nth)
            .map(|(at, _)| at);
        if let Some(at) = found {
            record.claimed[at] = true;
            return Ok(Placed {
                step: step_at(at),
                recorded: true,
                nth,
            });
        }
        if let Some(first) = record.claimed.iter().position(|claimed| !claimed) {
            return Err(AgentError::fatal(drift(
                first,
                &record.labels[first],
                &label,
            )));
        }
        // Marked while the record is held: places are marked in order.
        let step = step_at(record.labels.len());
        (self.journal())
            .place(self.journal_id, step, &label, started)
            .await?;
        record.labels.push(label);
        record.claimed.push(true);
        Ok(Placed {
            step,
            recorded: false,
            nth,
        })
    }

    /// The labels of the calls the hop recorded, in order: none for a hop
    /// that runs for the first time (its first delivery, not resumed, not
    /// a continuation, not a replay), which has no record to read.
    async fn recorded(&self) -> Result<Vec<String>, AgentError> {
        let envelope = &self.task.envelope;
        let fresh = self.task.attempt == 1
            && envelope.resumed.is_none()
            && envelope.replay.is_none()
            && self.results.is_none()
            && self.journal_id == envelope.id;
        let mut labels = Vec::new();
        if fresh {
            return Ok(labels);
        }
        while let Some(label) = (self.journal())
            .label(self.journal_id, step_at(labels.len()))
            .await?
        {
            labels.push(label);
        }
        Ok(labels)
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
        let asked = json!([messages, tools, params]);
        let placed = (self.place(format!("model:{}", digest(&asked.to_string())), false)).await?;
        let said = self.said();
        let made = (self.machinery)
            .program_model(
                &self.task,
                placed.step,
                messages,
                (tools.as_deref(), params),
                &said,
            )
            .await?;
        Ok(self.made(made, |reply| reply))
    }

    async fn tool(&self, name: &str, arguments: &Json) -> Result<Answer, AgentError> {
        let asked = digest(&format!("tool\0{name}\0{arguments}"));
        let placed = self
            .place(format!("tool:{name}:{}", &asked[..12]), false)
            .await?;
        let source = self.replayed(&asked).await?;
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
            self.indexed(&asked, placed.step).await?;
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
                let waiting = (self.machinery)
                    .program_step_in_doubt(&self.task, placed.step, (name, revision, at), &said)
                    .await;
                return Ok(Answer::End(Box::new(waiting)));
            }
            Recorded::Started { .. } => {
                tracing::warn!(step = %name, "an idempotent step that left no result runs again");
            }
            Recorded::Nothing => {
                let asked = digest(&format!("step\0{name}\0{}", placed.nth));
                if let Some(source) = self.replayed(&asked).await? {
                    if let Some((text, _)) = journal.result_at(&source, 0).await? {
                        journal
                            .record_result(self.journal_id, placed.step, 0, &text, false)
                            .await?;
                        return Ok(value_of(&text));
                    }
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
        (record.running.entry(name.to_owned()).or_default()).push((placed.step, placed.nth));
        let key = format!("{}/{}/0", self.journal_id, placed.step);
        Ok(Answer::Result(json!({"run": true, "key": key})))
    }

    async fn step_done(
        &self,
        name: &str,
        value: Option<Json>,
        error: Option<String>,
    ) -> Result<Answer, AgentError> {
        let (step, nth) = {
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
            running.remove(0)
        };
        let journal = self.journal();
        if let Some(error) = error {
            tracing::info!(step = %name, %error, "a step raised: it runs again next time");
            (journal.forget_start(self.journal_id, step, &format!("step:{name}"))).await?;
            return Ok(Answer::Result(json!({})));
        }
        let text = value.unwrap_or(Json::Null).to_string();
        journal
            .record_result(self.journal_id, step, 0, &text, false)
            .await?;
        self.indexed(&digest(&format!("step\0{name}\0{nth}")), step)
            .await?;
        Ok(Answer::Result(json!({})))
    }

    async fn ask(&self, question: String) -> Result<Answer, AgentError> {
        let placed = self.place("ask".to_owned(), false).await?;
        if let Some(Some(answer)) = self.answers.get(placed.nth) {
            return Ok(Answer::Result(json!({"answer": answer})));
        }
        let Some(asking) = &self.asking else {
            return Ok(refused(
                "ctx.ask needs the inbox and the hop journal: grant them with `baton permissions worker NAME --human`",
            ));
        };
        let said = self.kept_said().await?;
        Ok(Answer::End(Box::new(
            asking.ask(&self.delivered, question, said).await,
        )))
    }

    async fn delegate(
        &self,
        children: Vec<baton_proto::ExecChild>,
        mode: Option<String>,
    ) -> Result<Answer, AgentError> {
        if mode.as_deref() == Some("async") {
            return Ok(refused(
                "ctx.delegate: mode \"async\" is for a team's coordinator; use parallel, serial or chain",
            ));
        }
        let placed = self.place("delegate".to_owned(), false).await?;
        let journal = self.journal();
        let recorded = if placed.recorded {
            journal.call(self.journal_id, placed.step, 0).await?
        } else {
            Recorded::Nothing
        };
        match (recorded, &self.results) {
            (Recorded::Result(text, _), _) => {
                return Ok(Answer::Result(json!({"results": value_json(&text)})));
            }
            (Recorded::Started { .. }, Some(results)) => {
                let text = results.to_string();
                journal
                    .record_result(self.journal_id, placed.step, 0, &text, false)
                    .await?;
                return Ok(Answer::Result(json!({"results": results})));
            }
            (Recorded::Started { .. }, None) => {}
            (Recorded::Nothing, _) => {
                journal
                    .record_start(self.journal_id, placed.step, 0)
                    .await?;
            }
        }
        let reply = ExecReply {
            action: Some(ExecAction::Delegate),
            children,
            mode,
            ..ExecReply::default()
        };
        let mut outcome = match super::delegation(&reply) {
            Ok(outcome) => outcome,
            Err(AgentError::Fatal(why)) => return Ok(refused(why)),
            Err(err) => return Err(err),
        };
        let mut update = self.kept_said().await?;
        let continuation = baton_proto::derive_id_labelled(self.delivered.envelope.id, "resume", 0);
        let left = Value::Map(vec![
            (
                Value::from("continuation"),
                Value::from(continuation.to_string()),
            ),
            (
                Value::from("journal"),
                Value::from(self.journal_id.to_string()),
            ),
        ]);
        update.state.insert(JOURNAL.to_owned(), left);
        *outcome.update_mut() = update;
        Ok(Answer::End(Box::new(Ok(outcome))))
    }

    async fn say(&self, text: String) -> Result<Answer, AgentError> {
        let placed = self.place("say".to_owned(), false).await?;
        if placed.recorded {
            let recorded = self.journal().call(self.journal_id, placed.step, 0).await?;
            if matches!(recorded, Recorded::Result(..)) {
                // Said before the hop waited: the context has it already.
                return Ok(Answer::Result(json!({})));
            }
        }
        if let Ok(mut said) = self.said.lock() {
            said.messages.push(Message::new(Role::Agent, text));
        }
        self.record.lock().await.says.push(placed.step);
        Ok(Answer::Result(json!({})))
    }

    /// What the hop said, its messages kept in the journal as said: the
    /// hop waits now, and its context will hold them when it runs again.
    async fn kept_said(&self) -> Result<ContextUpdate, AgentError> {
        let says = std::mem::take(&mut self.record.lock().await.says);
        for step in says {
            (self.journal())
                .record_result(self.journal_id, step, 0, "said", false)
                .await?;
        }
        Ok(self.said())
    }

    /// Where a replay takes the result of what was `asked` from: the
    /// replayed session's `<envelope>.<step>`, when it recorded one in time.
    async fn replayed(&self, asked: &str) -> Result<Option<String>, AgentError> {
        let Some(replay) = &self.task.envelope.replay else {
            return Ok(None);
        };
        self.journal()
            .asked_at(replay.of, asked, replay.before)
            .await
    }

    /// Indexes the result at `step` under what was `asked`, for replays of
    /// a replayable session.
    async fn indexed(&self, asked: &str, step: u32) -> Result<(), AgentError> {
        if !self.task.envelope.replayable {
            return Ok(());
        }
        let session = self.task.envelope.session;
        (self.journal())
            .index(session, asked, self.journal_id, step)
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

/// The hop journal `task`'s calls go in: its own (the id it first ran
/// under), or, for the continuation of a delegation (and that continuation
/// resumed after a question), the journal of the hop that delegated.
fn journal_of(task: &Task) -> Uuid {
    let own = crate::llm::journal_of(task);
    let left = task
        .envelope
        .context
        .state
        .get(JOURNAL)
        .and_then(Value::as_map);
    let field = |name: &str| {
        let (_, value) = left?.iter().find(|(k, _)| k.as_str() == Some(name))?;
        value.as_str()?.parse::<Uuid>().ok()
    };
    match (field("continuation"), field("journal")) {
        (Some(continuation), Some(journal)) if continuation == own => journal,
        _ => own,
    }
}

/// The journal step of the call at index `at` of the record.
fn step_at(at: usize) -> u32 {
    FIRST_STEP + u32::try_from(at + 1).unwrap_or(u32::MAX - FIRST_STEP)
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

/// The children's results as the program reads them.
fn results_json(results: &Results) -> Json {
    (results.results.iter())
        .map(|result| {
            json!({
                "index": result.index,
                "agent": result.agent,
                "tag": result.tag,
                "status": result.status.as_str(),
                "output": rmpv::ext::from_value::<Json>(result.output.clone()).unwrap_or(Json::Null),
                "detail": result.detail,
            })
        })
        .collect()
}

/// How a label reads in an error.
fn described(label: &str) -> String {
    let mut parts = label.splitn(3, ':');
    match (parts.next(), parts.next()) {
        (Some("step"), Some(name)) => format!("'{name}'"),
        (Some("tool"), Some(name)) => format!("tool '{name}'"),
        (Some("model"), _) => "a model call".to_owned(),
        (Some("ask"), _) => "a question (ctx.ask)".to_owned(),
        (Some("delegate"), _) => "a delegation (ctx.delegate)".to_owned(),
        (Some("say"), _) => "a message (ctx.say)".to_owned(),
        _ => format!("'{label}'"),
    }
}

/// Why a call that is not in the record fails the hop: the record's call
/// at `first` (from 0) was not made again, and `now` was made instead.
fn drift(first: usize, recorded: &str, now: &str) -> String {
    let (was, is) = (described(recorded), described(now));
    let differs = if was == is {
        " with other arguments"
    } else {
        ""
    };
    format!(
        "the handler does not do what it did: step {} is {was} in the record, {is}{differs} now (a handler must make the same calls in the same order when it runs again: keep what changes between runs, such as the time or a random number, inside ctx.step)",
        first + 1
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_names_both_calls() {
        assert!(
            drift(0, "step:step-0", "step:step-1")
                .contains("step 1 is 'step-0' in the record, 'step-1' now")
        );
        assert!(drift(2, "tool:refund:abc", "tool:refund:def").contains(
            "step 3 is tool 'refund' in the record, tool 'refund' with other arguments now"
        ));
        assert!(
            drift(1, "model:x", "step:charge")
                .contains("step 2 is a model call in the record, 'charge' now")
        );
    }

    #[test]
    fn places_map_to_steps_clear_of_the_questions() {
        assert_eq!(step_at(0), 1001);
        assert_eq!(step_at(7), 1008);
    }
}
