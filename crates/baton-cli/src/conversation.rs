//! Conversations from the command line: `baton send --conversation`,
//! `baton chat` and `baton conversations`. Each message is a turn of its
//! conversation, which goes to the agent that holds it; a message to a
//! conversation whose agent asked the user a question is the answer.
//!
//! Answers go to standard output, what happens around them (the
//! conversation's id, handoffs, who holds it) to standard error, so a
//! script that pipes turns into `baton chat` reads the answers alone.

use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use baton_proto::{AgentName, Conversation, Event, EventType, Subjects};
use baton_worker::conversation::{ConversationErrorKind, Conversations, Sent, UserMessage};
use baton_worker::{Client, EventStream, Inbox};
use futures::StreamExt;
use tokio::io::AsyncBufReadExt as _;
use uuid::Uuid;

use crate::args::{ChatArgs, ConversationsCommand, NatsArgs, SendArgs};
use crate::live::Printer;
use crate::session::Shown;

/// What the conversation commands use.
struct Talk {
    client: Client,
    conversations: Conversations,
    inbox: Inbox,
}

/// A message said to a conversation, and the session that answers it,
/// followed from before the message was sent.
struct Said {
    session: Uuid,
    events: EventStream,
    /// What became of it: a turn that started or waits, or `None` for an
    /// answer to an agent's question.
    sent: Option<Sent>,
}

impl Talk {
    async fn open(nats: &NatsArgs, subjects: Subjects) -> anyhow::Result<Self> {
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
    async fn settle(&self, id: &str) {
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
    async fn say(&self, id: &str, message: UserMessage) -> anyhow::Result<Said> {
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

/// `baton send --conversation ID`: the message as the next turn of
/// conversation `id` (or the answer to its agent's question), with what
/// `args` set.
pub async fn send(
    nats: &NatsArgs,
    subjects: Subjects,
    id: &str,
    args: &SendArgs,
) -> anyhow::Result<ExitCode> {
    let text = crate::session::task(args)?.context.initial_query;
    let mut message = UserMessage::new(text);
    message.overlap = args.overlap.unwrap_or_default();
    message.turn.stream = !args.waiting.no_stream;
    message.turn.to = args.to.as_deref().map(agent_type).transpose()?;
    for pair in &args.vars {
        let (key, value) = crate::session::variable("--var", pair)?;
        message.turn.variables.insert(key, value);
    }
    if args.budget_tokens.is_some() || args.budget_cost.is_some() {
        message.turn.budget = Some(baton_proto::Budget {
            tokens: args.budget_tokens,
            cost_micros: args.budget_cost,
        });
    }
    let talk = Talk::open(nats, subjects).await?;
    let said = talk.say(id, message).await?;
    let what = match &said.sent {
        Some(Sent::Started { turn, .. }) => format!("turn {turn}"),
        Some(Sent::Queued { ahead, .. }) => {
            format!("queued behind the running turn and {ahead} more")
        }
        None => "the answer to the question its agent asked".to_owned(),
    };
    if !args.waiting.wait {
        if args.waiting.json {
            let shown = serde_json::json!({
                "conversation": id,
                "session": said.session.to_string(),
                "sent": what,
            });
            println!("{shown}");
        } else {
            eprintln!("conversation {id}: {what}");
            println!("{}", said.session);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !args.waiting.json {
        eprintln!("conversation {id}: {what}");
    }
    let code = Shown::from(&args.waiting)
        .ended(said.session, said.events)
        .await?;
    // Settled now, so what is shown next says who holds it.
    talk.settle(id).await;
    Ok(code)
}

/// `baton chat`: one turn per line of standard input, each answer printed.
pub async fn chat(nats: &NatsArgs, subjects: Subjects, args: ChatArgs) -> anyhow::Result<ExitCode> {
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
        let timeout = Duration::from_secs(args.timeout_secs);
        let end = tokio::time::timeout(timeout, answer(said.events, interactive))
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "no answer within {}s (the turn goes on: follow it with `baton watch {}`)",
                    args.timeout_secs,
                    said.session
                )
            })??;
        last = if matches!(end.kind, EventType::Completed | EventType::Waiting) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
        // Settled now, so the next line finds who holds it.
        talk.settle(&id).await;
        if let Some((record, _)) = talk.conversations.get(&id).await? {
            eprintln!("[{}]", holding(&record));
        }
    }
    Ok(last)
}

/// Follows one turn's `events` to its end, or to an agent's question, and
/// prints its answer: as it is written when it streams (`interactive`,
/// each piece after its agent's name), else once, whole. Handoffs go to
/// standard error as they happen.
async fn answer(mut events: EventStream, interactive: bool) -> anyhow::Result<Event> {
    let mut printer = Printer::default();
    let end = loop {
        let Some(event) = events.next().await else {
            anyhow::bail!("the event stream ended before the turn did");
        };
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
        if event.kind == EventType::Waiting || event.kind.is_terminal() {
            break event;
        }
    };
    printer.complete(&end);
    printer.end();
    let agent = end.agent.clone().unwrap_or_else(|| "?".to_owned());
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

/// Who holds `record`, as one line.
fn holding(record: &Conversation) -> String {
    match (&record.holder, &record.entry) {
        (Some(holder), _) => format!("{holder} holds the conversation"),
        (None, Some(entry)) => format!("nobody holds it: the next turn goes to {entry}"),
        (None, None) => "nobody holds it: the next turn goes to the entry agent".to_owned(),
    }
}

/// `name` as an agent type, or an error that says why not.
fn agent_type(name: &str) -> anyhow::Result<String> {
    AgentName::new(name).with_context(|| format!("{name:?} is not an agent type"))?;
    Ok(name.to_owned())
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
        ConversationsCommand::Fork { id, at, new_id } => {
            talk.settle(&id).await;
            let new = new_id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
            let fork = talk.conversations.fork(&id, at, &new, None).await?;
            println!("{}", fork.id);
        }
        ConversationsCommand::Show { id, json } => {
            // A turn that ended is shown as ended.
            talk.settle(&id).await;
            let Some((record, _)) = talk.conversations.get(&id).await? else {
                anyhow::bail!(
                    "no conversation {id}: check the id (`baton conversations ls` lists them)"
                );
            };
            let turns = talk.conversations.turns(&record).await?;
            if json {
                let mut shown = summary(&record);
                shown["turns_listed"] =
                    serde_json::to_value(turns.iter().map(turn_json).collect::<Vec<_>>())?;
                println!("{shown}");
            } else {
                show(&record, &turns);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
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
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    })
}

/// A listed turn as JSON.
fn turn_json(turn: &baton_proto::ConversationTurn) -> serde_json::Value {
    serde_json::json!({
        "turn": turn.turn,
        "session": turn.session.to_string(),
        "text": turn.text,
        "agents": turn.agents,
        "ended": turn.ended.as_str(),
        "reason": turn.reason.as_ref().map(baton_proto::Reason::as_str),
        "at": turn.at,
        "ended_at": turn.ended_at,
    })
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

/// `show`'s text: the record, then its turns in order.
fn show(record: &Conversation, turns: &[baton_proto::ConversationTurn]) {
    println!("conversation {}", record.id);
    if let Some(owner) = &record.owner {
        println!("  owner:   {owner}");
    }
    println!("  {}", holding(record));
    println!("  turns:   {}", record.turns);
    if let Some(running) = &record.running {
        println!(
            "  running: turn {} as session {}: {}",
            record.turns, running.session, running.text
        );
    }
    for (n, queued) in record.queue.iter().enumerate() {
        println!(
            "  queued {}: {} (session {})",
            n + 1,
            queued.text,
            queued.session
        );
    }
    for turn in turns {
        let how = match &turn.reason {
            Some(reason) => format!("{} ({})", turn.ended.as_str(), reason.as_str()),
            None => turn.ended.as_str().to_owned(),
        };
        println!(
            "  turn {}  session {}  {}  {how}: {}",
            turn.turn,
            turn.session,
            turn.agents.join(" -> "),
            turn.text
        );
    }
}
