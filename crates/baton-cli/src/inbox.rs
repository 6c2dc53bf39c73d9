//! `baton check` and `baton inbox`: the commands around spec-defined agents.

use baton_agents::{Inbox, Reply};
use baton_proto::{AgentName, Subjects};

use crate::args::{CheckArgs, InboxCommand, NatsArgs};

/// `baton check FILE…`: errors with file, line and fix; cross-spec warnings.
pub fn check(args: &CheckArgs) -> std::process::ExitCode {
    let report = baton_agents::check(&args.files);
    for error in &report.errors {
        eprintln!("error: {error}");
    }
    for warning in &report.warnings {
        eprintln!("warning: {warning}");
    }
    for spec in &report.specs {
        println!(
            "ok: {} ({}, tier {}) from {}",
            spec.name,
            match spec.kind {
                baton_agents::Kind::Exec(_) => "exec",
                baton_agents::Kind::Llm(_) => "llm",
                baton_agents::Kind::Human(_) => "human",
                baton_agents::Kind::Chain(_) => "chain",
                baton_agents::Kind::A2a(_) => "a2a",
            },
            spec.profile.tier,
            spec.file.display()
        );
    }
    if report.errors.is_empty() {
        std::process::ExitCode::SUCCESS
    } else {
        eprintln!(
            "{} error(s) in {} file(s)",
            report.errors.len(),
            args.files.len() - report.specs.len()
        );
        std::process::ExitCode::FAILURE
    }
}

pub async fn run(
    nats: &NatsArgs,
    subjects: Subjects,
    command: InboxCommand,
) -> anyhow::Result<std::process::ExitCode> {
    let client = crate::nats::connect(
        nats,
        None,
        &baton_ops::Role::of(baton_ops::RoleKind::Operator),
    )
    .await?;
    let inbox = Inbox::open(client.client().clone(), subjects, nats.replicas()).await?;
    match command {
        InboxCommand::Ls { json } => list(&inbox, json).await?,
        InboxCommand::Show { id } => show(&inbox, &id).await?,
        InboxCommand::Reply {
            id,
            text,
            handoff,
            complete: _,
            person,
        } => reply(&inbox, &id, &text, handoff, &person).await?,
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// `baton inbox ls`: one line (or JSON object) per waiting task.
async fn list(inbox: &Inbox, json: bool) -> anyhow::Result<()> {
    let entries = inbox.list().await?;
    if json {
        for entry in &entries {
            let envelope = &entry.envelope;
            let line = serde_json::json!({
                "id": envelope.id.to_string(),
                "session": envelope.session.to_string(),
                "agent": entry.agent(),
                "from": envelope.from,
                "reason": envelope.reason.as_ref().map(|r| r.as_str().to_owned()),
                "since": entry.since,
                "query": envelope.context.initial_query,
            });
            println!("{line}");
        }
    } else if entries.is_empty() {
        println!("no tasks are waiting");
    } else {
        println!(
            "{:<36}  {:<16} {:<18} {:<16} question",
            "id", "agent", "reason", "from"
        );
        for entry in &entries {
            let envelope = &entry.envelope;
            let question: String = envelope.context.initial_query.chars().take(60).collect();
            println!(
                "{:<36}  {:<16} {:<18} {:<16} {question}",
                envelope.id.to_string(),
                entry.agent(),
                envelope.reason.as_ref().map_or("-", |r| r.as_str()),
                envelope.from.as_deref().unwrap_or("-"),
            );
        }
    }
    Ok(())
}

/// `baton inbox show ID`: the whole context of one waiting task.
async fn show(inbox: &Inbox, id: &str) -> anyhow::Result<()> {
    let entry = inbox
        .entry(id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no task {id} is waiting (see `baton inbox ls`)"))?;
    let envelope = &entry.envelope;
    let context = &envelope.context;
    println!("task     {}", envelope.id);
    println!("session  {}", envelope.session);
    println!("for      {}", entry.agent());
    println!("path     {}", crate::session::show_path(&envelope.path));
    if let Some(reason) = &envelope.reason {
        println!("reason   {reason}");
    }
    if let Some(advice) = &envelope.suggested_next_action {
        println!("advice   {advice}");
    }
    println!("question {}", context.initial_query);
    if !context.problem.is_empty() {
        println!("problem  {}", context.problem);
    }
    println!();
    for message in &context.messages {
        let who = message.name.as_deref().unwrap_or(message.role.as_str());
        println!("  {who}: {}", message.content);
    }
    if !context.variables.is_empty() {
        println!();
        for (key, value) in &context.variables {
            println!("  {key} = {}", crate::session::show_value(value));
        }
    }
    println!();
    println!(
        "answer with: baton inbox reply {} \"...\" [--handoff AGENT]",
        envelope.id
    );
    Ok(())
}

/// `baton inbox reply ID TEXT`: answers a waiting task.
async fn reply(
    inbox: &Inbox,
    id: &str,
    text: &str,
    handoff: Option<String>,
    person: &str,
) -> anyhow::Result<()> {
    let reply = match handoff {
        Some(agent) => Reply::Handoff(
            AgentName::new(agent).map_err(|err| anyhow::anyhow!("invalid --handoff: {err}"))?,
        ),
        None => Reply::Complete,
    };
    let person = baton_proto::token_safe(person);
    let event = inbox.reply(id, text, reply, &person).await?;
    let to = event.to.as_deref().unwrap_or("?");
    match event.kind {
        baton_proto::EventType::Result => println!(
            "answer sent to {to}, which delegated the task (session {})",
            event.session
        ),
        baton_proto::EventType::Handoff => println!("session {} handed to {to}", event.session),
        _ => println!("session {} completed", event.session),
    }
    Ok(())
}
