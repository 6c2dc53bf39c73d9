//! Agents in code: Python agents written with the `baton` package
//! (sdk/python), run by real workers as persistent exec programs. Their
//! steps, model calls and tool calls go through the worker and its hop
//! journal; each side effect is counted in a file, so a test sees what ran
//! once, and what ran twice.

pub(crate) mod durable;
pub(crate) mod eval;
pub(crate) mod history;
pub(crate) mod protocol;
pub(crate) mod scaffold;
pub(crate) mod scale;
pub(crate) mod sessions;
pub(crate) mod tools;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use baton_proto::{AgentName, Envelope, Event};
use serde_json::Value as Json;

use crate::util::System;

/// A system with the Python agent `coder` (of `agents/durable.py`).
pub(crate) struct Coder {
    pub(crate) system: System,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) spec: PathBuf,
    pub(crate) counts: PathBuf,
    pub(crate) pidfile: PathBuf,
}

/// The test agents' program.
fn program() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/code/agents/durable.py")
}

/// The package, for the program's `PYTHONPATH`.
fn package() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sdk/python")
}

impl Coder {
    /// A system and `coder`'s spec for `mode`, with `env` for the program
    /// and `extra` after the `[exec]` tables (`[llm]`, `[[mcp]]`).
    pub(crate) async fn start(
        mode: &str,
        env: &[(&str, &str)],
        extra: &str,
    ) -> anyhow::Result<Self> {
        let system = System::start().await?;
        let dir = tempfile::tempdir()?;
        let counts = dir.path().join("counts");
        let pidfile = dir.path().join("pid");
        let mut vars = vec![
            (
                "PYTHONPATH".to_owned(),
                package().to_string_lossy().into_owned(),
            ),
            ("MODE".to_owned(), mode.to_owned()),
            ("COUNTS".to_owned(), counts.to_string_lossy().into_owned()),
            ("PIDFILE".to_owned(), pidfile.to_string_lossy().into_owned()),
        ];
        vars.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        let env: Vec<String> = vars.iter().map(|(k, v)| format!("{k} = {v:?}")).collect();
        let text = format!(
            "name = \"coder\"\nkind = \"exec\"\nconcurrency = 64\ntimeout_ms = 20000\n\n[retry]\nmax_attempts = 4\nmin_backoff_ms = 50\nmax_backoff_ms = 200\n\n[exec]\ncommand = [\"python3\", {:?}]\nmode = \"persistent\"\n\n[exec.env]\n{}\n{extra}",
            program().to_string_lossy(),
            env.join("\n")
        );
        let spec = dir.path().join("coder.toml");
        std::fs::write(&spec, text)?;
        Ok(Self {
            system,
            dir,
            spec,
            counts,
            pidfile,
        })
    }

    /// Makes steps that may pause (`pause_here` in the program) wait while
    /// the returned file exists; it exists now.
    pub(crate) fn pausing(&self) -> anyhow::Result<PathBuf> {
        let pause = self.dir.path().join("pause");
        std::fs::write(&pause, "")?;
        let spec = std::fs::read_to_string(&self.spec)?;
        let line = format!("[exec.env]\nPAUSE = {:?}\n", pause.to_string_lossy());
        std::fs::write(&self.spec, spec.replace("[exec.env]\n", &line))?;
        Ok(pause)
    }

    /// Kills the program, or (`worker`) the worker `w1` and its program,
    /// then starts worker `w2`.
    pub(crate) async fn kill(&mut self, worker: bool) -> anyhow::Result<()> {
        if worker {
            self.system.process("w1").kill9();
            self.kill_program()?;
            self.worker("w2").await
        } else {
            self.kill_program()
        }
    }

    /// Starts a worker of `coder` as process `label`.
    pub(crate) async fn worker(&mut self, label: &str) -> anyhow::Result<()> {
        let spec = self.spec.clone();
        self.system
            .spec_worker(label, &spec, &["--no-registry"])
            .await
    }

    /// Sends `text` to `coder`.
    pub(crate) async fn send(&self, text: &str) -> anyhow::Result<Envelope> {
        let mut task = Envelope::task(text);
        task.replayable = true;
        self.system
            .client
            .submit_to(&AgentName::new("coder")?, &task)
            .await?;
        Ok(task)
    }

    /// How many times each side effect ran.
    pub(crate) fn counts(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for line in std::fs::read_to_string(&self.counts)
            .unwrap_or_default()
            .lines()
        {
            *counts.entry(line.to_owned()).or_default() += 1;
        }
        counts
    }

    /// How many times `effect` ran.
    pub(crate) fn count(&self, effect: &str) -> usize {
        self.counts().get(effect).copied().unwrap_or(0)
    }

    /// Waits until `effect` ran `n` times.
    pub(crate) async fn reached(&self, effect: &str, n: usize) -> anyhow::Result<()> {
        baton_testkit::eventually(Duration::from_secs(30), || async {
            let seen = self.count(effect);
            anyhow::ensure!(
                seen >= n,
                "{effect} ran {seen} times, not yet {n}: {:?}",
                self.counts()
            );
            Ok(())
        })
        .await?;
        Ok(())
    }

    /// Kills the Python program with SIGKILL.
    pub(crate) fn kill_program(&self) -> anyhow::Result<()> {
        let pid = std::fs::read_to_string(&self.pidfile)?;
        let killed = std::process::Command::new("kill")
            .args(["-9", pid.trim()])
            .status()?;
        anyhow::ensure!(killed.success(), "cannot kill {pid}");
        Ok(())
    }

    /// The session's events until its end.
    pub(crate) async fn end(&self, task: &Envelope) -> anyhow::Result<Vec<Event>> {
        self.system
            .session_events(task.session, Duration::from_secs(60))
            .await
    }

    /// The session's events until its end, which must be `completed`, and
    /// that end.
    pub(crate) async fn completed(&self, task: &Envelope) -> anyhow::Result<(Vec<Event>, Event)> {
        completed(self.end(task).await?)
    }

    /// `baton ARGS`: its stdout.
    pub(crate) fn baton(&self, args: &[&str]) -> anyhow::Result<String> {
        self.system.baton_stdout(args)
    }

    /// The inbox, as `baton inbox ls --json` lists it.
    pub(crate) fn inbox(&self) -> anyhow::Result<Vec<Json>> {
        self.baton(&["inbox", "ls", "--json"])?
            .lines()
            .map(|line| Ok(serde_json::from_str(line)?))
            .collect()
    }

    /// The inbox entry waiting with `reason`, once there is one.
    pub(crate) async fn entry(&self, reason: &str) -> anyhow::Result<Json> {
        baton_testkit::eventually(Duration::from_secs(30), || async {
            let entries = self.inbox()?;
            (entries.iter().find(|e| e["reason"] == reason).cloned())
                .ok_or_else(|| anyhow::anyhow!("no {reason} entry yet: {entries:?}"))
        })
        .await
        .map_err(Into::into)
    }
}

/// What `event` carries as output, as JSON.
pub(crate) fn output(event: &Event) -> Json {
    (event.output.as_ref())
        .and_then(|output| serde_json::to_value(output).ok())
        .unwrap_or(Json::Null)
}

/// Runs `task` on `agent` to its end, which must be `completed`: the
/// session's events and that end.
pub(crate) async fn run_completed(
    system: &System,
    agent: &str,
    task: &Envelope,
) -> anyhow::Result<(Vec<Event>, Event)> {
    completed(system.run(agent, task).await?)
}

/// A session's `events`, whose end must be `completed`, and that end.
fn completed(events: Vec<Event>) -> anyhow::Result<(Vec<Event>, Event)> {
    let end = (events.last().cloned()).context("the session ended with no event")?;
    anyhow::ensure!(
        end.kind == baton_proto::EventType::Completed,
        "{:?} {:?}",
        crate::util::kinds(&events),
        end.detail
    );
    Ok((events, end))
}

/// What the conversation `end` carries says, message by message.
pub(crate) fn said(end: &Event) -> Vec<String> {
    (end.context.iter())
        .flat_map(|context| context.messages.iter())
        .map(|message| message.content.clone())
        .collect()
}

/// The tool calls `events` show (steps as `step:NAME`), with their outcome.
pub(crate) fn shown(events: &[Event]) -> Vec<String> {
    (events.iter())
        .filter(|e| e.kind == baton_proto::EventType::ToolCalled)
        .filter_map(|e| e.detail.as_deref())
        .map(|detail| {
            detail
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// The `[llm]` table of an exec spec for the stand-in model `llm` (an exec
/// agent's needs only `base_url` and `model`), then `more` lines.
pub(crate) fn llm_table(llm: &baton_testkit::FakeLlm, more: &str) -> String {
    format!(
        "\n[llm]\nbase_url = \"{}\"\nmodel = \"stand-in\"\n{more}",
        llm.url()
    )
}
