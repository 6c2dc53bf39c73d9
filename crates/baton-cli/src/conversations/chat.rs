//! `baton chat`: a conversation at the prompt, or piped, one turn per line.

use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use baton_client::EventStream;
use baton_client::conversation::UserMessage;
use baton_proto::{Event, EventType, Subjects};
use clap::Args;
use futures::StreamExt;
use tokio::io::AsyncBufReadExt as _;
use uuid::Uuid;

use super::talk::{Talk, agent_type, holding};
use crate::nats::NatsArgs;
use crate::printer::Printer;

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

/// `baton chat`: one turn per line of standard input, each answer printed.
pub async fn run(nats: &NatsArgs, subjects: Subjects, args: ChatArgs) -> anyhow::Result<ExitCode> {
    let to = args.agent.as_deref().map(agent_type).transpose()?;
    let talk = Talk::open(nats, subjects).await?;
    let id = (args.conversation.clone()).unwrap_or_else(|| Uuid::new_v4().to_string());
    match talk.conversations.get(&id).await? {
        Some((record, _)) => eprintln!(
            "conversation {id}: {} turns so far; {}",
            record.turns,
            holding(&record)
        ),
        None => eprintln!("conversation {id} (continue it later with --conversation {id})"),
    }
    let interactive = std::io::stdin().is_terminal();
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut last = ExitCode::SUCCESS;
    loop {
        if interactive {
            print!("you> ");
            let _ = std::io::stdout().flush();
        }
        let Some(line) = lines
            .next_line()
            .await
            .context("cannot read standard input")?
        else {
            break;
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if matches!(line, "/quit" | "/exit") {
            break;
        }
        let mut message = UserMessage::new(line);
        message.turn.to.clone_from(&to);
        message.turn.stream = interactive && !args.no_stream;
        let said = talk.say(&id, message).await?;
        let session = said.session();
        let timeout = Duration::from_secs(args.timeout_secs);
        // Its end comes once the turn is closed: the next line finds who holds it.
        let events = said.events().await?;
        let end = tokio::time::timeout(timeout, answer(events, interactive))
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "no answer within {}s (the turn goes on: follow it with `baton watch {}`)",
                    args.timeout_secs,
                    session
                )
            })??;
        last = if matches!(end.kind, EventType::Completed | EventType::Waiting) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
        if let Some((record, _)) = talk.conversations.get(&id).await? {
            eprintln!("[{}]", holding(&record));
        }
    }
    Ok(last)
}

/// Follows one turn's `events` (they stop at its end, or at an agent's
/// question), and prints its answer: as it is written when it streams (`interactive`,
/// each piece after its agent's name), else once, whole. Handoffs go to
/// standard error as they happen.
async fn answer(mut events: EventStream, interactive: bool) -> anyhow::Result<Event> {
    let mut printer = Printer::default();
    let mut last = None;
    while let Some(event) = events.next().await {
        let event = event?;
        if printer.delta(&event) {
            continue;
        }
        if matches!(
            event.kind,
            EventType::Handoff | EventType::Escalated | EventType::Delegated
        ) {
            printer.end();
            eprintln!("  ↳ {}", baton_gateway::text::progress(&event));
        }
        last = Some(event);
    }
    let end = last
        .filter(|end| end.kind == EventType::Waiting || end.kind.is_terminal())
        .context("the event stream ended before the turn did")?;
    printer.complete(&end);
    printer.end();
    let agent = end.agent.as_deref().unwrap_or("?").to_owned();
    let said = match end.kind {
        EventType::Completed if printer.streamed() => return Ok(end),
        EventType::Completed => end.output.as_ref().map(baton_gateway::text::value),
        // What the agent asked: its last message.
        EventType::Waiting => end.detail.clone(),
        _ => {
            let reason = end.reason.as_ref().map_or("unknown", |r| r.as_str());
            let detail = end.detail.as_deref().unwrap_or_default();
            eprintln!("the turn failed: {reason}: {detail}");
            return Ok(end);
        }
    };
    let said = said.unwrap_or_default();
    if interactive {
        println!("{agent}: {said}");
    } else {
        println!("{said}");
    }
    Ok(end)
}
