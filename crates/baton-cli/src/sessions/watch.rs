//! `baton watch`: a session's events from its start, followed until it ends.

use std::process::ExitCode;
use std::time::Duration;

use baton_proto::{Event, EventType, Subjects};
use clap::Args;
use futures::StreamExt;

use super::session_id;
use crate::nats::NatsArgs;
use crate::printer::Printer;

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Session id.
    pub session: String,

    /// Print each event as a JSON line.
    #[arg(long)]
    pub json: bool,

    /// Keep following after the terminal event (a replay may re-open the session).
    #[arg(long)]
    pub follow: bool,

    /// Do not print answers as they are written (the `delta` events of a session sent
    /// without --no-stream); print the other events only.
    #[arg(long)]
    pub no_stream: bool,

    /// How long to wait for the session's first event before saying there is none.
    #[arg(long, default_value_t = 5)]
    pub start_timeout_secs: u64,
}

pub async fn run(nats: &NatsArgs, subjects: Subjects, args: WatchArgs) -> anyhow::Result<ExitCode> {
    let session = session_id(&args.session)?;
    let client = crate::nats::client(nats, subjects, baton_ops::RoleKind::Client).await?;
    let mut events = if args.follow {
        client.events(session).await?
    } else {
        client.follow(session).await?
    };
    let mut seen = false;
    let mut failed = false;
    let mut printer = Printer::default();
    loop {
        let next = if seen {
            events.next().await
        } else {
            let first = Duration::from_secs(args.start_timeout_secs);
            match tokio::time::timeout(first, events.next()).await {
                Ok(next) => next,
                Err(_) => anyhow::bail!(
                    "no events for session {session} within {}s: there is no such session, or it has not started (is a router running for the ingress?)",
                    args.start_timeout_secs
                ),
            }
        };
        let Some(event) = next else { break };
        let event = match event {
            Ok(event) => event,
            // Nothing read: the session cannot be read at all.
            Err(err) if !seen => return Err(err.into()),
            Err(err) => {
                eprintln!("warning: {err}");
                continue;
            }
        };
        seen = true;
        failed = event.kind == EventType::Failed;
        if args.no_stream && event.kind == EventType::Delta {
            continue;
        }
        if args.json {
            println!("{}", serde_json::to_string(&event)?);
        } else if !printer.delta(&event) && !plain_start(&event) {
            printer.complete(&event);
            printer.line(&baton_gateway::text::line(&event));
        }
    }
    printer.end();
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// A `started` event of a session that replays none: the `accepted` line
/// before it says as much.
fn plain_start(event: &Event) -> bool {
    baton_proto::Start::from_event(event).is_some_and(|start| start.replay_of.is_none())
}
