//! The options of the conversation commands: `baton chat` and `baton conversations`.

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct ChatArgs {
    /// The agent type the conversation starts at (default: the router's default entry
    /// agent). Later turns go to the agent that holds the conversation.
    pub agent: Option<String>,

    /// Continue conversation ID (default: a new one; its id is printed first).
    #[arg(long, value_name = "ID")]
    pub conversation: Option<String>,

    /// Do not ask for answers as they are written; print each when its turn ends.
    #[arg(long)]
    pub no_stream: bool,

    /// How long to wait for each answer, in seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout_secs: u64,
}

#[derive(Debug, Subcommand)]
pub enum ConversationsCommand {
    /// List the conversations, most recently active first: id, turns, the agent that holds
    /// it, the running turn and the messages waiting behind it.
    Ls {
        /// Print one JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Show a conversation: who holds it, what runs and waits, and its turns in order, each
    /// with its session, its agents (the last one answered) and how it ended.
    Show {
        /// The conversation's id (an A2A contextId, or what `baton chat` printed).
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete a conversation: its turns' events, its turns, its transcript and its record.
    /// A later show or message with that id is refused as deleted, until the router
    /// removes the marker (the router's --conversation-ttl-secs after the delete).
    /// Refused while a turn runs.
    Delete {
        /// The conversation's id.
        id: String,
    },
    /// Start a new conversation where conversation ID stood after turn N: its turns, its
    /// transcript, who held it and its shared variables, copied without calling any model
    /// or tool. The next message to it is answered as turn N + 1 of ID would have been.
    /// Prints the new conversation's id.
    Fork {
        /// The conversation's id.
        id: String,
        /// The last turn the fork keeps (an ended turn, from 1).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        at: u32,
        /// The new conversation's id (default: a new UUID).
        #[arg(long = "as", value_name = "NEW_ID")]
        new_id: Option<String>,
    },
}

/// An overlap policy named on the command line.
pub(crate) fn overlap(text: &str) -> Result<baton_proto::Overlap, String> {
    baton_proto::Overlap::parse(text)
        .ok_or_else(|| format!("{text:?} is not a policy: enqueue, reject or interrupt"))
}
