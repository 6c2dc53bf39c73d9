//! The hop's turns: the model is asked, and its answer is the hop's answer,
//! a handoff, a delegation, MCP tool calls made within the hop (`calling`),
//! a question to the user (`asking`), an answer in A2A's terms (`replying`),
//! or an invalid call it is told of once.

use baton_proto::{Message, Reason, Role, Value};
use baton_worker::{AgentError, ChildTask, ContextUpdate, DelegateMode, Outcome, Task};
use serde::Deserialize;
use serde_json::Value as Json;

use super::answer::budget::out_of_budget;
use super::answer::{Asking, Reply};
use super::calling::{self, Turn};
use super::types::chat::{ChatMessage, ToolCall, calls_as_sent, lenient, read_object};
use super::types::offer::{Builtins, Tool, ToolSource};
use super::{LlmRunner, Refusal, asked, asking, replying};

/// The arguments of a delegate tool's call.
#[derive(Deserialize)]
struct Delegated {
    task: String,
}

/// The arguments of a handoff, condition or `hand_back` call.
#[derive(Default, Deserialize)]
struct Transferred {
    #[serde(default, deserialize_with = "lenient")]
    reason: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    answer: Option<String>,
}

impl LlmRunner {
    /// The hop's turns over `messages`, until one ends the hop.
    pub(super) async fn converse(
        &self,
        task: &Task,
        mut messages: Vec<ChatMessage>,
    ) -> Result<Outcome, AgentError> {
        let mut update = ContextUpdate::default();
        let mut corrected = false;
        let mut steps = 0;
        loop {
            steps += 1;
            if steps > self.settings.max_steps {
                return Ok(self.out_of_steps(update));
            }
            let answered = match self.ask_model(task, steps, &messages).await? {
                Reply::Answered(answered) => answered,
                Reply::Overrun(overrun) => return Ok(out_of_budget(overrun, update)),
            };
            let message = answered.response.message().value;
            let content = message.content.unwrap_or_default();
            let calls = message.tool_calls;
            let Some(call) = calls.first() else {
                return Ok(answered_in_text(content, update));
            };
            let turn = Turn {
                task,
                content: &content,
                calls: &calls,
                step: steps,
                source: answered.source.as_deref(),
            };
            if self.asks_user(task) && asking::is_ask(&calls) {
                match self.ask(&turn, &mut messages, &mut update).await? {
                    Some(waiting) => return Ok(waiting),
                    None => continue,
                }
            }
            if self.replies_a2a(task) && replying::is_reply(&calls) {
                match replying::reply(&turn, &mut update) {
                    Ok(replied) => return Ok(replied),
                    Err(problem) => {
                        self.correct_once(&mut corrected, &mut messages, &turn, &problem)?;
                        continue;
                    }
                }
            }
            if self.all_mcp(&calls) {
                match self
                    .call_tools(turn, &mut messages, &mut update, &mut corrected)
                    .await?
                {
                    calling::Turned::Called(calls_made) => {
                        steps += calls_made;
                        continue;
                    }
                    calling::Turned::Corrected => continue,
                    calling::Turned::Unknown(outcome) => return Ok(*outcome),
                }
            }
            if let Some(children) = self.delegations(&calls) {
                // Every call asks a delegate: one parallel delegation, one child per call.
                update
                    .messages
                    .push(asked(&content, &calls_as_sent(&calls)));
                let delegation = Outcome::delegate(children, DelegateMode::Parallel);
                return Ok(delegation.with_update(update).into());
            }
            let (tool, arguments) = match self.checked_call(call) {
                Ok(checked) => checked,
                Err(problem) => {
                    self.correct_once(&mut corrected, &mut messages, &turn, &problem)?;
                    continue;
                }
            };
            return self.transfer(tool, &arguments, call, content, update);
        }
    }

    /// The model's answer at `step`, offered the agent's tools.
    async fn ask_model(
        &self,
        task: &Task,
        step: u32,
        messages: &[ChatMessage],
    ) -> Result<Reply, AgentError> {
        let asking = Asking::Turn {
            offered: &self.offered,
            builtins: Builtins {
                ask_user: self.asks_user(task),
                a2a_reply: self.replies_a2a(task),
            },
        };
        self.answers.answer(task, (step, asking), messages).await
    }

    /// Tells the model what is wrong with the `turn`'s first call, to ask
    /// again, unless it was told once already in this hop: then the hop
    /// fails.
    fn correct_once(
        &self,
        corrected: &mut bool,
        messages: &mut Vec<ChatMessage>,
        turn: &Turn<'_>,
        problem: &Refusal,
    ) -> Result<(), AgentError> {
        if std::mem::replace(corrected, true) {
            return Err(AgentError::fatal(format!(
                "the model made an invalid tool call twice: {problem}"
            )));
        }
        self.correct(messages, turn.content, &turn.calls[0], problem);
        Ok(())
    }

    /// Tells the model what is wrong with its `call`, to ask again.
    fn correct(
        &self,
        messages: &mut Vec<ChatMessage>,
        content: &str,
        call: &ToolCall,
        problem: &Refusal,
    ) {
        let id = call.id().unwrap_or("call");
        messages.push(ChatMessage::asked(content, std::slice::from_ref(call)));
        let names = self.offered.names();
        messages.push(ChatMessage::result(
            id,
            format!("error: {problem}. Call one of {names:?}, or answer in text."),
        ));
    }

    /// The outcome of a checked handoff or condition `call` of `tool`: the
    /// call and its result are recorded in the conversation.
    fn transfer(
        &self,
        tool: &Tool,
        arguments: &Json,
        call: &ToolCall,
        content: String,
        mut update: ContextUpdate,
    ) -> Result<Outcome, AgentError> {
        let name = &call.function.name;
        let id = call.id().unwrap_or("call").to_owned();
        let sent = calls_as_sent(std::slice::from_ref(call));
        update.messages.push(asked(&content, &sent));
        let mut result = Message::new(Role::Tool, format!("transferred by {name}"));
        result.tool_call_id = Some(id);
        update.messages.push(result);
        let said: Transferred = read_object(arguments).unwrap_or_default();
        let reason = said
            .reason
            .as_deref()
            .map_or(Reason::LlmHandoff, Reason::parse);
        match tool.source {
            ToolSource::Handoff(index) => {
                let route = &self.offered.handoffs[index];
                Ok(route.take(reason, Value::from(content), update))
            }
            ToolSource::HandBack => {
                let answer = said.answer.unwrap_or(content);
                update
                    .messages
                    .push(Message::new(Role::Agent, answer.clone()));
                Ok(Outcome::answer(answer)
                    .with_update(update)
                    .hand_back()
                    .into())
            }
            ToolSource::Condition(index) => Ok(Outcome::answer(content)
                .with_update(update)
                .judged(index)
                .into()),
            // Refused with the invalid calls above; never taken as a handoff.
            ToolSource::Delegate(_) => Err(AgentError::fatal(format!(
                "the model's call of {name} cannot be a handoff"
            ))),
        }
    }

    /// The tool a (non-delegate) call names and its arguments, or what is
    /// wrong with the call, to tell the model.
    fn checked_call(&self, call: &ToolCall) -> Result<(&Tool, Json), Refusal> {
        let name = call.function.name.as_str();
        let arguments = call.function.arguments.as_deref().unwrap_or("{}");
        let parsed: Result<Json, _> = serde_json::from_str(if arguments.is_empty() {
            "{}"
        } else {
            arguments
        });
        let tool = self.offered.find(name);
        match (tool, parsed) {
            (None, _) if self.offered.toolbox.find(name).is_some() => Err(format!(
                "{name} was called beside a transfer_to_ or agent_run_ call: call tools in a turn of their own, then hand off"
            )
            .into()),
            (None, _) => Err(format!("there is no tool {name:?}").into()),
            (Some(tool), _) if matches!(tool.source, ToolSource::Delegate(_)) => Err(
                "agent_run_ calls need a `task` string, and go without transfer_to_ calls in the same turn"
                    .into(),
            ),
            (Some(_), Err(err)) => Err(format!("the arguments are not JSON: {err}").into()),
            (Some(tool), Ok(arguments)) if arguments.is_object() => Ok((tool, arguments)),
            (Some(_), Ok(_)) => Err("the arguments are not a JSON object".into()),
        }
    }

    /// The calls as child tasks, if every one is a valid delegate call.
    fn delegations(&self, calls: &[ToolCall]) -> Option<Vec<ChildTask>> {
        calls
            .iter()
            .map(|call| {
                let tool = self.offered.find(&call.function.name)?;
                let ToolSource::Delegate(index) = tool.source else {
                    return None;
                };
                let arguments: Json =
                    serde_json::from_str(call.function.arguments.as_deref()?).ok()?;
                let Delegated { task } = read_object(&arguments)?;
                let id = call.id().unwrap_or_default();
                let child = ChildTask::new(self.offered.delegates[index].target.clone(), task);
                Some(child.tag(id))
            })
            .collect()
    }
}

/// The hop's answer when the model answered in text alone (`content`, kept
/// in the conversation unless empty).
fn answered_in_text(content: String, mut update: ContextUpdate) -> Outcome {
    if !content.is_empty() {
        update
            .messages
            .push(Message::new(Role::Agent, content.clone()));
    }
    Outcome::answer(content).with_update(update).into()
}
