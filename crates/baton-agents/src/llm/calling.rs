//! An LLM agent's calls of MCP tools within one hop: checked against the
//! tool's schema, made with an idempotency key, and their results handed
//! back to the model and kept in the conversation.

use baton_proto::{Gate, Message, Reason, Role};
use baton_worker::{AgentError, ContextUpdate, Outcome, Task};
use serde_json::Value as Json;

use super::answer::journal_of;
use super::types::chat::{ChatMessage, ToolCall, calls_as_sent};
use super::{LlmRunner, Refusal, asked};
use crate::journal::Recorded;
use crate::tools::{CallError, McpTool, Toolbox};

/// How many times a person may sign in again for one call that its MCP
/// server keeps refusing before the session goes to the fallback.
const SIGN_INS: u32 = 3;

/// What became of a turn's tool calls.
pub(super) enum Turned {
    /// This many calls were made (or replayed from the journal).
    Called(u32),
    /// A call was invalid, and the model was told; nothing was called.
    Corrected,
    /// A call that must not be repeated may have run: the hop ends with this.
    Unknown(Box<Outcome>),
}

/// One model answer that calls tools.
pub(super) struct Turn<'a> {
    pub(super) task: &'a Task,
    pub(super) content: &'a str,
    pub(super) calls: &'a [ToolCall],
    /// The hop's step the answer was.
    pub(super) step: u32,
    /// Where a replay took the answer from (`<envelope>.<step>` of the
    /// replayed session), whose tool results it reuses too.
    pub(super) source: Option<&'a str>,
}

impl LlmRunner {
    /// Whether every call of a turn names an MCP tool.
    pub(super) fn all_mcp(&self, calls: &[ToolCall]) -> bool {
        !calls.is_empty()
            && calls
                .iter()
                .all(|call| self.offered.toolbox.find(&call.function.name).is_some())
    }

    /// Makes a turn's MCP tool calls, in order: `Some(calls made)`, or
    /// `None` when a call was invalid and the model was told (once).
    ///
    /// # Errors
    ///
    /// Fatal for a second invalid call in a row; retryable when a server
    /// cannot be reached, dies mid-call or does not answer in time.
    pub(super) async fn call_tools(
        &self,
        turn: Turn<'_>,
        messages: &mut Vec<ChatMessage>,
        update: &mut ContextUpdate,
        corrected: &mut bool,
    ) -> Result<Turned, AgentError> {
        let assistant = ChatMessage::asked(turn.content, turn.calls);
        let mut checked = Vec::new();
        for call in turn.calls {
            let Some(tool) = self.offered.toolbox.find(&call.function.name) else {
                continue;
            };
            match arguments(call).and_then(|args| match Toolbox::invalid(tool, &args) {
                Some(problem) => Err(Refusal::from(problem)),
                None => Ok(args),
            }) {
                Ok(args) => checked.push((call, tool, args)),
                Err(problem) => {
                    if *corrected {
                        return Err(AgentError::fatal(format!(
                            "the model made an invalid tool call twice: {problem}"
                        )));
                    }
                    *corrected = true;
                    // Tell the model once, then ask again; nothing was called.
                    messages.push(assistant);
                    for other in turn.calls {
                        let said = if std::ptr::eq(other, call) {
                            format!(
                                "error: {problem}. Call it again with arguments that match its schema, or answer in text."
                            )
                        } else {
                            "not called: another call of this turn was invalid".to_owned()
                        };
                        messages.push(ChatMessage::result(other.id.clone(), said));
                    }
                    return Ok(Turned::Corrected);
                }
            }
        }
        messages.push(assistant);
        let sent = calls_as_sent(turn.calls);
        update.messages.push(asked(turn.content, &sent));
        for (index, (call, tool, args)) in checked.iter().enumerate() {
            let id = call.id().unwrap_or_default().to_owned();
            let (text, is_error) = match self.journaled(&turn, index, tool, args, update).await? {
                Ok(result) => result,
                Err(unknown) => return Ok(Turned::Unknown(Box::new(unknown))),
            };
            let text = if is_error {
                format!("error: {text}")
            } else {
                text
            };
            messages.push(ChatMessage::result(id.as_str(), text.as_str()));
            let mut result = Message::new(Role::Tool, text);
            result.tool_call_id = Some(id);
            result.name = Some(tool.name.clone());
            update.messages.push(result);
        }
        Ok(Turned::Called(
            u32::try_from(checked.len()).unwrap_or(u32::MAX),
        ))
    }

    /// Call `index` of a turn, through the journal: its recorded result;
    /// else the call, recorded as started before it is made and with its
    /// result after. A call started but never recorded is made again, with
    /// the same idempotency key, only when its tool's class allows it; else
    /// `Err` holds the hop's end: the envelope parked in the inbox for a
    /// person to say whether it happened (`tool_outcome_unknown`). A tool
    /// that needs approval parks it likewise (`approval_required`) until a
    /// person approves these exact arguments.
    pub(super) async fn journaled(
        &self,
        turn: &Turn<'_>,
        index: usize,
        tool: &McpTool,
        args: &Json,
        update: &ContextUpdate,
    ) -> Result<Result<(String, bool), Outcome>, AgentError> {
        let journal = journal_of(turn.task);
        let records = &self.answers.journal;
        let wait = |reason, label: String, at| Parking {
            turn,
            index,
            tool: &tool.name,
            args,
            reason,
            label,
            at,
            authorize: None,
        };
        match records.call(journal, turn.step, index).await? {
            Recorded::Result(text, is_error) => return Ok(Ok((text, is_error))),
            Recorded::Started { revision, at } if !tool.class.repeatable() => {
                if let Some(failed) = records
                    .decision(journal, turn.step, index, "failed")
                    .await?
                {
                    return Err(fail_decided(tool, failed));
                }
                let parking = wait(
                    Reason::ToolOutcomeUnknown,
                    format!("unknown/{revision}"),
                    at,
                );
                return self.park(parking, update).await.map(Err);
            }
            Recorded::Started { .. } => {
                tracing::warn!(tool = %tool.name, class = tool.class.as_str(), "a call whose outcome is unknown is made again, with the same idempotency key");
            }
            Recorded::Nothing => {
                let reused = match self.replayed_result(turn, index).await? {
                    Some(result) => Some(result),
                    None => self.evaluated(turn, tool, args).await?,
                };
                if let Some((text, is_error)) = reused {
                    records
                        .record_result(journal, turn.step, index, &text, is_error)
                        .await?;
                    self.index_called(turn, index, tool, args).await?;
                    return Ok(Ok((text, is_error)));
                }
                if tool.approve {
                    let digest = Gate::digest_of(&tool.name, &args.to_string());
                    let approved = records
                        .decision(journal, turn.step, index, "approved")
                        .await?
                        .is_some_and(|entry| entry.digest.as_deref() == Some(digest.as_str()));
                    if !approved {
                        let parking = wait(
                            Reason::ApprovalRequired,
                            format!("approval/{digest}"),
                            baton_proto::now_ms(),
                        );
                        return self.park(parking, update).await.map(Err);
                    }
                }
                records.record_start(journal, turn.step, index).await?;
            }
        }
        let refused = wait(Reason::AuthorizationRequired, String::new(), 0);
        self.make(refused, tool, update).await
    }

    /// Makes the call `refused` names, whose start is recorded, and records
    /// its result; a call its server refused for the sign-in did not run,
    /// and waits for a person to sign in again instead (as `refused`).
    async fn make(
        &self,
        refused: Parking<'_>,
        tool: &McpTool,
        update: &ContextUpdate,
    ) -> Result<Result<(String, bool), Outcome>, AgentError> {
        let (turn, index, args) = (refused.turn, refused.index, refused.args);
        let journal = journal_of(turn.task);
        let records = &self.answers.journal;
        let key = format!("{journal}/{}/{index}", turn.step);
        let answers = if tool.asks {
            self.answers_for(journal, turn.step, index).await?
        } else {
            Vec::new()
        };
        let made = (self.call_one(tool, (args.clone(), &key), &answers, &turn.task.progress)).await;
        let called = match made {
            Ok(called) => called,
            Err(CallError::Asked(question)) => {
                // Cancelled at its first question, the call did not act
                // (MCP servers ask before they act): made again with the
                // answer. Asked again after an answer, it may have acted
                // meanwhile: a call that must not be repeated keeps its
                // start, and a person says whether it acted before it is
                // made again.
                if question.after_answers == 0 || tool.class.repeatable() {
                    records.clear_start(journal, turn.step, index).await?;
                }
                return (self.wait_for_answer(refused, question, update).await).map(Err);
            }
            Err(CallError::Authorize(authorize)) => {
                // Refused before it ran: no start stays on record.
                records.clear_start(journal, turn.step, index).await?;
                return self
                    .wait_for_sign_in(refused, authorize, update)
                    .await
                    .map(Err);
            }
            Err(err) => return Err(AgentError::retryable(err.to_string())),
        };
        records
            .record_result(journal, turn.step, index, &called.text, called.is_error)
            .await?;
        self.index_called(turn, index, tool, args).await?;
        Ok(Ok((called.text, called.is_error)))
    }

    /// A call whose MCP server refused the kept sign-in waits for a person
    /// to sign in again (`baton inbox authorize`), under a label that
    /// counts the sign-ins this call had, so a redelivered hop parks it
    /// under the same id and a later refusal under a new one. After
    /// [`SIGN_INS`] of them, the server still refusing, the session goes to
    /// the fallback instead.
    async fn wait_for_sign_in(
        &self,
        mut parking: Parking<'_>,
        authorize: baton_proto::Authorize,
        update: &ContextUpdate,
    ) -> Result<Outcome, AgentError> {
        let journal = journal_of(parking.turn.task);
        let signed = (self.answers.journal)
            .decision(journal, parking.turn.step, parking.index, "authorized")
            .await?
            .and_then(|entry| entry.text)
            .and_then(|count| count.parse::<u32>().ok())
            .unwrap_or(0);
        if signed >= SIGN_INS {
            return Ok(Outcome::fallback(Reason::AuthorizationRequired)
                .with_update(update.clone())
                .problem(format!(
                    "{} still refused {} after {signed} new sign-ins: {}",
                    authorize.server, parking.tool, authorize.why
                ))
                .into());
        }
        parking.label = format!("authorize/{signed}");
        parking.at = baton_proto::now_ms();
        parking.authorize = Some(authorize);
        self.park(parking, update).await
    }

    /// Parks the hop's envelope in the inbox with the call waiting for a
    /// person, and ends the hop waiting, with what it said so far.
    pub(super) async fn park(
        &self,
        parking: Parking<'_>,
        update: &ContextUpdate,
    ) -> Result<Outcome, AgentError> {
        let Parking {
            turn,
            index,
            tool,
            args,
            reason,
            label,
            at,
            authorize,
        } = parking;
        crate::evaluating::asks_no_person(turn.task, &reason, &format!("{tool} {args}"))?;
        let inbox = self.inbox.as_ref().ok_or_else(|| {
            AgentError::fatal(format!(
                "{tool} must wait for a person, and this agent has no inbox"
            ))
        })?;
        let arguments = args.to_string();
        let gate = Gate {
            digest: Gate::digest_of(tool, &arguments),
            reason: reason.clone(),
            tool: tool.to_owned(),
            arguments,
            at,
            journal: journal_of(turn.task),
            step: turn.step,
            call: u32::try_from(index).unwrap_or(u32::MAX),
            authorize: authorize.clone(),
            extra: baton_proto::Map::new(),
        };
        let mut parked = turn.task.envelope.clone();
        parked.id = gate.entry_id(&label);
        parked.to = Some(turn.task.agent.clone());
        parked.gate = Some(gate);
        inbox
            .park(&parked, &turn.task.agent)
            .await
            .map_err(|err| AgentError::retryable(baton_nats::error_chain(&err)))?;
        let entry = parked.id;
        let problem = waiting_problem(&reason, tool, args, entry, authorize.as_ref());
        let counter = match reason {
            Reason::ApprovalRequired => Some(&self.meters.approvals),
            Reason::InputRequired | Reason::AuthorizationRequired => None,
            _ => Some(&self.meters.in_doubt),
        };
        if let Some(counter) = counter {
            counter.add(
                1,
                &[
                    opentelemetry::KeyValue::new("tool", tool.to_owned()),
                    opentelemetry::KeyValue::new("decision", "waiting"),
                ],
            );
        }
        tracing::info!(session = %turn.task.envelope.session, %tool, %reason, %entry, "a tool call waits for a person");
        Ok(Outcome::wait()
            .parked()
            .with_update(update.clone())
            .problem(problem)
            .into())
    }

    /// One call, in an `execute_tool {tool}` span.
    async fn call_one(
        &self,
        tool: &McpTool,
        (arguments, key): (Json, &str),
        answers: &[String],
        progress: &baton_worker::Progress,
    ) -> Result<crate::tools::Called, CallError> {
        use tracing::Instrument as _;
        let span = tracing::info_span!(
            "execute_tool",
            otel.name = %format_args!("execute_tool {}", tool.name),
            otel.kind = "internal",
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %tool.name,
            gen_ai.tool.call.id = %key,
            gen_ai.conversation.id = baton_worker::conversation_id(),
        );
        let started = std::time::Instant::now();
        let called = self
            .offered
            .toolbox
            .call(tool, (arguments, key), answers)
            .instrument(span)
            .await;
        let outcome = match &called {
            Ok(called) if called.is_error => "error",
            Ok(_) => "ok",
            Err(CallError::Asked(_)) => "asked",
            Err(_) => "failed",
        };
        let labels = [
            opentelemetry::KeyValue::new("tool", tool.name.clone()),
            opentelemetry::KeyValue::new("class", tool.class.as_str()),
            opentelemetry::KeyValue::new("outcome", outcome),
        ];
        self.meters.tool_calls.add(1, &labels);
        let took = started.elapsed();
        self.meters.tool_seconds.record(took.as_secs_f64(), &labels);
        progress
            .tool_called(baton_worker::ToolCall {
                tool: &tool.name,
                call: key,
                outcome,
                took,
            })
            .await;
        called
    }

    /// The hop used up `max_steps`: the session goes to the fallback with
    /// reason `max_steps`, with what was said so far.
    pub(super) fn out_of_steps(&self, update: ContextUpdate) -> Outcome {
        Outcome::fallback(Reason::MaxSteps)
            .with_update(update)
            .problem(format!(
                "the model made {} model and tool calls in one hop without an answer (max_steps)",
                self.settings.max_steps
            ))
            .into()
    }
}

/// A call that waits for a person, as [`LlmRunner::park`] parks it.
pub(super) struct Parking<'a> {
    pub(super) turn: &'a Turn<'a>,
    pub(super) index: usize,
    /// The tool, as the model named it.
    pub(super) tool: &'a str,
    pub(super) args: &'a Json,
    pub(super) reason: Reason,
    /// What tells this wait from another of the same call.
    pub(super) label: String,
    /// When the call was made or asked for, unix ms.
    pub(super) at: u64,
    /// What a call refused by its MCP server's sign-in needs.
    pub(super) authorize: Option<baton_proto::Authorize>,
}

/// What a hop that parks a call for `reason` says of it: why it waits,
/// and the command that settles it (`entry`).
fn waiting_problem(
    reason: &Reason,
    tool: &str,
    args: &Json,
    entry: uuid::Uuid,
    authorize: Option<&baton_proto::Authorize>,
) -> String {
    match reason {
        Reason::ApprovalRequired => format!(
            "{tool} with {args} waits for a person's approval: baton inbox approve {entry} (or deny {entry})"
        ),
        Reason::InputRequired => format!("waiting for the user's answer ({tool} {args})"),
        Reason::AuthorizationRequired => format!(
            "{tool} waits for a new sign-in to {}: {}: baton inbox authorize {entry}",
            authorize.map_or("its MCP server", |a| a.server.as_str()),
            authorize.map_or("", |a| a.why.as_str()),
        ),
        _ => format!(
            "{tool} was called with {args} and may or may not have run (the worker stopped before its result was recorded); it is not repeatable, so a person must say whether it happened: baton inbox resolve {entry} --happened | --not-happened | --fail"
        ),
    }
}

/// The hop's end when a person chose to fail the session over a call
/// whose outcome was unknown.
fn fail_decided(tool: &McpTool, failed: baton_proto::JournalEntry) -> AgentError {
    let by = failed.by.unwrap_or_else(|| "a person".to_owned());
    let note = failed
        .text
        .map(|note| format!(": {note}"))
        .unwrap_or_default();
    AgentError::fail(
        Reason::ToolOutcomeUnknown,
        format!(
            "{} may or may not have run, and {by} chose to fail the session{note}",
            tool.name
        ),
    )
}

/// A call's arguments as a JSON object, or what is wrong with them.
fn arguments(call: &ToolCall) -> Result<Json, Refusal> {
    match call.parsed_arguments() {
        Ok(args) if args.is_object() => Ok(args),
        Ok(_) => Err("the arguments are not a JSON object".into()),
        Err(err) => Err(format!("the arguments are not JSON: {err}").into()),
    }
}
