//! `baton diff`: where two sessions part.

use std::process::ExitCode;

use baton_proto::Subjects;
use clap::Args;

use super::session_id;
use crate::nats::NatsArgs;

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The first session (say, the one replayed).
    pub first: String,

    /// The second session (say, its replay).
    pub second: String,

    /// Exit 1 when the sessions differ (0 when they do not).
    #[arg(long)]
    pub exit_code: bool,

    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(nats: &NatsArgs, subjects: Subjects, args: DiffArgs) -> anyhow::Result<ExitCode> {
    let (first, second) = (session_id(&args.first)?, session_id(&args.second)?);
    let client = crate::nats::client(nats, subjects, baton_ops::RoleKind::Client).await?;
    let mut histories = Vec::new();
    for session in [first, second] {
        let history = client.history(session).await?;
        anyhow::ensure!(
            !history.is_empty(),
            "no session {session} is stored (it never ran here, or its events have expired)"
        );
        histories.push(history);
    }
    let parts = baton_gateway::diff::compare(&histories[0], &histories[1]);
    let differ = parts.iter().any(|part| !part.same);
    if args.json {
        let parts: Vec<_> = parts
            .iter()
            .map(
                |part| serde_json::json!({"part": part.what, "same": part.same, "text": part.text}),
            )
            .collect();
        println!("{}", serde_json::json!({"same": !differ, "parts": parts}));
    } else {
        println!("{first} vs {second}");
        for part in &parts {
            let verdict = if part.same { "same" } else { "differ" };
            println!(
                "  {:<8} {verdict}: {}",
                format!("{}:", part.what),
                part.text
            );
        }
    }
    Ok(if differ && args.exit_code {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
