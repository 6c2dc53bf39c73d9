//! An LLM agent's model and tools, for a program's calls (`ctx.model`,
//! `ctx.tools`, `ctx.tool`; proto-schemas/exec-calls.md): the same answers,
//! hop journal, shared limits, budgets, streaming and spans, and the same
//! tool classes, approvals and calls whose outcome is unknown, one call at
//! a time. An exec agent whose spec has `[llm]` or `[[mcp]]` holds one.

use baton_worker::{AgentError, ContextUpdate, Outcome, Task};
use serde_json::{Value as Json, json};

use super::LlmRunner;
use super::answer::budget::out_of_budget;
use super::answer::{Asking, Reply};
use super::calling::{Parking, Turn};
use super::types::chat::ChatMessage;
use super::types::offer::function;
use crate::tools::Toolbox;

/// What a program's call came to.
#[derive(Debug)]
pub(crate) enum Made<T> {
    /// Its result.
    Done(T),
    /// The spec does not allow it (an unknown tool, arguments its schema
    /// refuses): the program is told, and may go on.
    Refused(String),
    /// The hop ends here (a budget, a call that waits for a person).
    Ended(Box<Outcome>),
}

/// Fields a program's `params` may not set: the worker writes them.
const WRITTEN: [&str; 5] = ["model", "messages", "tools", "stream", "stream_options"];

impl LlmRunner {
    /// The spec's MCP tools in OpenAI's `tools` format, named as the model
    /// of an LLM agent sees them.
    pub(crate) fn program_tools(&self) -> Vec<Json> {
        (self.offered.toolbox.tools().iter())
            .map(|tool| function(&tool.name, &tool.description, tool.schema.clone()))
            .collect()
    }

    /// The model's answer to a program's `messages` at `step` of the hop:
    /// `{message, usage, finish_reason}` of its first choice.
    pub(crate) async fn program_model(
        &self,
        task: &Task,
        (step, nth): (u32, usize),
        messages: Vec<Json>,
        (tools, params): (Option<&[Json]>, &serde_json::Map<String, Json>),
        update: &ContextUpdate,
    ) -> Result<Made<Json>, AgentError> {
        if let Some(field) = WRITTEN.iter().find(|field| params.contains_key(**field)) {
            return Ok(Made::Refused(format!(
                "ctx.model: params may not set {field:?}: the worker writes it"
            )));
        }
        if let Some(bad) = messages.iter().position(|message| !message.is_object()) {
            return Ok(Made::Refused(format!(
                "ctx.model: message {bad} is not an object such as {{\"role\": \"user\", \"content\": \"...\"}}"
            )));
        }
        let messages: Vec<ChatMessage> = messages.into_iter().map(ChatMessage::Raw).collect();
        // No tools is no `tools`: endpoints refuse an empty list.
        let tools = tools.filter(|tools| !tools.is_empty());
        let asking = Asking::Program { tools, params, nth };
        match self.answers.answer(task, (step, asking), &messages).await? {
            Reply::Answered(answered) => {
                let choice = &answered.answer["choices"][0];
                Ok(Made::Done(json!({
                    "message": choice["message"],
                    "usage": answered.answer["usage"],
                    "finish_reason": choice["finish_reason"],
                })))
            }
            Reply::Overrun(overrun) => Ok(Made::Ended(Box::new(out_of_budget(
                overrun,
                update.clone(),
            )))),
        }
    }

    /// A program's call of the tool `name` at `step` of the hop, through
    /// the journal as a model's call is: `(text, is_error)`. `source` is
    /// where a replay takes the result from (`<envelope>.<step>` of the
    /// replayed session); `update` is what the hop said so far, kept when
    /// the call waits for a person.
    pub(crate) async fn program_tool(
        &self,
        task: &Task,
        (step, source): (u32, Option<&str>),
        (name, args): (&str, &Json),
        update: &ContextUpdate,
    ) -> Result<Made<(String, bool)>, AgentError> {
        let Some(tool) = self.offered.toolbox.find(name) else {
            let known: Vec<&str> = (self.offered.toolbox.tools().iter())
                .map(|tool| tool.name.as_str())
                .collect();
            return Ok(Made::Refused(if known.is_empty() {
                format!("ctx.tool: no tool {name:?}: the spec has no [[mcp]] server")
            } else {
                format!(
                    "ctx.tool: no tool {name:?} among the spec's [[mcp]] tools: {}",
                    known.join(", ")
                )
            }));
        };
        if !args.is_object() {
            return Ok(Made::Refused(format!(
                "ctx.tool: the arguments of {name} are not a JSON object"
            )));
        }
        if let Some(problem) = Toolbox::invalid(tool, args) {
            return Ok(Made::Refused(format!("ctx.tool: {problem}")));
        }
        let turn = Turn {
            task,
            content: "",
            calls: &[],
            step,
            source,
        };
        Ok(match self.journaled(&turn, 0, tool, args, update).await? {
            Ok(result) => Made::Done(result),
            Err(waiting) => Made::Ended(Box::new(waiting)),
        })
    }

    /// A program's step `name` at `step` started and left no result, and is
    /// not idempotent: a person says whether it happened, as for a tool
    /// call whose outcome is unknown. `revision` and `at` are its start's.
    pub(crate) async fn program_step_in_doubt(
        &self,
        task: &Task,
        step: u32,
        (name, revision, at): (&str, u64, u64),
        update: &ContextUpdate,
    ) -> Result<Outcome, AgentError> {
        let turn = Turn {
            task,
            content: "",
            calls: &[],
            step,
            source: None,
        };
        let tool = format!("step:{name}");
        let args = json!({});
        let parking = Parking {
            turn: &turn,
            index: 0,
            tool: &tool,
            args: &args,
            reason: baton_proto::Reason::ToolOutcomeUnknown,
            label: format!("unknown/{revision}"),
            at,
            authorize: None,
        };
        self.park(parking, update).await
    }

    /// Whether the spec has an `[llm]` model (a program's `ctx.model`).
    pub(crate) fn has_model(&self) -> bool {
        !self.settings.model.is_empty()
    }

    /// The hop journal the model's answers and the tools' results are kept in.
    pub(crate) fn journal(&self) -> &std::sync::Arc<crate::journal::Journal> {
        &self.answers.journal
    }
}
