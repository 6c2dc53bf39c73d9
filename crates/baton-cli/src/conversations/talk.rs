//! What the conversation commands share: saying a message to a conversation.

use anyhow::Context as _;
use baton_proto::{AgentName, Conversation, Subjects};
use baton_worker::conversation::{ConversationErrorKind, Conversations, Sent, UserMessage};
use baton_worker::{Client, EventStream, Inbox};
use futures::StreamExt;
use uuid::Uuid;

use crate::nats::NatsArgs;

/// What the conversation commands use.
pub struct Talk {
    pub client: Client,
    pub conversations: Conversations,
    pub inbox: Inbox,
}

/// A message said to a conversation, and the session that answers it,
/// followed from before the message was sent.
pub struct Said {
    pub session: Uuid,
    pub events: EventStream,
    /// What became of it: a turn that started or waits, or `None` for an
    /// answer to an agent's question.
    pub sent: Option<Sent>,
}

impl Talk {
    pub async fn open(nats: &NatsArgs, subjects: Subjects) -> anyhow::Result<Self> {
        let role = baton_ops::RoleKind::Operator;
        let client = crate::nats::client(nats, subjects.clone(), role).await?;
        let conversations = Conversations::open(client.clone(), nats.replicas())
            .await
            .with_context(|| {
                format!(
                    "cannot open the conversations bucket ({}): conversation commands need its rights, which the operator role has (see `baton permissions operator`)",
                    subjects.conversations_bucket()
                )
            })?;
        let nats_client = client.jetstream().client();
        let inbox = Inbox::open(nats_client, subjects, nats.replicas()).await?;
        Ok(Self {
            client,
            conversations,
            inbox,
        })
    }

    /// Settles conversation `id` if its turn ended, as the router's keeper
    /// would within a moment.
    pub async fn settle(&self, id: &str) {
        match self.conversations.settle_now(id).await {
            Ok(()) => {}
            // A deleted conversation is said so by what reads it next.
            Err(err) if err.kind() == ConversationErrorKind::Deleted => {}
            Err(err) => {
                tracing::warn!(error = %err, "cannot settle the conversation now; the router's keeper will");
            }
        }
    }

    /// Says `message` to conversation `id`: the answer to the question an
    /// agent of it asked the user, or else a turn.
    pub async fn say(&self, id: &str, message: UserMessage) -> anyhow::Result<Said> {
        let read = self.conversations.get(id).await?;
        if let Some((record, _)) = &read {
            let text = &message.turn.text;
            let answered = self.conversations.answer(record, &self.inbox, text, "cli");
            if let Some((session, seen)) = answered.await? {
                let events = self.client.follow(session).await?;
                return Ok(Said {
                    session,
                    events: Box::pin(events.skip(seen)),
                    sent: None,
                });
            }
        }
        let session = message.turn.session;
        let events = self.client.follow(session).await?;
        let sent = self.conversations.send_after(id, &message, read).await?;
        Ok(Said {
            session,
            events,
            sent: Some(sent),
        })
    }
}

/// Who holds `record`, as one line.
pub fn holding(record: &Conversation) -> String {
    match (&record.holder, &record.entry) {
        (Some(holder), _) => format!("{holder} holds the conversation"),
        (None, Some(entry)) => format!("nobody holds it: the next turn goes to {entry}"),
        (None, None) => "nobody holds it: the next turn goes to the entry agent".to_owned(),
    }
}

/// `name` as an agent type, or an error that says why not.
pub fn agent_type(name: &str) -> anyhow::Result<String> {
    AgentName::new(name).with_context(|| format!("{name:?} is not an agent type"))?;
    Ok(name.to_owned())
}

/// An overlap policy named on the command line.
pub fn overlap(text: &str) -> Result<baton_proto::Overlap, String> {
    baton_proto::Overlap::parse(text)
        .ok_or_else(|| format!("{text:?} is not a policy: enqueue, reject or interrupt"))
}
