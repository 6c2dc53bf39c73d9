//! What the conversation commands share: saying a message to a
//! conversation, through the runtime's one entry point
//! (`Conversations::say`), and following the session that answers it.

use anyhow::Context as _;
use baton_client::conversation::{Conversations, Taken, UserMessage};
use baton_client::{Client, EventStream};
use baton_proto::{AgentName, Conversation, Subjects};
use uuid::Uuid;

use crate::nats::NatsArgs;

/// What the conversation commands use.
pub struct Talk {
    pub client: Client,
    pub conversations: Conversations,
}

/// A message said to a conversation, and the session that answers it,
/// followed from before the message was sent.
pub struct Followed {
    pub session: Uuid,
    pub events: EventStream,
    /// What became of it: a turn that started or waits, or an answer to an
    /// agent's question.
    pub taken: Taken,
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
        Ok(Self {
            client,
            conversations,
        })
    }

    /// Says that conversation `id`'s turn was seen to end, and waits for
    /// it to be closed, as the router's keeper would within a moment.
    pub async fn close_turn(&self, id: &str) {
        if self.conversations.turn_ended(id).await.is_err() {
            tracing::warn!("closing the turn stopped; the router's keeper will close it");
        }
    }

    /// Says `message` to conversation `id`: the answer to the question an
    /// agent of it asked the user, or else a turn, followed from before
    /// the message was sent.
    pub async fn say(&self, id: &str, mut message: UserMessage) -> anyhow::Result<Followed> {
        message.via = "cli".to_owned();
        let session = message.turn.session;
        let events = self.client.follow(session).await?;
        let said = self.conversations.say(id, message).await?;
        if let Taken::Answered { session, seen } = &said {
            // The asking turn goes on: its events after the question.
            let events = self.client.follow_after(*session, seen.clone()).await?;
            return Ok(Followed {
                session: *session,
                events,
                taken: said,
            });
        }
        Ok(Followed {
            session,
            events,
            taken: said,
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
