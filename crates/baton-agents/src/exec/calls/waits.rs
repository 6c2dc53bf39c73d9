//! The calls that end a hop to wait: a question, a delegation; and the
//! messages a hop says, kept when it waits.

use baton_proto::{ExecAction, ExecReply, Message, Role, Value};
use baton_worker::{AgentError, ContextUpdate, Results};
use serde_json::{Value as Json, json};

use super::{Answer, Hop, JOURNAL, refused, value_json};
use crate::journal::Recorded;

impl Hop {
    pub(super) async fn ask(
        &self,
        question: String,
        schema: Option<Json>,
    ) -> Result<Answer, AgentError> {
        let placed = self.place("ask".to_owned(), false).await?;
        let answered = (self.answers.get(placed.nth))
            .filter(|_| placed.recorded)
            .and_then(Value::as_map)
            .and_then(|fields| fields.iter().find(|(k, _)| k.as_str() == Some("answer")))
            .and_then(|(_, answer)| answer.as_str());
        if let Some(answer) = answered {
            return Ok(Answer::Result(json!({"answer": answer})));
        }
        let Some(asking) = &self.asking else {
            return Ok(refused(
                "ctx.ask needs the inbox and the hop journal: grant them with `baton permissions worker NAME --human`",
            ));
        };
        let mut said = self.kept_said().await?;
        // The questions so far number this one.
        (said.state.entry("answers".to_owned()))
            .or_insert_with(|| Value::Array(self.answers.clone()));
        Ok(Answer::End(Box::new(
            asking.ask(&self.delivered, (question, schema), said).await,
        )))
    }

    pub(super) async fn delegate(
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
        let mut outcome = match super::super::delegation(&reply) {
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

    pub(super) async fn say(&self, text: String) -> Result<Answer, AgentError> {
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
    pub(super) async fn kept_said(&self) -> Result<ContextUpdate, AgentError> {
        let says = std::mem::take(&mut self.record.lock().await.says);
        for step in says {
            (self.journal())
                .record_result(self.journal_id, step, 0, "said", false)
                .await?;
        }
        Ok(self.said())
    }
}

/// The children's results as the program reads them.
pub(super) fn results_json(results: &Results) -> Json {
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
