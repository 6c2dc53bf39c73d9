//! `baton send`, `baton watch` and `baton cancel`, and how sessions are shown to people.

use std::time::Duration;

use anyhow::Context as _;
use baton_proto::{AgentName, Envelope, Event, EventType, Subjects, Value, now_ms};
use futures::StreamExt;
use uuid::Uuid;

use crate::args::{CancelArgs, NatsArgs, SendArgs, WatchArgs};
use crate::live::Printer;

/// `task` with what `args` set: its target, requirements, variables, hop
/// budget, deadline and token budget.
fn options(mut task: Envelope, args: &SendArgs) -> anyhow::Result<Envelope> {
    if let Some(to) = &args.to {
        AgentName::new(to.as_str()).context("invalid --to")?;
        task = task.with_to(to.clone());
    }
    task.requires = args.requires.clone();
    task.stream = !args.waiting.no_stream;
    task.replayable = true;
    for pair in &args.vars {
        let (key, value) = variable("--var", pair)?;
        task = task.with_variable(key, value);
    }
    if let Some(max_hops) = args.max_hops {
        task = task.with_max_hops(max_hops);
    }
    if let Some(ms) = args.deadline_ms {
        task = task.with_deadline(now_ms() + ms);
    }
    if args.budget_tokens.is_some() || args.budget_cost.is_some() {
        task.budget = Some(baton_proto::Budget {
            tokens: args.budget_tokens,
            cost_micros: args.budget_cost,
        });
    }
    Ok(task)
}

pub async fn send(
    nats: &NatsArgs,
    subjects: Subjects,
    args: SendArgs,
) -> anyhow::Result<std::process::ExitCode> {
    let task = options(task(&args)?, &args)?;
    let client = crate::nats::client(nats, subjects, baton_ops::RoleKind::Client).await?;
    // Followed before it is sent, so no live piece of an answer comes
    // before the wait does.
    let events = if args.waiting.wait {
        Some(client.follow(task.session).await?)
    } else {
        None
    };
    if args.direct {
        let to = AgentName::new(args.to.clone().unwrap_or_default()).context("invalid --to")?;
        client.submit_to(&to, &task).await?;
    } else if let Some(to) = &args.to {
        // The router would fail it with `no_route`; say so before sending.
        client.check_served(&AgentName::new(to.as_str())?).await?;
        client.submit(&task).await?;
    } else {
        client.submit(&task).await?;
    }
    Shown::from(&args.waiting).outcome(&task, events).await
}

/// How a started session is shown: as JSON or text, with its answers as
/// they are written, waiting this long for its end.
pub(crate) struct Shown {
    pub(crate) json: bool,
    pub(crate) stream: bool,
    pub(crate) timeout_secs: u64,
}

impl From<&crate::args::Waiting> for Shown {
    fn from(waiting: &crate::args::Waiting) -> Self {
        Self {
            json: waiting.json,
            stream: !waiting.no_stream,
            timeout_secs: waiting.timeout_secs,
        }
    }
}

impl Shown {
    /// Prints the session `task` started: its id; or, with `events` (the
    /// session followed before it was sent), its outcome, and the exit code
    /// that goes with it.
    pub(crate) async fn outcome(
        &self,
        task: &Envelope,
        events: Option<baton_worker::EventStream>,
    ) -> anyhow::Result<std::process::ExitCode> {
        let Some(events) = events else {
            if self.json {
                println!(
                    "{}",
                    serde_json::json!({"session": task.session.to_string(), "id": task.id.to_string()})
                );
            } else {
                println!("{}", task.session);
            }
            return Ok(std::process::ExitCode::SUCCESS);
        };
        self.ended(task.session, events).await
    }

    /// Prints the outcome of `session`, followed as `events`, once it ends
    /// or waits for a person; the exit code that goes with it.
    pub(crate) async fn ended(
        &self,
        session: Uuid,
        events: baton_worker::EventStream,
    ) -> anyhow::Result<std::process::ExitCode> {
        let timeout = Duration::from_secs(self.timeout_secs);
        let mut printer = (!self.json && self.stream).then(Printer::default);
        let ended = tokio::time::timeout(timeout, outcome(events, printer.as_mut())).await;
        if let Some(printer) = printer.as_mut() {
            if let Ok(Ok(end)) = &ended {
                printer.complete(end);
            }
            printer.end();
        }
        let end = match ended {
            Ok(end) => end?,
            Err(_) => anyhow::bail!(
                "session {} did not end within {}s (it goes on; follow it with `baton watch {}`)",
                session,
                self.timeout_secs,
                session
            ),
        };
        if self.json {
            println!("{}", serde_json::to_string(&end)?);
        } else {
            println!("session {}", session);
            print_outcome(&end);
        }
        Ok(match end.kind {
            EventType::Completed => std::process::ExitCode::SUCCESS,
            EventType::Waiting => {
                if !self.json {
                    println!(
                        "waiting for a person: answer with `baton inbox reply {} TEXT` (see `baton inbox ls`)",
                        end.envelope.map(|id| id.to_string()).unwrap_or_default()
                    );
                }
                std::process::ExitCode::from(EXIT_WAITING)
            }
            _ => std::process::ExitCode::FAILURE,
        })
    }
}

/// `send --wait`'s exit code when the session waits for a person.
pub const EXIT_WAITING: u8 = 3;

/// The event that ends the wait: the session's terminal event, or a
/// `waiting` event (the session waits for a person). With a `printer`,
/// answers are printed as they are written, and the moves between agents
/// as lines between them.
async fn outcome(
    mut events: baton_worker::EventStream,
    mut printer: Option<&mut Printer>,
) -> anyhow::Result<baton_proto::Event> {
    let mut last = None;
    while let Some(event) = events.next().await {
        let event = event?;
        if let Some(printer) = printer.as_deref_mut() {
            let moved = matches!(
                event.kind,
                EventType::Handoff | EventType::Escalated | EventType::Delegated
            );
            // Between streamed answers, the moves between agents.
            if !printer.delta(&event) && moved && printer.streamed() {
                printer.line(&format!("  ↳ {}", baton_gateway::text::line(&event)));
            }
        }
        if event.kind == EventType::Waiting {
            return Ok(event);
        }
        if event.kind.is_terminal() {
            last = Some(event);
        }
    }
    last.context("the event stream ended before the session did")
}

/// The task the arguments describe: the message (argument, stdin or file)
/// on top of the `--context` file, if any.
pub(crate) fn task(args: &SendArgs) -> anyhow::Result<Envelope> {
    let text = match (&args.text, &args.file) {
        (Some(text), _) if text == "-" => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .context("cannot read the message from standard input")?;
            Some(text)
        }
        (Some(text), _) => Some(text.clone()),
        (None, Some(path)) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --file {}", path.display()))?,
        ),
        (None, None) => None,
    };
    let Some(path) = &args.context else {
        return Ok(Envelope::task(text.unwrap_or_default()));
    };
    let json =
        std::fs::read(path).with_context(|| format!("cannot read --context {}", path.display()))?;
    let context: baton_proto::Context = serde_json::from_slice(&json).with_context(|| {
        format!(
            "--context {}: not an envelope context (see proto-schemas/schema/envelope.schema.json, `context`)",
            path.display()
        )
    })?;
    let mut task = Envelope::task(String::new());
    task.context = context;
    if let Some(text) = text {
        if task.context.initial_query.is_empty() {
            task.context.initial_query.clone_from(&text);
        }
        task.context
            .messages
            .push(baton_proto::Message::new(baton_proto::Role::User, text));
    }
    Ok(task)
}

/// A `started` event of a session that replays none: the `accepted` line
/// before it says as much.
fn plain_start(event: &Event) -> bool {
    baton_proto::Start::from_event(event).is_some_and(|start| start.replay_of.is_none())
}

/// A variable given as `KEY=VALUE` to `flag`: VALUE read as JSON, else as
/// a string.
pub(crate) fn variable(flag: &str, pair: &str) -> anyhow::Result<(String, Value)> {
    let (key, value) = pair.split_once('=').with_context(|| {
        format!("invalid {flag} {pair:?}: write KEY=VALUE, e.g. {flag} order_id=ABC-123")
    })?;
    anyhow::ensure!(
        !key.is_empty(),
        "invalid {flag} {pair:?}: the variable's name is missing before ="
    );
    let json =
        serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.to_owned()));
    let value =
        rmpv::ext::to_value(json).with_context(|| format!("cannot convert {flag} value"))?;
    Ok((key.to_owned(), value))
}

/// A session id given on the command line.
pub(crate) fn session_id(text: &str) -> anyhow::Result<Uuid> {
    Uuid::parse_str(text).with_context(|| {
        format!("invalid session id {text:?}: pass the uuid printed by `baton send`")
    })
}

pub async fn cancel(
    nats: &NatsArgs,
    subjects: Subjects,
    args: CancelArgs,
) -> anyhow::Result<std::process::ExitCode> {
    let session = session_id(&args.session)?;
    let client = crate::nats::client(nats, subjects, baton_ops::RoleKind::Client).await?;
    match client.cancel(session, &args.detail).await? {
        baton_worker::Cancel::Cancelled(event) => {
            println!("{}", baton_gateway::text::line(&event));
            Ok(std::process::ExitCode::SUCCESS)
        }
        baton_worker::Cancel::Ended(event) => {
            eprintln!(
                "session {session} had ended already: {}",
                baton_gateway::text::line(&event)
            );
            Ok(std::process::ExitCode::from(1))
        }
    }
}

pub async fn watch(
    nats: &NatsArgs,
    subjects: Subjects,
    args: WatchArgs,
) -> anyhow::Result<std::process::ExitCode> {
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
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    })
}

/// The path and the answer (or the failure) of a terminal event.
pub fn print_outcome(event: &Event) {
    println!("  path:   {}", baton_gateway::text::path(&event.path));
    if let Some(usage) = &event.usage {
        println!("  spent:  {}", baton_gateway::text::spent(usage));
    }
    match event.kind {
        EventType::Waiting => {
            println!(
                "  waiting: {}",
                event.detail.as_deref().unwrap_or("for a person")
            );
        }
        EventType::Completed => {
            println!(
                "  answer: {}",
                event
                    .output
                    .as_ref()
                    .map(baton_gateway::text::value)
                    .unwrap_or_default()
            );
        }
        _ => {
            let reason = event.reason.as_ref().map_or("unknown", |r| r.as_str());
            println!(
                "  failed: {reason}: {}",
                event.detail.as_deref().unwrap_or("")
            );
        }
    }
}
