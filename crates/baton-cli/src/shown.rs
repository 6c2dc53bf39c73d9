//! How a session a command started is shown: its id, or its outcome as it
//! ends, with answers as they are written.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use baton_proto::{Envelope, Event, EventType};
use clap::Args;
use futures::StreamExt;
use uuid::Uuid;

use crate::printer::Printer;

/// How `send` and `replay` show the session they start.
#[derive(Debug, Args)]
pub struct Waiting {
    /// Wait for the session to end and print its outcome; exit 1 if it failed, 3 if it
    /// waits for a person (see `baton inbox`).
    #[arg(long)]
    pub wait: bool,

    /// Do not ask for answers as they are written. By default the session asks its LLM
    /// agents to stream, and --wait (and `baton watch`) print the text as it comes.
    #[arg(long)]
    pub no_stream: bool,

    /// With --wait: how long to wait, in seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_secs: u64,

    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// How a started session is shown: as JSON or text, with its answers as
/// they are written, waiting this long for its end.
pub struct Shown {
    pub(crate) json: bool,
    pub(crate) stream: bool,
    pub(crate) timeout_secs: u64,
}

impl From<&Waiting> for Shown {
    fn from(waiting: &Waiting) -> Self {
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
        events: Option<baton_client::EventStream>,
    ) -> anyhow::Result<ExitCode> {
        let Some(events) = events else {
            if self.json {
                println!(
                    "{}",
                    serde_json::json!({"session": task.session.to_string(), "id": task.id.to_string()})
                );
            } else {
                println!("{}", task.session);
            }
            return Ok(ExitCode::SUCCESS);
        };
        self.ended(task.session, events).await
    }

    /// Prints the outcome of `session`, followed as `events` (to where it
    /// rests: `Client::follow_to_rest`, a conversation turn's events), once
    /// it ends or waits for a person; the exit code that goes with it.
    pub(crate) async fn ended(
        &self,
        session: Uuid,
        events: baton_client::EventStream,
    ) -> anyhow::Result<ExitCode> {
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
            EventType::Completed => ExitCode::SUCCESS,
            EventType::Waiting => {
                if !self.json {
                    println!(
                        "waiting for a person: answer with `baton inbox reply {} TEXT` (see `baton inbox ls`)",
                        end.envelope.map(|id| id.to_string()).unwrap_or_default()
                    );
                }
                ExitCode::from(EXIT_WAITING)
            }
            _ => ExitCode::FAILURE,
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
    events: baton_client::EventStream,
    mut printer: Option<&mut Printer>,
) -> anyhow::Result<baton_proto::Event> {
    let mut events = events;
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
        last = Some(event);
    }
    last.filter(|end| end.kind == EventType::Waiting || end.kind.is_terminal())
        .context("the event stream ended before the session did")
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
