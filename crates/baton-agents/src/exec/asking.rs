//! An exec agent asks the user (a reply's `ask`) as an LLM agent's
//! `ask_user` does: the hop parks in the inbox (reason `input_required`)
//! and waits; the user's answer is recorded in the hop journal and sends
//! the envelope back, and the program runs again with every question and
//! answer of the hop. It may ask again.
//!
//! The parked envelope keeps the questions asked so far in
//! `context.state.answers` (`[{question, answer}]`) and the question last
//! in its messages; question `n` of the hop is journal step `n`, call 0.

use baton_client::Inbox;
use baton_proto::{Gate, Message, Reason, Role, Value};
use baton_worker::{AgentError, ContextUpdate, Outcome, Task};

use crate::journal::Journal;

/// The tool an exec agent's question waits as, as an LLM agent's does.
const ASK_USER: &str = "ask_user";

/// The state entry holding the hop's questions and answers.
const ANSWERS: &str = "answers";

/// Where an exec agent's questions wait, and where their answers are read.
#[derive(Debug)]
pub(crate) struct Asking {
    pub(crate) inbox: Inbox,
    pub(crate) journal: Journal,
}

/// A task resumed by an answer: what the program sees, and what the hop
/// adds to the session's context (the answer, its variables).
pub(super) struct Answered {
    pub(super) task: Task,
    pub(super) update: ContextUpdate,
}

/// The journal whose steps hold the hop's answers.
fn journal_of(task: &Task) -> uuid::Uuid {
    (task.envelope.resumed.as_ref()).map_or(task.envelope.id, |resumed| resumed.journal)
}

/// The hop's questions and answers so far, from the envelope's state.
fn answers(task: &Task) -> Vec<Value> {
    match task.envelope.context.state.get(ANSWERS) {
        Some(Value::Array(entries)) if task.envelope.resumed.is_some() => entries.clone(),
        _ => Vec::new(),
    }
}

fn entry(question: &str, answer: Option<&str>) -> Value {
    let mut fields = vec![(Value::from("question"), Value::from(question))];
    if let Some(answer) = answer {
        fields.push((Value::from("answer"), Value::from(answer)));
    }
    Value::Map(fields)
}

fn field<'a>(entry: &'a Value, name: &str) -> Option<&'a str> {
    let fields = entry.as_map()?;
    let (_, value) = fields.iter().find(|(k, _)| k.as_str() == Some(name))?;
    value.as_str()
}

impl Asking {
    /// `task` with the answer to its last question, when it was resumed by
    /// one: in its messages, its `answers` state and the variables that
    /// came with it. `None` when the task asked nothing.
    pub(super) async fn answered(&self, task: &Task) -> Result<Option<Answered>, AgentError> {
        let resumed = task.envelope.resumed.as_ref();
        if resumed.is_none_or(|resumed| resumed.tool != ASK_USER) {
            return Ok(None);
        }
        let mut entries = answers(task);
        let Some(last) = entries.last().cloned() else {
            return Ok(None);
        };
        let step = u32::try_from(entries.len() - 1).unwrap_or(u32::MAX);
        let recorded = (self.journal)
            .decision(journal_of(task), step, 0, "result")
            .await?
            .ok_or_else(|| {
                AgentError::retryable("the user's answer is not in the hop journal yet")
            })?;
        let text = recorded.text.unwrap_or_default();
        let question = field(&last, "question").unwrap_or_default();
        *entries.last_mut().unwrap_or(&mut Value::Nil) = entry(question, Some(&text));
        let mut update = ContextUpdate::default();
        update.messages.push(Message::new(Role::User, text));
        if let Some(Value::Map(variables)) = recorded.variables {
            for (name, value) in variables {
                if let Some(name) = name.as_str() {
                    update.variables.insert(name.to_owned(), value);
                }
            }
        }
        update
            .state
            .insert(ANSWERS.to_owned(), Value::Array(entries.clone()));
        let mut task = task.clone();
        let context = &mut task.envelope.context;
        context.messages.extend(update.messages.iter().cloned());
        context.variables.extend(update.variables.clone());
        context.state.extend(update.state.clone());
        Ok(Some(Answered { task, update }))
    }

    /// Parks `task` in the inbox with `question` for the user (with the
    /// JSON Schema of the answer asked for, if any): the hop's end, waiting
    /// for input, with `update` (the question said).
    pub(super) async fn ask(
        &self,
        task: &Task,
        (question, schema): (String, Option<serde_json::Value>),
        mut update: ContextUpdate,
    ) -> Result<Outcome, AgentError> {
        // Answered in this run: the update holds them with the answer.
        let mut entries = match update.state.get(ANSWERS) {
            Some(Value::Array(entries)) => entries.clone(),
            _ => answers(task),
        };
        let step = u32::try_from(entries.len()).unwrap_or(u32::MAX);
        let mut arguments = serde_json::json!({ "question": question, "n": step });
        if let Some(schema) = schema {
            arguments["schema"] = schema;
        }
        let arguments = arguments.to_string();
        let gate = Gate {
            digest: Gate::digest_of(ASK_USER, &arguments),
            reason: Reason::InputRequired,
            tool: ASK_USER.to_owned(),
            arguments,
            at: baton_proto::now_ms(),
            journal: journal_of(task),
            step,
            call: 0,
            authorize: None,
            extra: baton_proto::Map::new(),
        };
        crate::evaluating::asks_no_person(task, &Reason::InputRequired, "ctx.ask")?;
        entries.push(entry(&question, None));
        let said = Message::new(Role::Agent, question.clone());
        let mut parked = task.envelope.clone();
        parked.id = gate.entry_id("ask");
        parked.to = Some(task.agent.clone());
        parked.gate = Some(gate);
        let context = &mut parked.context;
        context.messages.extend(update.messages.iter().cloned());
        context.messages.push(said.clone());
        context.variables.extend(update.variables.clone());
        context.state.extend(update.state.clone());
        context
            .state
            .insert(ANSWERS.to_owned(), Value::Array(entries.clone()));
        (self.inbox.park(&parked, &task.agent).await)
            .map_err(|err| AgentError::retryable(baton_nats::error_chain(&err)))?;
        update.messages.push(said);
        update
            .state
            .insert(ANSWERS.to_owned(), Value::Array(entries));
        tracing::info!(session = %task.envelope.session, entry = %parked.id, "an exec agent asks the user");
        Ok(Outcome::wait()
            .parked()
            .with_update(update)
            .problem(format!("waiting for the user's answer: {question}"))
            .into())
    }
}
