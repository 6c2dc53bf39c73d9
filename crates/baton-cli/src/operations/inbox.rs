//! `baton inbox`: what waits for a person.

use baton_agents::{Decision, Inbox, Reply};
use baton_proto::{AgentName, Subjects};
use clap::Subcommand;

use super::authorize::Person;
use crate::nats::NatsArgs;

#[derive(Debug, Subcommand)]
pub enum InboxCommand {
    /// List what waits for a person: tasks for a human agent, tool calls whose outcome is
    /// unknown (reason tool_outcome_unknown), tool calls waiting for approval (reason
    /// approval_required) and tool calls whose MCP server wants a new sign-in (reason
    /// authorization_required), with id, agent, reason and the question or the call.
    Ls {
        /// Print JSON lines: id, session, agent, reason, since, query, and for a tool call
        /// tool and arguments (a JSON object) and made_at; for one that wants a new
        /// sign-in, server and scope.
        #[arg(long)]
        json: bool,
    },
    /// Show one waiting task with its whole context.
    Show {
        /// Task id, as `baton inbox ls` shows it.
        id: String,
    },
    /// Answer a waiting task. The answer is added to the conversation; then the session
    /// completes with it (the default) or goes on to another agent.
    Reply {
        /// Task id, as `baton inbox ls` shows it.
        id: String,
        /// The answer.
        text: String,
        /// Hand the session to this agent type instead of completing it.
        #[arg(long, conflicts_with = "complete")]
        handoff: Option<String>,
        /// Complete the session with the answer (the default).
        #[arg(long)]
        complete: bool,
        /// Complete the session with an answer in A2A's terms, for a task that came
        /// through `baton a2a serve`: a JSON object with `message` (parts of a direct
        /// answer), `artifacts` or `reject` (the reason), as an exec agent's `a2a`
        /// output entry. TEXT is what the conversation keeps.
        #[arg(long, value_name = "JSON", conflicts_with = "handoff")]
        a2a: Option<String>,
        /// Who answers, recorded as the instance on the path (default: $USER).
        #[arg(
            long = "as",
            value_name = "NAME",
            env = "USER",
            default_value = "person"
        )]
        person: String,
    },
    /// Settle a tool call whose outcome is unknown (reason tool_outcome_unknown): the worker
    /// stopped between making it and recording its result, and its tool must not be called
    /// twice. Check the system the tool acts on, then say what happened: exactly one of
    /// --happened, --not-happened and --fail.
    #[command(group(clap::ArgGroup::new("decision").required(true).args(["happened", "not_happened", "fail"])))]
    Resolve {
        /// Entry id, as `baton inbox ls` shows it.
        id: String,
        /// The call happened: the agent goes on with --result as the tool's result, without
        /// calling the tool or asking the model again.
        #[arg(long)]
        happened: bool,
        /// The call did not happen: the agent makes it, once.
        #[arg(long)]
        not_happened: bool,
        /// Fail the session (reason tool_outcome_unknown, with --note).
        #[arg(long)]
        fail: bool,
        /// With --happened: the call's result, as the model should read it.
        #[arg(long, value_name = "TEXT", requires = "happened")]
        result: Option<String>,
        /// With --fail: why, recorded in the session's failure.
        #[arg(long, value_name = "TEXT", requires = "fail")]
        note: Option<String>,
        #[command(flatten)]
        person: Person,
    },
    /// Approve a tool call waiting for approval (reason approval_required): it is made once,
    /// with exactly the arguments shown.
    Approve {
        /// Entry id, as `baton inbox ls` shows it.
        id: String,
        #[command(flatten)]
        person: Person,
    },
    /// Sign in again for a tool call its MCP server refused (reason authorization_required:
    /// the server asked for more scopes, or the kept sign-in ran out and could not be
    /// refreshed). Runs the sign-in as `baton mcp login` does, as the same client, asking for
    /// the scopes the sign-in had and those the server named; keeps it for every worker; and
    /// the waiting call is made again.
    Authorize(super::authorize::AuthorizeArgs),
    /// Deny a tool call waiting for approval: it is not made, and the model reads that it was
    /// denied, with --note.
    Deny {
        /// Entry id, as `baton inbox ls` shows it.
        id: String,
        /// Why, for the model.
        #[arg(long, value_name = "TEXT")]
        note: Option<String>,
        #[command(flatten)]
        person: Person,
    },
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
    let inbox = Inbox::open(client.client().clone(), subjects.clone(), nats.replicas()).await?;
    match command {
        InboxCommand::Ls { json } => list(&inbox, json).await?,
        InboxCommand::Show { id } => show(&inbox, &id).await?,
        InboxCommand::Reply {
            id,
            text,
            handoff,
            complete: _,
            a2a,
            person,
        } => {
            let reply = replying(handoff, a2a.as_deref())?;
            answer(&inbox, &id, &text, reply, &person).await?;
        }
        InboxCommand::Resolve {
            id,
            happened,
            not_happened,
            fail: _,
            result,
            note,
            person,
        } => {
            let decision = match (happened, not_happened) {
                (true, _) => Decision::Happened(result),
                (_, true) => Decision::NotHappened,
                _ => Decision::Fail(note),
            };
            decide(&inbox, &id, decision, &person.person).await?;
        }
        InboxCommand::Approve { id, person } => {
            decide(&inbox, &id, Decision::Approve, &person.person).await?;
        }
        InboxCommand::Deny { id, note, person } => {
            decide(&inbox, &id, Decision::Deny(note), &person.person).await?;
        }
        InboxCommand::Authorize(args) => {
            let signed =
                super::authorize::sign_in_again(client.client(), &subjects, nats, &inbox, &args)
                    .await?;
            println!("{signed}");
            decide(&inbox, &args.id, Decision::Authorized, &args.person.person).await?;
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// `baton inbox ls`: one line (or JSON object) per waiting task.
async fn list(inbox: &Inbox, json: bool) -> anyhow::Result<()> {
    let entries = inbox.list().await?;
    if json {
        for entry in &entries {
            let envelope = &entry.envelope;
            let mut line = serde_json::json!({
                "id": envelope.id.to_string(),
                "session": envelope.session.to_string(),
                "agent": entry.agent(),
                "from": envelope.from,
                "reason": entry.reason().map(|r| r.as_str().to_owned()),
                "since": entry.since,
                "query": envelope.context.initial_query,
            });
            if let Some(gate) = entry.gate() {
                line["tool"] = serde_json::json!(gate.tool);
                line["arguments"] =
                    serde_json::from_str(&gate.arguments).unwrap_or(serde_json::Value::Null);
                line["made_at"] = serde_json::json!(gate.at);
                if let Some(authorize) = &gate.authorize {
                    line["server"] = serde_json::json!(authorize.server);
                    line["scope"] = serde_json::json!(authorize.scope);
                }
            }
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
            let question: String = match entry.gate() {
                Some(gate) => format!("{} {}", gate.tool, gate.arguments),
                None => envelope.context.initial_query.clone(),
            }
            .chars()
            .take(60)
            .collect();
            println!(
                "{:<36}  {:<16} {:<18} {:<16} {question}",
                envelope.id.to_string(),
                entry.agent(),
                entry.reason().map_or("-", |r| r.as_str()),
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
    println!("path     {}", baton_gateway::text::path(&envelope.path));
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
            println!("  {key} = {}", baton_gateway::text::value(value));
        }
    }
    println!();
    match entry.gate() {
        Some(gate) => {
            println!("tool     {}", gate.tool);
            println!("args     {}", gate.arguments);
            println!("waits    {} (since {} unix ms)", gate.reason, gate.at);
            if let Some(authorize) = &gate.authorize {
                println!("server   {} ({})", authorize.server, authorize.why);
                if let Some(scope) = &authorize.scope {
                    println!("scope    {scope}");
                }
                println!(
                    "settle with: baton inbox authorize {} [--open-with CMD]",
                    envelope.id
                );
            } else if gate.reason == baton_proto::Reason::ApprovalRequired {
                println!(
                    "settle with: baton inbox approve {0}  |  baton inbox deny {0} [--note TEXT]",
                    envelope.id
                );
            } else {
                println!(
                    "settle with: baton inbox resolve {} --happened [--result TEXT] | --not-happened | --fail [--note TEXT]",
                    envelope.id
                );
            }
        }
        None => println!(
            "answer with: baton inbox reply {} \"...\" [--handoff AGENT]",
            envelope.id
        ),
    }
    Ok(())
}

/// `baton inbox resolve | approve | deny ID`: settles a waiting tool call.
async fn decide(inbox: &Inbox, id: &str, decision: Decision, person: &str) -> anyhow::Result<()> {
    let person = baton_proto::token_safe(person);
    let next = inbox.resolve(id, decision, &person).await?;
    println!("{id} settled: {next}");
    Ok(())
}

/// What `--handoff` or `--a2a` say of a reply (neither: it completes).
fn replying(handoff: Option<String>, a2a: Option<&str>) -> anyhow::Result<Reply> {
    if let Some(agent) = handoff {
        let to =
            AgentName::new(agent).map_err(|err| anyhow::anyhow!("invalid --handoff: {err}"))?;
        return Ok(Reply::Handoff(to));
    }
    let Some(said) = a2a else {
        return Ok(Reply::Complete);
    };
    let said: serde_json::Value = serde_json::from_str(said).map_err(|err| {
        anyhow::anyhow!(
            "--a2a is not JSON ({err}): give an object, e.g. '{{\"reject\": \"not ours\"}}'"
        )
    })?;
    let known = ["message", "artifacts", "reject"];
    anyhow::ensure!(
        said.as_object().is_some_and(
            |map| !map.is_empty() && map.keys().all(|key| known.contains(&key.as_str()))
        ),
        "--a2a takes an object of `message`, `artifacts` and `reject`, e.g. '{{\"reject\": \"not ours\"}}'"
    );
    let output = rmpv::ext::to_value(serde_json::json!({ "a2a": said }))?;
    Ok(Reply::Output(output))
}

/// `baton inbox reply ID TEXT`: answers a waiting task.
async fn answer(
    inbox: &Inbox,
    id: &str,
    text: &str,
    reply: Reply,
    person: &str,
) -> anyhow::Result<()> {
    let person = baton_proto::token_safe(person);
    let asks = inbox.entry(id).await?.is_some_and(|entry| {
        entry
            .gate()
            .is_some_and(|gate| gate.reason == baton_proto::Reason::InputRequired)
    });
    if asks {
        anyhow::ensure!(
            !matches!(reply, Reply::Output(_)),
            "{id} is an agent's question to the user: answer it with text alone (no --a2a)"
        );
        // An agent asked the user (ask_user): the answer resumes it.
        let next = inbox
            .resolve(id, Decision::Answer(text.to_owned()), &person)
            .await?;
        println!("{id} answered: {next}");
        return Ok(());
    }
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
