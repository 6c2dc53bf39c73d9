//! `baton send`: publish a task, and print its session id or, with `--wait`, its outcome.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use baton_client::conversation::{Taken, UserMessage};
use baton_proto::{AgentName, Envelope, Subjects, now_ms};
use clap::Args;

use super::{amount, variable};
use crate::conversations::Talk;
use crate::nats::NatsArgs;
use crate::shown::{Shown, Waiting};

#[derive(Debug, Args)]
pub struct SendArgs {
    /// The user's message; `-` reads it from standard input.
    #[arg(required_unless_present_any = ["file", "context"], conflicts_with = "file")]
    pub text: Option<String>,

    /// Read the user's message from this file (any size: large tasks go
    /// through the claim-check).
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,

    /// Start from a whole context, a JSON file with the fields of an
    /// envelope's `context` (messages, variables, state, trace, ...). The
    /// message, if given, is appended as the user's turn.
    #[arg(long, value_name = "FILE.json")]
    pub context: Option<PathBuf>,

    /// First agent type (default: the registry's best agent for --requires, else the router's
    /// default entry agent).
    #[arg(long)]
    pub to: Option<String>,

    /// Capabilities the first agent must have, comma-separated; the router asks the registry.
    #[arg(long, value_delimiter = ',', value_name = "CAP,...")]
    pub requires: Vec<String>,

    /// Publish straight to the agent's subject instead of the ingress (needs --to).
    #[arg(long, requires = "to")]
    pub direct: bool,

    /// Send the message as the next turn of conversation ID; an id not seen before starts
    /// one (--to is where it starts). The turn goes to the agent that holds the
    /// conversation, with the conversation so far; when an agent of it asked the user a
    /// question, the message is the answer. Needs the conversations bucket (the operator
    /// role's rights).
    #[arg(long, value_name = "ID", conflicts_with_all = ["context", "requires", "direct", "max_hops", "deadline_ms"])]
    pub conversation: Option<String>,

    /// With --conversation, what the message does while a turn runs: enqueue (it runs next,
    /// the default), reject (an error that names the running turn) or interrupt (the
    /// running turn is cancelled; the new one runs with both messages).
    #[arg(long, requires = "conversation", value_parser = crate::conversations::overlap)]
    pub overlap: Option<baton_proto::Overlap>,

    /// Shared context variable KEY=VALUE (VALUE is read as JSON, else as a string). Repeatable.
    #[arg(long = "var", value_name = "KEY=VALUE")]
    pub vars: Vec<String>,

    /// Hop budget of the session.
    #[arg(long)]
    pub max_hops: Option<u32>,

    /// Fail the session if it has not ended this many ms from now.
    #[arg(long)]
    pub deadline_ms: Option<u64>,

    /// The most the session may spend on models, in tokens in and out across every hop.
    /// A model call that would pass it is not made: the session goes to the fallback with
    /// reason budget_exceeded, saying what was spent.
    #[arg(long, value_name = "TOKENS", allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(1..))]
    pub budget_tokens: Option<u64>,

    /// The most the session may cost, as a decimal amount (e.g. 0.50) in the currency of
    /// the agents' [llm.price] tables. Calls of agents without a price table cost nothing
    /// toward it.
    #[arg(long, value_name = "AMOUNT", allow_negative_numbers = true, value_parser = amount)]
    pub budget_cost: Option<u64>,

    #[command(flatten)]
    pub waiting: Waiting,
}

/// `task` with what `args` set: its target, requirements, variables, hop
/// budget, deadline and token budget.
fn options(mut task: Envelope, args: &SendArgs) -> anyhow::Result<Envelope> {
    if let Some(to) = &args.to {
        task = task.with_to(AgentName::new(to.as_str()).context("invalid --to")?);
    }
    task.requires = args.requires.clone();
    task.stream = !args.waiting.no_stream;
    task.replayable = true;
    for pair in &args.vars {
        let (key, value) = variable("--var", pair)?;
        task = task.with_variable(key, value);
    }
    if let Some(max_hops) = args.max_hops {
        task = task.with_max_hops(max_hops);
    }
    if let Some(ms) = args.deadline_ms {
        task = task.with_deadline(now_ms() + ms);
    }
    if args.budget_tokens.is_some() || args.budget_cost.is_some() {
        task.budget = Some(baton_proto::Budget {
            tokens: args.budget_tokens,
            cost_micros: args.budget_cost,
        });
    }
    Ok(task)
}

pub async fn run(nats: &NatsArgs, subjects: Subjects, args: SendArgs) -> anyhow::Result<ExitCode> {
    if let Some(id) = &args.conversation {
        return to_conversation(nats, subjects, id, &args).await;
    }
    let task = options(task(&args)?, &args)?;
    let client = crate::nats::client(nats, subjects, baton_ops::RoleKind::Client).await?;
    // Followed before it is sent, so no live piece of an answer comes
    // before the wait does.
    let events = if args.waiting.wait {
        Some(client.follow_to_rest(task.session).await?)
    } else {
        None
    };
    if args.direct {
        let to = AgentName::new(args.to.clone().unwrap_or_default()).context("invalid --to")?;
        client.submit_to(&to, &task).await?;
    } else if let Some(to) = &args.to {
        // The router would fail it with `no_route`; say so before sending.
        client.check_served(&AgentName::new(to.as_str())?).await?;
        client.submit(&task).await?;
    } else {
        client.submit(&task).await?;
    }
    Shown::from(&args.waiting).outcome(&task, events).await
}

/// The task the arguments describe: the message (argument, stdin or file)
/// on top of the `--context` file, if any.
pub fn task(args: &SendArgs) -> anyhow::Result<Envelope> {
    let text = match (&args.text, &args.file) {
        (Some(text), _) if text == "-" => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .context("cannot read the message from standard input")?;
            Some(text)
        }
        (Some(text), _) => Some(text.clone()),
        (None, Some(path)) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --file {}", path.display()))?,
        ),
        (None, None) => None,
    };
    let Some(path) = &args.context else {
        return Ok(Envelope::task(text.unwrap_or_default()));
    };
    let json =
        std::fs::read(path).with_context(|| format!("cannot read --context {}", path.display()))?;
    let context: baton_proto::Context = serde_json::from_slice(&json).with_context(|| {
        format!(
            "--context {}: not an envelope context (see proto-schemas/schema/envelope.schema.json, `context`)",
            path.display()
        )
    })?;
    let mut task = Envelope::task(String::new());
    task.context = context;
    if let Some(text) = text {
        if task.context.initial_query.is_empty() {
            task.context.initial_query.clone_from(&text);
        }
        task.context
            .messages
            .push(baton_proto::Message::new(baton_proto::Role::User, text));
    }
    Ok(task)
}

/// `baton send --conversation ID`: the message as the next turn of
/// conversation `id` (or the answer to its agent's question), with what
/// `args` set.
async fn to_conversation(
    nats: &NatsArgs,
    subjects: Subjects,
    id: &str,
    args: &SendArgs,
) -> anyhow::Result<ExitCode> {
    let text = task(args)?.context.initial_query;
    let mut message = UserMessage::new(text);
    message.overlap = args.overlap.unwrap_or_default();
    message.turn.stream = !args.waiting.no_stream;
    message.turn.to = args
        .to
        .as_deref()
        .map(crate::conversations::agent_type)
        .transpose()?;
    for pair in &args.vars {
        let (key, value) = variable("--var", pair)?;
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
    let session = said.session();
    let what = match &said.taken {
        Taken::Started { turn, .. } => format!("turn {turn}"),
        Taken::Queued { ahead, .. } => {
            format!("queued behind the running turn and {ahead} more")
        }
        Taken::Answered { .. } => "the answer to the question its agent asked".to_owned(),
    };
    if !args.waiting.wait {
        if args.waiting.json {
            let shown = serde_json::json!({
                "conversation": id,
                "session": session.to_string(),
                "sent": what,
            });
            println!("{shown}");
        } else {
            eprintln!("conversation {id}: {what}");
            println!("{session}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !args.waiting.json {
        eprintln!("conversation {id}: {what}");
    }
    // Its end comes once the turn is closed, so what is shown next says
    // who holds it.
    let events = said.events().await?;
    Shown::from(&args.waiting).ended(session, events).await
}
