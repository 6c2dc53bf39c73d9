//! What the conversation commands share: saying a message to a
//! conversation, through the runtime's one entry point
//! (`Conversations::say`), and following the session that answers it.

use anyhow::Context as _;
use baton_client::Client;
use baton_client::conversation::{Conversations, Turn, UserMessage};
use baton_proto::{AgentName, Conversation, Subjects};

use crate::nats::NatsArgs;

/// What the conversation commands use.
pub struct Talk {
    pub client: Client,
    pub conversations: Conversations,
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

    /// Says `message` to conversation `id`, through the CLI: the answer to
    /// the question an agent of it asked, or else a turn.
    pub async fn say(&self, id: &str, mut message: UserMessage) -> anyhow::Result<Turn> {
        message.via = "cli".to_owned();
        Ok(self.conversations.say(id, message).await?)
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
pub fn agent_type(name: &str) -> anyhow::Result<AgentName> {
    AgentName::new(name).with_context(|| format!("{name:?} is not an agent type"))
}

/// An overlap policy named on the command line.
pub fn overlap(text: &str) -> Result<baton_proto::Overlap, String> {
    baton_proto::Overlap::parse(text)
        .ok_or_else(|| format!("{text:?} is not a policy: enqueue, reject or interrupt"))
}
