//! `baton conversations ls | show | delete | fork`.

use std::process::ExitCode;

use baton_proto::{Conversation, Subjects};
use clap::Subcommand;

use super::talk::Talk;
use crate::deploys::Pin;
use crate::nats::NatsArgs;

#[derive(Debug, Subcommand)]
pub enum ConversationsCommand {
    /// List the conversations, most recently active first: id, turns, the agent that holds
    /// it, the running turn and the messages waiting behind it.
    Ls {
        /// Print one JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Show a conversation: who holds it, the versions it is pinned to, what runs and waits,
    /// and its turns in order, each with its session, its agents and how it ended, then as it
    /// was said: the user's message, any question an agent asked and the user's answer, and
    /// the answer with the agent that gave it (`TYPE@VERSION`).
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
    /// transcript, who held it, its shared variables and the versions it ran on, copied
    /// without calling any model or tool. The next message to it is answered as turn N + 1
    /// of ID would have been, or by another version with --as TYPE@VERSION (compare the two
    /// turns' sessions with `baton diff`). Prints the new conversation's id.
    Fork {
        /// The conversation's id.
        id: String,
        /// The last turn the fork keeps (an ended turn, from 1).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        at: u32,
        /// Run agent type TYPE on version VERSION from the fork's next turn on, instead of
        /// the version the conversation ran on (a worker of it must have run). Repeatable.
        /// A value without `@` is read as the new id, as --id (as earlier releases did).
        #[arg(long = "as", value_name = "TYPE@VERSION")]
        onto: Vec<String>,
        /// The new conversation's id (default: a new UUID).
        #[arg(long = "id", value_name = "NEW_ID")]
        new_id: Option<String>,
    },
}

/// `baton conversations ls | show | delete | fork`.
pub async fn run(
    nats: &NatsArgs,
    subjects: Subjects,
    command: ConversationsCommand,
) -> anyhow::Result<ExitCode> {
    let talk = Talk::open(nats, subjects).await?;
    match command {
        ConversationsCommand::Ls { json } => {
            for record in talk.conversations.list().await? {
                if json {
                    println!("{}", summary(&record));
                } else {
                    println!("{}", line(&record));
                }
            }
        }
        ConversationsCommand::Delete { id } => {
            let removed = talk.conversations.delete(&id).await?;
            println!("deleted conversation {id} and the events of {removed} sessions");
        }
        ConversationsCommand::Fork {
            id,
            at,
            onto,
            new_id,
        } => {
            let (new_id, pins) = fork_as(new_id, &onto)?;
            let onto = Pin::checked(&pins, &talk.client).await?;
            // A turn that just ended can be forked at (else the fork says
            // the turn runs).
            if let Err(err) = talk.conversations.settle(&id).await {
                tracing::warn!(error = %err, "cannot close the conversation's turn now");
            }
            let new = new_id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
            let fork = talk.conversations.fork(&id, at, &new, None, &onto).await?;
            println!("{}", fork.id);
        }
        ConversationsCommand::Show { id, json } => {
            // A turn that ended is shown as ended (else the keeper closes it).
            if let Err(err) = talk.conversations.settle(&id).await {
                tracing::warn!(error = %err, "cannot close the conversation's turn now");
            }
            let Some((record, _)) = talk.conversations.get(&id).await? else {
                anyhow::bail!(
                    "no conversation {id}: check the id (`baton conversations ls` lists them)"
                );
            };
            let turns = talk.conversations.turns(&record).await?;
            let running = record.running.as_ref().map(|running| running.session);
            let (said, running) = super::show::read(&talk.client, &turns, running).await;
            if json {
                let mut shown = summary(&record);
                let listed = turns.iter().zip(&said);
                let listed: Vec<_> = listed.map(|(turn, said)| turn_json(turn, said)).collect();
                shown["turns_listed"] = serde_json::Value::Array(listed);
                if let (Some(running), Some(shown)) = (&running, shown.get_mut("running")) {
                    shown["asked"] = super::show::asked_json(running);
                }
                println!("{shown}");
            } else {
                super::show::show(&record, &turns, &said, running.as_ref());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The new id and the versions a fork's `--as` values name: a value
/// without `@` is the new id, as earlier releases read `--as`.
fn fork_as(new_id: Option<String>, onto: &[String]) -> anyhow::Result<(Option<String>, Vec<Pin>)> {
    let mut id = new_id;
    let mut pins = Vec::new();
    for value in onto {
        if value.contains('@') {
            pins.push(
                value
                    .parse::<Pin>()
                    .map_err(|err| anyhow::anyhow!("--as: {err}"))?,
            );
        } else if id.is_none() {
            eprintln!(
                "note: --as {value} names the new id; say --id {value} (--as now takes TYPE@VERSION)"
            );
            id = Some(value.clone());
        } else {
            anyhow::bail!(
                "--as {value}: the new id is given already; --as takes TYPE@VERSION, as `helper@2`"
            );
        }
    }
    Ok((id, pins))
}

/// A record as one JSON object.
fn summary(record: &Conversation) -> serde_json::Value {
    serde_json::json!({
        "id": record.id,
        "owner": record.owner,
        "entry": record.entry,
        "holder": record.holder,
        "turns": record.turns,
        "running": record.running.as_ref().map(|r| serde_json::json!({
            "turn": record.turns,
            "session": r.session.to_string(),
            "text": r.text,
        })),
        "queued": record.queue.iter().map(|m| serde_json::json!({
            "session": m.session.to_string(),
            "text": m.text,
        })).collect::<Vec<_>>(),
        "versions": record.versions,
        "moves": record.moves.iter().map(|m| serde_json::json!({
            "turn": m.turn, "agent": m.agent, "from": m.from, "to": m.to,
        })).collect::<Vec<_>>(),
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    })
}

/// A listed turn as JSON, with what was said in it (`None`: its session's
/// events are gone or could not be read).
fn turn_json(
    turn: &baton_proto::ConversationTurn,
    said: &Option<baton_gateway::turn::TurnRead>,
) -> serde_json::Value {
    let mut json = serde_json::json!({
        "turn": turn.turn,
        "session": turn.session.to_string(),
        "text": turn.text,
        "agents": turn.agents,
        "ended": turn.ended.as_str(),
        "reason": turn.reason.as_ref().map(baton_proto::Reason::as_str),
        "at": turn.at,
        "ended_at": turn.ended_at,
    });
    if let Some(said) = said {
        json["answer"] = serde_json::json!(said.answer);
        json["answered_by"] = serde_json::json!(said.by);
        json["path"] = serde_json::json!(said.path);
        json["asked"] = super::show::asked_json(said);
        json["failed"] = serde_json::json!(said.failed);
    }
    json
}

/// A record as one line of `ls`.
fn line(record: &Conversation) -> String {
    let state = match &record.running {
        Some(running) => format!("turn {} runs ({})", record.turns, running.session),
        None => "idle".to_owned(),
    };
    format!(
        "{}  {} turns  holder {}  {state}  {} queued",
        record.id,
        record.turns,
        record.holder.as_deref().unwrap_or("-"),
        record.queue.len()
    )
}
