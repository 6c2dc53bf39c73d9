//! An agent's question to the user (`ask_user`, an exec program's `ask`)
//! as MCP elicitation. When the client said it answers elicitations (form
//! mode) and a session its call follows waits on the user's answer, the
//! server asks the client (`elicitation/create`): for the schema the
//! question names (an exec `ask` with a `schema`), else for one required
//! string, `answer`. An accepted answer is given as any answer is (the
//! conversation's next message, or the inbox's for a session of its own),
//! and the session goes on within the same call. With a schema, whatever
//! the client did (accept, decline, cancel) is the answer, as JSON.
//! Without one, a declined or cancelled question is left waiting, as a
//! client without elicitation finds it: a conversation's call returns it
//! and its next message answers it; a call without a conversation waits
//! for the inbox's answer.

use baton_client::conversation::{Taken, UserMessage};
use baton_client::{Decision, EventStream, Inbox, InboxEntry};
use baton_proto::{Event, EventType};
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::{RequestContext, RoleServer};

use crate::Gateway;

/// Where an answer goes: a conversation's (with its caller), or the
/// session's own question in the inbox.
pub(crate) type Answering<'a> = Option<(&'a str, Option<&'a str>)>;

/// What became of a question the client was asked.
pub(crate) enum Elicited {
    /// Not asked, or not answered: the question waits.
    Not,
    /// Answered in the inbox: the session's events go on.
    GoesOn,
    /// Answered as the conversation's next message: the events of that turn.
    Turn(EventStream),
}

impl Gateway {
    /// When the client answers elicitations and `event` is its session
    /// waiting on the user's answer: asks the client and gives its answer.
    pub(crate) async fn elicited(
        &self,
        event: &Event,
        answering: Answering<'_>,
        context: &RequestContext<RoleServer>,
    ) -> Elicited {
        if event.kind != EventType::Waiting || !answers_forms(context) {
            return Elicited::Not;
        }
        let inbox = match self.inbox().await {
            Ok(inbox) => inbox,
            Err(err) => {
                tracing::debug!(error = %err, "no elicitation: the inbox cannot be read");
                return Elicited::Not;
            }
        };
        let session = event.session;
        let Ok(Some(entry)) = inbox.question(session).await else {
            return Elicited::Not;
        };
        let (question, own) = question_of(&entry, event);
        let message = format!("{} asks: {question}", entry.agent());
        let own_schema = own.is_some();
        let schema = match own {
            Some(schema) => schema,
            None => match ElicitationSchema::builder()
                .required_string("answer")
                .build()
            {
                Ok(schema) => schema,
                Err(_) => return Elicited::Not,
            },
        };
        let asked = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: schema,
        };
        let answer = match context.peer.create_elicitation(asked).await {
            // The agent asked for its own schema: whatever the client did
            // is its answer.
            Ok(said) if own_schema => Some(
                serde_json::json!({"action": said.action, "content": said.content}).to_string(),
            ),
            Ok(said) if said.action == ElicitationAction::Accept => (said.content)
                .and_then(|content| content.get("answer")?.as_str().map(str::to_owned)),
            Ok(_) => None,
            Err(err) => {
                tracing::debug!(error = %err, "the client did not answer the elicitation");
                None
            }
        };
        let Some(answer) = answer else {
            return Elicited::Not;
        };
        match self.answer(inbox, &entry, answer, answering).await {
            Ok(Some(turn)) => Elicited::Turn(turn),
            Ok(None) => Elicited::GoesOn,
            Err(err) => {
                tracing::warn!(error = %err, %session, "the elicited answer could not be given; the question still waits");
                Elicited::Not
            }
        }
    }

    /// Gives `answer` to the question `entry` holds: as the conversation's
    /// next message (then the events of its turn), or to the inbox.
    async fn answer(
        &self,
        inbox: &Inbox,
        entry: &InboxEntry,
        answer: String,
        answering: Answering<'_>,
    ) -> Result<Option<EventStream>, crate::Error> {
        let Some((id, caller)) = answering else {
            let decision = Decision::Answer(answer);
            let id = entry.envelope.id.to_string();
            return (inbox.resolve_with(&id, decision, "mcp", None).await)
                .map(|_| None)
                .map_err(|err| crate::Error::store(err.to_string()));
        };
        let conversations = self.conversations().await?;
        let mut message = UserMessage::new(answer);
        message.caller = caller.map(str::to_owned);
        message.via = "mcp".to_owned();
        // Answered meanwhile by someone else, while the turn runs: refused,
        // not queued as a message of its own.
        message.overlap = baton_proto::Overlap::Reject;
        match conversations.say(id, message).await {
            Ok(turn) if matches!(turn.taken, Taken::Answered { .. }) => (turn.events().await)
                .map(Some)
                .map_err(|err| crate::Error::store(baton_nats::error_chain(&err))),
            Ok(_) => Err(crate::Error::store(format!(
                "conversation {id} took the answer as a new message: its question was answered meanwhile"
            ))),
            Err(err) => Err(crate::Error::store(baton_nats::error_chain(&err))),
        }
    }

    /// The inbox, opened on first use.
    async fn inbox(&self) -> Result<&Inbox, crate::Error> {
        self.talk
            .inbox
            .get_or_try_init(|| {
                let nats = self.client.jetstream().client();
                let subjects = self.client.subjects().clone();
                Inbox::open(nats, subjects, self.talk.replicas)
            })
            .await
            .map_err(|err| crate::Error::store(err.to_string()))
    }
}

/// Whether the client answers form elicitations (`elicitation: {}` is
/// form mode too).
fn answers_forms(context: &RequestContext<RoleServer>) -> bool {
    let Some(info) = context.peer.peer_info() else {
        return false;
    };
    (info.capabilities.elicitation.as_ref())
        .is_some_and(|can| can.form.is_some() || can.url.is_none())
}

/// What the agent asked (`ask_user`'s question, else what it said last),
/// and the answer it asked for when it gave a schema MCP can ask with.
fn question_of(entry: &InboxEntry, event: &Event) -> (String, Option<ElicitationSchema>) {
    let arguments = (entry.gate())
        .and_then(|gate| serde_json::from_str::<serde_json::Value>(&gate.arguments).ok());
    let question = (arguments.as_ref())
        .and_then(|arguments| arguments["question"].as_str().map(str::to_owned))
        .or_else(|| event.detail.clone())
        .unwrap_or_default();
    let schema = (arguments.as_ref())
        .and_then(|arguments| arguments.get("schema"))
        .and_then(|schema| match serde_json::from_value(schema.clone()) {
            Ok(schema) => Some(schema),
            Err(err) => {
                tracing::warn!(error = %err, "the question's schema is not an MCP elicitation schema: asked for one string");
                None
            }
        });
    (question, schema)
}
