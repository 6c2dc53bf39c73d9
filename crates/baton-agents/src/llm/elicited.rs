//! An MCP server's question during a call, answered by a person
//! (`[[mcp]] elicitation = "ask"`), as `ask_user` is: the call was
//! cancelled at the question, and the hop parks in the inbox (reason
//! `input_required`); in a conversation, the user's next message answers
//! it. The answer is kept in the hop journal under a call number of its
//! own ([`answer_slot`]), apart from the call's result; the resumed hop
//! makes the call again, and the repeated question is answered from there,
//! so a person is never asked the same question twice.

use baton_proto::Reason;
use baton_worker::{AgentError, ContextUpdate, Outcome};
use serde_json::json;

use super::LlmRunner;
use super::calling::Parking;
use crate::journal::Recorded;
use baton_mcp_client::answering::{Question, hint};

/// The first call number that holds answers: answer `n` to the questions
/// of call `index` is call `ANSWERS_FROM + index × PER_CALL + n` of the
/// step.
const ANSWERS_FROM: u32 = 1_000_000;

/// How many answers one call may take (re-asked ones included).
const PER_CALL: u32 = 1_000;

/// Where answer `n` to the questions during call `index` is journaled.
fn answer_slot(index: usize, n: u32) -> u32 {
    let index = u32::try_from(index).unwrap_or(u32::MAX);
    ANSWERS_FROM
        .saturating_add(index.saturating_mul(PER_CALL))
        .saturating_add(n)
}

impl LlmRunner {
    /// The answers on record for the questions during call `index` of
    /// `step`, in the order asked.
    pub(super) async fn answers_for(
        &self,
        journal: uuid::Uuid,
        step: u32,
        index: usize,
    ) -> Result<Vec<String>, AgentError> {
        let mut answers = Vec::new();
        for n in 0..PER_CALL {
            let slot = usize::try_from(answer_slot(index, n)).unwrap_or(usize::MAX);
            match self.answers.journal.call(journal, step, slot).await? {
                Recorded::Result(text, _) => answers.push(text),
                _ => break,
            }
        }
        Ok(answers)
    }

    /// Parks the call `waiting` names until a person answers `question`:
    /// the hop's end, waiting for input, having said the question (with how
    /// to answer it).
    pub(super) async fn wait_for_answer(
        &self,
        waiting: Parking<'_>,
        question: Question,
        update: &ContextUpdate,
    ) -> Result<Outcome, AgentError> {
        if question.n + 1 >= PER_CALL {
            return Err(AgentError::fatal(format!(
                "{} asked more than {PER_CALL} questions in one call",
                waiting.tool
            )));
        }
        let asked = match &question.problem {
            Some(problem) => format!(
                "That answer could not be used ({problem}). {}",
                question.message
            ),
            None => question.message.clone(),
        };
        let said = format!("{asked} {}", hint(&question.schema));
        // As an exec agent's question: the question and the schema asked
        // with, so an MCP client of Baton's is asked with it in turn.
        let arguments = json!({
            "question": asked,
            "schema": question.schema,
            "call": waiting.args,
        });
        let parking = Parking {
            turn: waiting.turn,
            index: usize::try_from(answer_slot(waiting.index, question.n)).unwrap_or(usize::MAX),
            tool: waiting.tool,
            args: &arguments,
            reason: Reason::InputRequired,
            label: format!("elicit/{}", question.n),
            at: baton_proto::now_ms(),
            authorize: None,
        };
        Ok(match self.park(parking, update).await? {
            Outcome::Wait(wait) => wait.say(said).into(),
            other => other,
        })
    }
}
