//! Tool calls with a `conversation`: each is said to that conversation
//! through the runtime's one entry point (`Conversations::say`), which
//! makes it a turn, going to the agent that holds the conversation with
//! the conversation so far, or the answer to the question an agent of it
//! asked the user. The result's `structuredContent` names the conversation
//! and the session.
//!
//! The conversations live in the bucket `BATON_CONVERSATIONS`, which the
//! operator role may use and the client role may not: it is opened on the
//! first call that names a conversation, and a server whose NATS user may
//! not use it answers such calls with an error that says so.

use baton_client::conversation::{Conversations, Taken, UserMessage};
use baton_gateway::callers::Caller;
use baton_proto::Envelope;
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::{RequestContext, RoleServer};

use crate::Gateway;

impl Gateway {
    /// The conversations, opened now if need be; `Err` says why they cannot be.
    pub(crate) async fn conversations(&self) -> Result<&Conversations, crate::Error> {
        let replicas = self.talk.replicas;
        self.talk
            .opened
            .get_or_try_init(|| async {
                let subjects = self.client.subjects().clone();
                let bucket = subjects.conversations_bucket();
                let needs = |err: &dyn std::fmt::Display| {
                    crate::Error::store(format!(
                        "this server cannot hold conversations: {err}. They live in the bucket {bucket}, which the operator role may use (run `baton mcp serve` as a NATS user with the operator role's rights: `baton permissions operator`)"
                    ))
                };
                Conversations::open(self.client.clone(), replicas)
                    .await
                    .map_err(|err| needs(&err))
            })
            .await
    }

    /// `task`'s question as a turn of conversation `id` (or the answer to
    /// its agent's question), and that turn's result.
    pub(crate) async fn turn(
        &self,
        id: &str,
        task: Envelope,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let conversations = match self.conversations().await {
            Ok(opened) => opened,
            Err(why) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(
                    why.to_string(),
                )]));
            }
        };
        let failed = |err: &dyn std::fmt::Display| {
            Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "conversation {id}: {err}"
            ))]))
        };
        // Over HTTP with named callers, each continues only its own.
        let caller = (context.extensions)
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>().cloned())
            .unwrap_or(Caller(None));
        let caller = caller.0;
        let mut message = UserMessage::new(task.context.initial_query.clone());
        message.caller.clone_from(&caller);
        message.via = "mcp".to_owned();
        message.turn.session = task.session;
        message.turn.to.clone_from(&task.to);
        message.turn.stream = task.stream;
        message.turn.budget = task.budget;
        message.turn.variables = task.context.variables;
        let said = match conversations.say(id, message).await {
            Ok(said) => said,
            Err(err) => return failed(&baton_nats::error_chain(&err)),
        };
        let session = said.session();
        let turn = match said.taken {
            Taken::Started { turn, .. } => Some(turn),
            _ => None,
        };
        // The turn's events close it at its end: the conversation's next call
        // finds who holds it.
        let events = match said.events().await {
            Ok(events) => events,
            Err(err) => return failed(&baton_nats::error_chain(&err)),
        };
        let answering = Some((id, caller.as_deref()));
        let (mut result, waiting) = self.end((session, events, answering), context).await?;
        result.structured_content = Some(serde_json::json!({
            "conversation": id,
            "session": session.to_string(),
            "turn": turn,
            "waiting": waiting,
        }));
        Ok(crate::call::with_session(result, session))
    }
}
