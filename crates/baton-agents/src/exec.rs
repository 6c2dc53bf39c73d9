//! Exec agents: any program is an agent.
//!
//! The program gets the envelope as JSON on stdin and `BATON_AGENT`,
//! `BATON_INSTANCE`, `BATON_SESSION`, `BATON_ENVELOPE` and `BATON_ATTEMPT` in
//! its environment. It prints one [`ExecReply`] JSON object on stdout and
//! exits 0. Exit code 75 (`EX_TEMPFAIL`) is a retryable failure, any other
//! non-zero code a fatal one. Each stderr line is logged with the session id.
//! When the spec's timeout passes the process is killed and the attempt
//! counts as a retryable failure.
//!
//! With `exec.mode = "persistent"` the program runs once per worker and
//! exchanges lines of JSON instead (see [`persistent`]).

use std::path::PathBuf;
use std::process::Stdio;

use baton_proto::{ExecAction, ExecReply, Message, Reason, Role, Step, Value};
use baton_worker::{AgentError, AgentName, ContextUpdate, Need, Outcome, Results, Target, Task};
use tracing::Instrument as _;

use crate::spec::{ExecMode, ExecSpec};

mod asking;
pub(crate) mod calls;
mod delegation;
mod per_task;
mod persistent;

use delegation::delegation;

pub(crate) use asking::Asking;
pub(crate) use calls::Machinery;

/// The exit code that asks for a retry.
pub const EXIT_RETRY: i32 = 75;

/// Largest reply read from a program's stdout.
const MAX_REPLY: u64 = 8 * 1024 * 1024;

/// Stderr lines kept for the failure detail.
const STDERR_TAIL: usize = 5;

/// The program of an exec agent: how to start it.
#[derive(Debug, Clone)]
pub(crate) struct Program {
    command: Vec<String>,
    env: Vec<(String, String)>,
    cwd: PathBuf,
}

impl Program {
    /// The program's name, for messages.
    pub(crate) fn name(&self) -> &str {
        &self.command[0]
    }

    /// Starts the program with piped stdio, the spec's environment,
    /// `BATON_AGENT`, `BATON_INSTANCE` and `vars`.
    pub(crate) fn spawn(
        &self,
        task: &Task,
        vars: &[(&str, String)],
    ) -> Result<tokio::process::Child, AgentError> {
        tokio::process::Command::new(self.name())
            .args(&self.command[1..])
            .current_dir(&self.cwd)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("BATON_AGENT", task.agent.as_str())
            .env("BATON_INSTANCE", &task.instance)
            .envs(vars.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| {
                AgentError::fatal(format!(
                    "cannot start {:?} in {}: {err} (check [exec] command and cwd in the spec)",
                    self.name(),
                    self.cwd.display()
                ))
            })
    }
}

/// Runs a program per task, or (`exec.mode = "persistent"`) one program
/// for all the worker's tasks.
#[derive(Debug, Clone)]
pub struct ExecRunner {
    program: Program,
    persistent: Option<std::sync::Arc<persistent::Persistent>>,
    /// Where the program's questions to the user wait (a reply's `ask`).
    asking: Option<std::sync::Arc<Asking>>,
    /// The model, tools and hop journal a persistent program's calls use.
    machinery: Option<Machinery>,
}

impl ExecRunner {
    /// The runner of `spec`, with relative paths resolved against `dir`.
    #[must_use]
    pub fn new(spec: &ExecSpec, dir: &std::path::Path) -> Self {
        let cwd = match &spec.cwd {
            Some(cwd) if cwd.is_absolute() => cwd.clone(),
            Some(cwd) => dir.join(cwd),
            None => dir.to_owned(),
        };
        let program = Program {
            command: spec.command.clone(),
            env: spec.env.clone().into_iter().collect(),
            cwd,
        };
        let persistent = (spec.mode == ExecMode::Persistent)
            .then(|| std::sync::Arc::new(persistent::Persistent::new(program.clone())));
        Self {
            program,
            persistent,
            asking: None,
            machinery: None,
        }
    }

    /// The runner whose persistent program may call the worker: its
    /// model and tools, steps in the hop journal.
    #[must_use]
    pub(crate) fn with_machinery(mut self, machinery: Option<Machinery>) -> Self {
        self.machinery = machinery;
        self
    }

    /// The runner whose program may ask the user (a reply's `ask`), its
    /// questions waiting in `asking`'s inbox.
    #[must_use]
    pub(crate) fn with_asking(mut self, asking: Option<Asking>) -> Self {
        self.asking = asking.map(std::sync::Arc::new);
        self
    }

    /// Runs the program on `task` and reads its decision.
    ///
    /// # Errors
    ///
    /// Retryable for exit code 75 or a signal; fatal for other exit codes, a
    /// program that cannot start, or a reply that is not an [`ExecReply`].
    pub async fn run(&self, task: &Task) -> Result<Outcome, AgentError> {
        self.invoke(task, None).await
    }

    /// Runs the program again after a delegation, with `BATON_RESUME=1` and
    /// the children's results in `context.state.results` (in child order:
    /// `{index, agent, status, output, detail}`).
    ///
    /// # Errors
    ///
    /// As for [`ExecRunner::run`].
    pub async fn resume(&self, task: &Task, results: &Results) -> Result<Outcome, AgentError> {
        let mut task = task.clone();
        let text = |s: Option<&String>| s.map_or(Value::Nil, |s| Value::from(s.as_str()));
        let listed = results
            .results
            .iter()
            .map(|result| {
                Value::Map(vec![
                    (Value::from("index"), Value::from(result.index)),
                    (Value::from("agent"), text(result.agent.as_ref())),
                    (Value::from("tag"), text(result.tag.as_ref())),
                    (Value::from("status"), Value::from(result.status.as_str())),
                    (Value::from("output"), result.output.clone()),
                    (Value::from("detail"), text(result.detail.as_ref())),
                ])
            })
            .collect();
        task.envelope
            .context
            .state
            .insert("results".to_owned(), Value::Array(listed));
        self.invoke(&task, Some(results)).await
    }

    /// One run of the program, in an `exec {program}` span with its exit
    /// code, marked failed (with `error.type`) when the run fails.
    async fn invoke(&self, task: &Task, results: Option<&Results>) -> Result<Outcome, AgentError> {
        let resume = results.is_some();
        let answered = match &self.asking {
            Some(asking) => asking.answered(task).await?,
            None => None,
        };
        let (run, mut update) = match &answered {
            Some(answered) => (&answered.task, answered.update.clone()),
            None => (task, ContextUpdate::default()),
        };
        let hop = match (&self.persistent, &self.machinery) {
            (Some(_), Some(machinery)) => Some(std::sync::Arc::new(calls::Hop::new(
                (task, run),
                machinery.clone(),
                self.asking.clone(),
                results,
                update.clone(),
            ))),
            _ => None,
        };
        let reply = match self.reply(run, resume, hop.clone()).await? {
            persistent::Finished::Replied(reply) => *reply,
            persistent::Finished::Ended(outcome) => return Ok(*outcome),
        };
        if let Some(hop) = &hop {
            update = hop.said();
        }
        let question = reply.ask.clone().map(|ask| (ask, reply.schema.clone()));
        let mut outcome = decision(reply, run)?;
        let said = std::mem::take(outcome.update_mut());
        update.messages.extend(said.messages);
        update.variables.extend(said.variables);
        update.state.extend(said.state);
        update.trace.extend(said.trace);
        update.problem = said.problem.or(update.problem);
        update.hand_back |= said.hand_back;
        match (question, &self.asking) {
            (Some((question, schema)), Some(asking)) => {
                asking.ask(task, (question, schema), update).await
            }
            (Some(_), None) => Err(AgentError::fatal(
                "the program asked the user (`ask`), and this worker cannot: it needs the inbox and the hop journal (grant them with `baton permissions worker NAME --human`)",
            )),
            (None, _) => {
                *outcome.update_mut() = update;
                Ok(outcome)
            }
        }
    }

    /// One run of the program: its reply.
    async fn reply(
        &self,
        task: &Task,
        resume: bool,
        hop: Option<std::sync::Arc<calls::Hop>>,
    ) -> Result<persistent::Finished, AgentError> {
        let program = self.program.name();
        let span = tracing::info_span!(
            "exec",
            otel.name = %format_args!("exec {program}"),
            otel.status_code = tracing::field::Empty,
            baton.exec.program = %program,
            baton.exec.resume = resume,
            process.exit.code = tracing::field::Empty,
            gen_ai.conversation.id = baton_worker::conversation_id(),
            error.type = tracing::field::Empty,
        );
        let ran = match &self.persistent {
            Some(persistent) => {
                let asked = persistent
                    .request(task, resume, hop)
                    .instrument(span.clone());
                asked.await
            }
            None => (self
                .run_program(task, resume, &span)
                .instrument(span.clone()))
            .await
            .map(|reply| persistent::Finished::Replied(Box::new(reply))),
        };
        if let Err(err) = &ran {
            span.record("otel.status_code", "ERROR");
            let kind = match err {
                AgentError::Fatal(_) => "fatal",
                AgentError::Reject(_) => "rejected",
                _ => "retryable",
            };
            span.record("error.type", kind);
        }
        ran
    }
}

fn json_to_value(json: serde_json::Value) -> Value {
    rmpv::ext::to_value(json).unwrap_or(Value::Nil)
}

/// An [`ExecReply`] as an outcome: no `action` answers and leaves the next
/// step to the routing rules.
pub(crate) fn decision(reply: ExecReply, task: &Task) -> Result<Outcome, AgentError> {
    let update = context_update(&reply, task);
    if reply.action == Some(ExecAction::Pause) && !task.envelope.context.state.contains_key("team")
    {
        return Err(AgentError::fatal(
            "action \"pause\" is for a team's coordinator (a spec with a [team] section)",
        ));
    }
    if reply.schema.is_some() && reply.ask.is_none() {
        return Err(AgentError::fatal(
            "`schema` goes with `ask`: it is the JSON Schema of the answer asked for",
        ));
    }
    if reply.ask.is_some() && reply.action.is_some() {
        return Err(AgentError::fatal(
            "`ask` goes without an `action`: the program runs again with the answer",
        ));
    }
    let mut outcome = action(reply)?;
    *outcome.update_mut() = update;
    Ok(outcome)
}

/// What the reply does to the context: messages, variables, state, trace, problem.
fn context_update(reply: &ExecReply, task: &Task) -> ContextUpdate {
    let mut update = ContextUpdate {
        hand_back: reply.hand_back,
        ..ContextUpdate::default()
    };
    if let Some(text) = &reply.say {
        update
            .messages
            .push(Message::new(Role::Agent, text.clone()));
    }
    for message in &reply.messages {
        let role = Role::parse(message.role.as_deref().unwrap_or("agent"));
        let mut entry = Message::new(role, message.content.clone());
        entry.name.clone_from(&message.name);
        update.messages.push(entry);
    }
    update.variables = reply
        .variables
        .iter()
        .map(|(k, v)| (k.clone(), json_to_value(v.clone())))
        .collect();
    update.state = reply
        .state
        .iter()
        .map(|(k, v)| (k.clone(), json_to_value(v.clone())))
        .collect();
    for step in &reply.trace {
        let mut entry = Step::new(
            task.agent.clone(),
            step.action.clone(),
            step.outcome.clone(),
        )
        .with_reasoning(step.reasoning.clone());
        if let Some(details) = &step.details {
            entry.details = json_to_value(details.clone());
        }
        update.trace.push(entry);
    }
    update.problem.clone_from(&reply.problem);
    update
}

/// The reply's `action` as an outcome, without its context update.
fn action(reply: ExecReply) -> Result<Outcome, AgentError> {
    let output = reply.output.clone().map_or(Value::Nil, json_to_value);
    let reason = |default: Reason| reply.reason.as_deref().map_or(default, Reason::parse);
    let need = || Need {
        requires: reply.requires.clone(),
        domains: reply.domains.clone(),
        min_tier: reply.min_tier,
    };
    let name = |to: &str| {
        AgentName::new(to).map_err(|err| {
            AgentError::fatal(format!("the program's reply names no agent type: {err}"))
        })
    };
    let outcome: Outcome = match reply.action {
        None => Outcome::answer(output).into(),
        Some(ExecAction::Handoff) => {
            let target: Target = match (&reply.to, reply.requires.is_empty()) {
                (Some(to), true) => name(to)?.into(),
                (None, false) => need().into(),
                _ => {
                    return Err(AgentError::fatal(
                        "action \"handoff\" needs exactly one of `to` and `requires`",
                    ));
                }
            };
            let handoff = Outcome::handoff(target, reason(Reason::OutOfScope));
            match reply.suggested_next_action {
                Some(advice) => handoff.next_action(advice).into(),
                None => handoff.into(),
            }
        }
        Some(ExecAction::Terminate) => Outcome::complete(output).into(),
        Some(ExecAction::Escalate) => {
            Outcome::escalate_to(need(), reason(Reason::ComplexityExceeded)).into()
        }
        Some(ExecAction::Fallback) => Outcome::fallback(reason(Reason::ComplexityExceeded)).into(),
        Some(ExecAction::Reject) => {
            return Err(AgentError::reject(
                reply.error.unwrap_or_else(|| "declined".to_owned()),
            ));
        }
        Some(ExecAction::Delegate) => delegation(&reply)?,
        Some(ExecAction::Pause) => Outcome::wait().into(),
        Some(ExecAction::Fail) => {
            let detail = reply.error.unwrap_or_else(|| "the agent failed".to_owned());
            return Err(if reply.retryable.unwrap_or(false) {
                AgentError::retryable(detail)
            } else {
                AgentError::fatal(detail)
            });
        }
    };
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use baton_worker::{Answer, Handoff};

    use super::*;

    fn task() -> Task {
        Task {
            envelope: baton_proto::Envelope::task("hello").into(),
            attempt: 2,
            agent: AgentName::new("engineer").unwrap(),
            instance: "i1".into(),
            progress: baton_worker::Progress::default(),
            registry: None,
        }
    }

    fn reply(json: &str) -> ExecReply {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_schema_goes_only_with_a_question() {
        let err = decision(reply(r#"{"schema": {"type": "object"}}"#), &task()).unwrap_err();
        assert!(
            err.to_string().contains("`schema` goes with `ask`"),
            "{err}"
        );
        let asked = reply(r#"{"ask": "Your email?", "schema": {"type": "object"}}"#);
        assert_eq!(asked.schema, Some(serde_json::json!({"type": "object"})));
        assert!(decision(asked, &task()).is_ok());
    }

    #[test]
    fn an_answer_without_action_is_left_to_the_rules() {
        let decision = decision(
            reply(
                r#"{"output": {"plan": [1, 2]}, "say": "here is the plan", "variables": {"n": 1}}"#,
            ),
            &task(),
        )
        .unwrap();
        let Outcome::Answer(Answer { output, update, .. }) = decision else {
            panic!("{decision:?}")
        };
        assert_eq!(output.as_map().unwrap()[0].0.as_str(), Some("plan"));
        assert_eq!(update.messages[0].content, "here is the plan");
        assert_eq!(update.variables.get("n"), Some(&Value::from(1)));
    }

    #[test]
    fn actions_map_to_outcomes_and_errors() {
        let Outcome::Handoff(Handoff { target, reason, suggested_next_action, .. }) = decision(
            reply(r#"{"action": "handoff", "to": "executor", "reason": "tool_failure", "suggested_next_action": "run it"}"#),
            &task(),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(target, Target::Agent(AgentName::new("executor").unwrap()));
        assert_eq!(reason, Reason::ToolFailure);
        assert_eq!(suggested_next_action.as_deref(), Some("run it"));

        let Outcome::Handoff(Handoff { target, .. }) = decision(
            reply(r#"{"action": "handoff", "requires": ["refunds"]}"#),
            &task(),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            target,
            Target::Capabilities(Need::capabilities(["refunds"]))
        );

        assert!(matches!(
            decision(
                reply(r#"{"action": "terminate", "output": "bye"}"#),
                &task()
            )
            .unwrap(),
            Outcome::Complete(_)
        ));
        assert_eq!(
            decision(
                reply(r#"{"action": "fail", "error": "db down", "retryable": true}"#),
                &task()
            )
            .unwrap_err(),
            AgentError::retryable("db down")
        );
        assert_eq!(
            decision(
                reply(r#"{"action": "fail", "error": "bad input"}"#),
                &task()
            )
            .unwrap_err(),
            AgentError::fatal("bad input")
        );
        assert_eq!(
            decision(reply(r#"{"action": "reject", "error": "busy"}"#), &task()).unwrap_err(),
            AgentError::reject("busy")
        );
        assert!(matches!(
            decision(reply(r#"{"action": "handoff"}"#), &task()).unwrap_err(),
            AgentError::Fatal(detail) if detail.contains("exactly one of `to` and `requires`")
        ));
        assert!(matches!(
            decision(reply(r#"{"action": "handoff", "to": "Not.Valid"}"#), &task()).unwrap_err(),
            AgentError::Fatal(detail) if detail.contains("Not.Valid")
        ));
    }

    #[test]
    fn unknown_reply_fields_are_refused() {
        assert!(serde_json::from_str::<ExecReply>(r#"{"acton": "handoff"}"#).is_err());
    }
}
