//! `baton notebook`: the agents an agent type worked with, and how that went.

use std::process::ExitCode;

use anyhow::Context as _;
use baton_proto::{AgentName, Subjects, now_ms};
use clap::Args;

use super::registry::{START_ONE, print_table, registry};
use crate::nats::NatsArgs;

#[derive(Debug, Args)]
pub struct NotebookArgs {
    /// The agent type.
    pub agent: String,

    /// Print the notebook as JSON.
    #[arg(long)]
    pub json: bool,

    /// How long to keep asking when no registry answers, in ms.
    #[arg(long, default_value_t = 3000)]
    pub timeout_ms: u64,
}

/// `baton notebook AGENT`.
pub async fn run(
    nats: &NatsArgs,
    subjects: Subjects,
    args: NotebookArgs,
) -> anyhow::Result<ExitCode> {
    let agent = AgentName::new(args.agent.as_str())
        .with_context(|| format!("{:?} is not an agent type name", args.agent))?;
    let registry = registry(nats, &subjects, args.timeout_ms).await?;
    let book = registry.notebook(&agent).await.context(START_ONE)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&book)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{}: {} session(s) with an outcome",
        book.agent, book.sessions
    );
    if book.collaborators.is_empty() {
        println!(
            "no collaborators yet: no finished session had {} and another agent on its path",
            book.agent
        );
        return Ok(ExitCode::SUCCESS);
    }
    let now = now_ms();
    let rows = book.collaborators.iter().map(|c| {
        vec![
            c.agent.to_string(),
            c.sessions.to_string(),
            c.resolved.to_string(),
            c.escalated.to_string(),
            c.failed.to_string(),
            c.reopened.to_string(),
            format!("{:.2}", c.reward),
            format!("{:.1}s", c.mean_duration_ms as f64 / 1000.0),
            baton_proto::amount(c.cost_micros),
            c.feedback_score
                .map_or_else(|| "-".to_owned(), |s| format!("{s:.2} ({})", c.feedback)),
            format!("{}s ago", now.saturating_sub(c.last_at) / 1000),
        ]
    });
    let header = [
        "COLLABORATOR",
        "SESSIONS",
        "RESOLVED",
        "ESCALATED",
        "FAILED",
        "REOPENED",
        "REWARD",
        "MEAN TIME",
        "COST",
        "FEEDBACK",
        "LAST",
    ];
    print_table(&header, rows);
    Ok(ExitCode::SUCCESS)
}
