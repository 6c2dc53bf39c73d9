//! `baton dlq ls` and `baton dlq replay`.

use baton_proto::Subjects;
use clap::Subcommand;

use crate::nats::NatsArgs;

#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List dead letters: sequence, agent, reason, session and detail.
    Ls {
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Publish a dead letter again (as a new message), then remove it: to the agent type it was
    /// stored from, at the version its session is pinned to there, or back to the ingress.
    Replay {
        /// Sequence number shown by `baton dlq ls`.
        seq: u64,
        /// Keep the dead letter after replaying it.
        #[arg(long)]
        keep: bool,
        /// Give the session this many more ms from now (a `deadline_exceeded` letter needs it).
        #[arg(long, value_name = "MS")]
        extend_deadline: Option<u64>,
    },
}

pub async fn run(
    nats: &NatsArgs,
    subjects: Subjects,
    command: DlqCommand,
) -> anyhow::Result<std::process::ExitCode> {
    let client = crate::nats::client(nats, subjects, baton_ops::RoleKind::Operator).await?;
    match command {
        DlqCommand::Ls { json } => {
            let entries = client.dead_letters().await?;
            if json {
                for entry in &entries {
                    let line = serde_json::json!({
                        "seq": entry.seq,
                        "subject": entry.subject,
                        "reason": entry.reason.as_str(),
                        "detail": entry.detail,
                        "agent": entry.agent,
                        "original_subject": entry.original_subject,
                        "deliveries": entry.deliveries,
                        "session": entry.session.map(|s| s.to_string()),
                        "envelope": entry.envelope.map(|s| s.to_string()),
                        "bytes": entry.payload.len(),
                    });
                    println!("{line}");
                }
            } else if entries.is_empty() {
                println!("no dead letters");
            } else {
                println!(
                    "{:>6}  {:<20} {:<18} {:<36}  detail",
                    "seq", "agent", "reason", "session"
                );
                for entry in &entries {
                    let session = entry
                        .session
                        .map_or_else(|| "-".to_owned(), |s| s.to_string());
                    println!(
                        "{:>6}  {:<20} {:<18} {:<36}  {}",
                        entry.seq, entry.agent, entry.reason, session, entry.detail
                    );
                }
            }
        }
        DlqCommand::Replay {
            seq,
            keep,
            extend_deadline,
        } => {
            let options = baton_client::ReplayOptions::default()
                .keep(keep)
                .extend_deadline(extend_deadline.map(std::time::Duration::from_millis));
            let id = client.replay(seq, options).await?;
            println!(
                "replayed dead letter {seq} as message {id}{}",
                if keep { " (kept in the DLQ)" } else { "" }
            );
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}
