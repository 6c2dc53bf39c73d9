//! `baton replay` (a finished session run again, reusing what it recorded)
//! and `baton diff` (where two sessions part).

use baton_proto::Subjects;

use crate::args::{DiffArgs, NatsArgs, ReplayArgs};
use crate::session::{Shown, session_id, variable};

pub async fn replay(
    nats: &NatsArgs,
    subjects: Subjects,
    args: ReplayArgs,
) -> anyhow::Result<std::process::ExitCode> {
    let session = session_id(&args.session)?;
    let set = args
        .set
        .iter()
        .map(|pair| variable("--set", pair))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let options = baton_worker::SessionReplay {
        from: args
            .from
            .map(|hop| usize::try_from(hop).unwrap_or(usize::MAX)),
        set,
        model: args.model.clone(),
        call_tools: args.call_tools,
        stream: !args.waiting.no_stream,
    };
    let client = crate::nats::client(nats, subjects, baton_ops::RoleKind::Client).await?;
    let (task, agent) = client.replay_of(session, &options).await?;
    let events = if args.waiting.wait {
        Some(client.follow(task.session).await?)
    } else {
        None
    };
    client.submit_to(&agent, &task).await?;
    if !args.waiting.json && args.waiting.wait {
        println!("replaying {session} as {}", task.session);
    }
    Shown::from(&args.waiting).outcome(&task, events).await
}

pub async fn diff(
    nats: &NatsArgs,
    subjects: Subjects,
    args: DiffArgs,
) -> anyhow::Result<std::process::ExitCode> {
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
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    })
}
