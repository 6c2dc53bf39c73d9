//! `baton feedback`: how well a finished session went.

use std::process::ExitCode;

use anyhow::Context as _;
use baton_proto::{FeedbackRequest, Subjects};
use clap::Args;

use super::registry::registry;
use crate::nats::NatsArgs;

#[derive(Debug, Args)]
pub struct FeedbackArgs {
    /// The session, as `baton send` printed it.
    pub session: String,

    /// How well it went: 0 (not resolved) to 1 (fully resolved).
    #[arg(long, allow_negative_numbers = true)]
    pub score: f64,

    /// What to say about it (kept with the score; at most 2000 characters).
    #[arg(long)]
    pub note: Option<String>,

    /// How long to keep asking when no registry answers, in ms.
    #[arg(long, default_value_t = 3000)]
    pub timeout_ms: u64,
}

/// `baton feedback SESSION --score X [--note TEXT]`.
pub async fn run(
    nats: &NatsArgs,
    subjects: Subjects,
    args: FeedbackArgs,
) -> anyhow::Result<ExitCode> {
    // Checked here too, so that a typo is refused before connecting.
    anyhow::ensure!(
        (0.0..=1.0).contains(&args.score),
        "--score {} is out of range: give a number from 0 (not resolved) to 1 (fully resolved)",
        args.score
    );
    let session = uuid::Uuid::parse_str(args.session.trim()).with_context(|| {
        format!(
            "{:?} is not a session id (as `baton send` prints it)",
            args.session
        )
    })?;
    let registry = registry(nats, &subjects, args.timeout_ms).await?;
    let request = FeedbackRequest {
        session: session.to_string(),
        score: args.score,
        note: args.note,
        extra: baton_proto::Map::new(),
    };
    let reply = registry
        .feedback(&request)
        .await
        .context("no feedback was recorded")?;
    println!(
        "feedback {} recorded for session {session}, credited to {}",
        args.score,
        if reply.credited.is_empty() {
            "no agent".to_owned()
        } else {
            reply.credited.join(", ")
        }
    );
    Ok(ExitCode::SUCCESS)
}
