//! `baton cancel`: end a session as cancelled.

use std::process::ExitCode;

use baton_proto::Subjects;
use clap::Args;

use super::session_id;
use crate::nats::NatsArgs;

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Session id, as `baton send` printed it.
    pub session: String,

    /// Why, recorded as the `failed` event's detail.
    #[arg(long, default_value = "cancelled by an operator")]
    pub detail: String,
}

pub async fn run(
    nats: &NatsArgs,
    subjects: Subjects,
    args: CancelArgs,
) -> anyhow::Result<ExitCode> {
    let session = session_id(&args.session)?;
    let client = crate::nats::client(nats, subjects, baton_ops::RoleKind::Client).await?;
    match client.cancel(session, &args.detail).await? {
        baton_client::Cancel::Cancelled(event) => {
            println!("{}", baton_gateway::text::line(&event));
            Ok(ExitCode::SUCCESS)
        }
        baton_client::Cancel::Ended(event) => {
            eprintln!(
                "session {session} had ended already: {}",
                baton_gateway::text::line(&event)
            );
            Ok(ExitCode::from(1))
        }
    }
}
