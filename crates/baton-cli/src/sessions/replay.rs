//! `baton replay`: a finished session run again, reusing what it recorded.

use std::process::ExitCode;

use baton_proto::Subjects;
use clap::Args;

use super::{session_id, variable};
use crate::deploys::Pin;
use crate::nats::NatsArgs;
use crate::shown::{Shown, Waiting};

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The finished session to run again, as `baton send` printed it.
    pub session: String,

    /// Run again from this hop of the session's path (from 1, as `baton diff` numbers
    /// them): the hops before it reuse their recorded answers, it and the hops after it
    /// call the model again. By default every recorded answer is reused.
    #[arg(long, value_name = "HOP", value_parser = clap::value_parser!(u64).range(1..))]
    pub from: Option<u64>,

    /// Set a variable in the task the replay starts with, KEY=VALUE (VALUE is read as JSON,
    /// else as a string). Repeatable. An agent whose input changes calls its model again.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,

    /// The model every LLM agent of the replay calls instead of its own (so each calls it
    /// again; priced by the agent's own [llm.price]).
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,

    /// Call MCP tools again instead of reusing their recorded results: their side effects
    /// happen again.
    #[arg(long)]
    pub call_tools: bool,

    /// Run agent type TYPE on version VERSION instead of the version the session ran on
    /// (by default a replay keeps every version it recorded, whatever the rollout says now;
    /// a worker of VERSION must have run). Repeatable. Compare with `baton diff`.
    #[arg(long = "as", value_name = "TYPE@VERSION")]
    pub onto: Vec<Pin>,

    #[command(flatten)]
    pub waiting: Waiting,
}

pub async fn run(
    nats: &NatsArgs,
    subjects: Subjects,
    args: ReplayArgs,
) -> anyhow::Result<ExitCode> {
    let session = session_id(&args.session)?;
    let set = args
        .set
        .iter()
        .map(|pair| variable("--set", pair))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let options = baton_client::SessionReplay {
        from: args
            .from
            .map(|hop| usize::try_from(hop).unwrap_or(usize::MAX)),
        set,
        model: args.model.clone(),
        call_tools: args.call_tools,
        stream: !args.waiting.no_stream,
        onto: std::collections::BTreeMap::new(),
    };
    let client = crate::nats::client(nats, subjects, baton_ops::RoleKind::Client).await?;
    let options = baton_client::SessionReplay {
        onto: Pin::checked(&args.onto, &client).await?,
        ..options
    };
    let (task, agent) = client.replay_of(session, &options).await?;
    let events = if args.waiting.wait {
        Some(client.follow_to_rest(task.session).await?)
    } else {
        None
    };
    client.submit_to(&agent, &task).await?;
    if !args.waiting.json && args.waiting.wait {
        println!("replaying {session} as {}", task.session);
    }
    Shown::from(&args.waiting).outcome(&task, events).await
}
