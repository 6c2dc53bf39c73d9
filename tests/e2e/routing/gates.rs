//! Nothing doubled, nothing unapproved: an LLM agent's MCP tool calls
//! against a ledger server written with the official MCP Python SDK
//! (`scripts/ledger.py`), which annotates one tool per class and counts
//! its own side effects. Workers are killed -9 mid-call; a person settles
//! in-doubt calls and approvals through `baton inbox`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use baton_proto::{AgentName, Envelope, EventType};
use baton_testkit::{FakeLlm, Scripted, eventually};
use serde_json::{Value as Json, json};

use crate::util::System;

/// The ledger server of one test: its URL, its log of calls and effects,
/// and the file that makes a call stall.
pub(crate) struct Ledger {
    port: u16,
    log: PathBuf,
    control: PathBuf,
    keyed: bool,
    /// Seconds each call waits before and after it takes effect.
    delay_s: f64,
}

impl Ledger {
    /// Starts a ledger as process `ledger` of `system`, its files in `dir`;
    /// `keyed`: it honours the idempotency key.
    pub(crate) async fn start(
        system: &mut System,
        dir: &Path,
        keyed: bool,
        delay_s: f64,
    ) -> anyhow::Result<Self> {
        let (ledger, process) = Self::alone(dir, keyed, delay_s).await?;
        system.adopt("ledger", process);
        Ok(ledger)
    }

    /// [`Ledger::start`] before any system: the server and its process
    /// (stopped when dropped).
    pub(crate) async fn alone(
        dir: &Path,
        keyed: bool,
        delay_s: f64,
    ) -> anyhow::Result<(Self, baton_testkit::ChildProcess)> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let ledger = Self {
            port,
            log: dir.join("ledger.jsonl"),
            control: dir.join("ledger.control"),
            keyed,
            delay_s,
        };
        let process = ledger.spawn().await?;
        Ok((ledger, process))
    }

    /// Starts (again) the server process, and waits until it listens.
    async fn serve(&self, system: &mut System) -> anyhow::Result<()> {
        let process = self.spawn().await?;
        system.adopt("ledger", process);
        Ok(())
    }

    /// The server process, listening.
    async fn spawn(&self) -> anyhow::Result<baton_testkit::ChildProcess> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/scripts/ledger.py");
        let mut server = std::process::Command::new("python3");
        server
            .arg(script)
            .args(["--http", &self.port.to_string()])
            .env("LEDGER_LOG", &self.log)
            .env("LEDGER_CONTROL", &self.control)
            .env("LEDGER_DELAY_S", self.delay_s.to_string());
        if self.keyed {
            server.env("LEDGER_KEYED", "1");
        }
        let process = baton_testkit::ChildProcess::spawn(server, "ledger")?;
        let port = self.port;
        eventually(Duration::from_secs(20), || async move {
            std::net::TcpStream::connect(("127.0.0.1", port)).map(drop)
        })
        .await?;
        Ok(process)
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Makes the next calls of `tool` stall (`stall-after`: after taking
    /// effect; `stall-before`: before), until [`Ledger::calm`].
    pub(crate) fn stall(&self, mode: &str, tool: &str) -> anyhow::Result<()> {
        Ok(std::fs::write(&self.control, format!("{mode} {tool}"))?)
    }

    fn calm(&self) -> anyhow::Result<()> {
        Ok(std::fs::write(&self.control, "")?)
    }

    /// Every line the ledger logged for `tool`: effects and keyed repeats.
    pub(crate) fn lines(&self, tool: &str) -> Vec<Json> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str::<Json>(line).ok())
            .filter(|line| line["tool"] == tool)
            .collect()
    }

    /// The side effects `tool` took.
    pub(crate) fn effects(&self, tool: &str) -> usize {
        self.lines(tool)
            .iter()
            .filter(|line| line["repeat"] != true)
            .count()
    }

    /// Waits until `tool` took `count` effects.
    pub(crate) async fn until(&self, tool: &str, count: usize) -> anyhow::Result<()> {
        eventually(Duration::from_secs(30), || {
            let now = self.effects(tool);
            std::future::ready(if now == count {
                Ok(())
            } else {
                Err(format!("{tool}: {now} effects, waiting for {count}"))
            })
        })
        .await?;
        Ok(())
    }
}

/// A system for one test: the model stand-in with its script, a ledger,
/// and the teller's spec on it, with the steps the tests take.
pub(crate) struct Teller {
    pub(crate) llm: FakeLlm,
    dir: tempfile::TempDir,
    pub(crate) system: System,
    pub(crate) ledger: Ledger,
    pub(crate) spec: String,
}

impl Teller {
    /// `keyed`: the ledger honours the idempotency key; `extra` goes in
    /// the spec's `[[mcp]]` table. No worker runs yet.
    pub(crate) async fn start(
        script: Vec<Scripted>,
        keyed: bool,
        extra: &str,
    ) -> anyhow::Result<Self> {
        Self::with(FakeLlm::start(script)?, keyed, 0.0, extra).await
    }

    /// As [`Teller::start`], with the model stand-in `llm` and a ledger
    /// whose calls take `delay_s` before and after their effect.
    pub(crate) async fn with(
        llm: FakeLlm,
        keyed: bool,
        delay_s: f64,
        extra: &str,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut system = System::start().await?;
        let ledger = Ledger::start(&mut system, dir.path(), keyed, delay_s).await?;
        let spec = teller_spec(dir.path(), &llm, &ledger, extra)?;
        Ok(Self {
            llm,
            dir,
            system,
            ledger,
            spec,
        })
    }

    /// Starts a teller worker as process `label`, with a short `ack_wait`
    /// so a killed worker's message comes back soon, and its metrics on a
    /// free port (see [`Teller::metrics`]).
    pub(crate) async fn worker(&mut self, label: &str) -> anyhow::Result<()> {
        let mut args = vec!["worker", "--spec", &self.spec, "--no-registry"];
        args.extend_from_slice(&["--ack-wait-secs", "2", "--metrics-addr", "127.0.0.1:0"]);
        self.system.spawn(label, &args, "worker started").await
    }

    /// The value of sample `name` with `labels` on worker `label`'s
    /// metrics, if it has one.
    pub(crate) fn metrics(
        &mut self,
        label: &str,
        name: &str,
        labels: &[(&str, &str)],
    ) -> anyhow::Result<Option<f64>> {
        let url = crate::operations::metrics::metrics_url(self.system.process(label).stderr())?;
        sample(&url, name, labels)
    }

    /// Sends `text` to the teller, straight to its subject.
    pub(crate) async fn send(&self, text: &str) -> anyhow::Result<Envelope> {
        let task = Envelope::task(text);
        let teller = AgentName::new("teller")?;
        self.system.client.submit_to(&teller, &task).await?;
        Ok(task)
    }

    /// The end of `task`'s session.
    pub(crate) async fn end(&self, task: &Envelope) -> anyhow::Result<baton_proto::Event> {
        let wait = Duration::from_secs(30);
        Ok(self.system.client.wait(task.session, wait).await?)
    }

    /// Kills worker `label` once `tool` took `effects` effects (its call
    /// stalls there), calms the ledger, and starts worker `next`.
    pub(crate) async fn kill_during(
        &mut self,
        tool: &str,
        effects: usize,
        label: &str,
        next: &str,
    ) -> anyhow::Result<()> {
        self.ledger.until(tool, effects).await?;
        self.system.process(label).kill9();
        self.ledger.calm()?;
        self.worker(next).await
    }

    /// Sends `text`, whose call of `tool` with `arguments` takes effect and
    /// stalls until its worker is killed; the task, and the inbox entry the
    /// next worker parks it under.
    pub(crate) async fn in_doubt(
        &mut self,
        text: &str,
        tool: &str,
        arguments: &Json,
    ) -> anyhow::Result<(Envelope, Json)> {
        self.ledger.stall("stall-after", tool)?;
        self.worker("w1").await?;
        let task = self.send(text).await?;
        self.kill_during(tool, 1, "w1", "w2").await?;
        let entry = self.entry("tool_outcome_unknown", tool, arguments).await?;
        Ok((task, entry))
    }

    /// The inbox, as `baton inbox ls --json` lists it.
    pub(crate) fn inbox(&self) -> anyhow::Result<Vec<Json>> {
        self.system
            .baton_stdout(&["inbox", "ls", "--json"])?
            .lines()
            .map(|line| Ok(serde_json::from_str(line)?))
            .collect()
    }

    /// The inbox entry waiting with `reason` for a call of `tool` with
    /// `arguments`, once there is one.
    pub(crate) async fn entry(
        &self,
        reason: &str,
        tool: &str,
        arguments: &Json,
    ) -> anyhow::Result<Json> {
        let found = eventually(Duration::from_secs(30), || async {
            let entries = self.inbox()?;
            entries
                .iter()
                .find(|e| {
                    e["reason"] == reason && e["tool"] == tool && &e["arguments"] == arguments
                })
                .cloned()
                .ok_or_else(|| {
                    anyhow::anyhow!("no {reason} entry for {tool} {arguments}: {entries:?}")
                })
        })
        .await?;
        Ok(found)
    }

    /// `baton ARGS`, expected to succeed: its stdout.
    pub(crate) fn baton(&self, args: &[&str]) -> anyhow::Result<String> {
        self.system.baton_stdout(args)
    }

    /// `baton ARGS`, expected to fail: its stderr.
    pub(crate) fn refused(&self, args: &[&str]) -> anyhow::Result<String> {
        let output = tokio::task::block_in_place(|| self.system.baton(args).output())?;
        anyhow::ensure!(
            !output.status.success(),
            "baton {args:?} should have failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        Ok(String::from_utf8_lossy(&output.stderr).into_owned())
    }

    /// The kinds of `task`'s stored events.
    pub(crate) async fn kinds(&self, task: &Envelope) -> anyhow::Result<Vec<EventType>> {
        let events = self.system.stored_events(task.session).await?;
        Ok(events.into_iter().map(|e| e.kind).collect())
    }

    /// The content of the last message the model was sent in request `n`.
    pub(crate) fn last_said(&self, n: usize) -> String {
        self.llm.requests()[n].body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_owned()
    }

    /// How many requests the model got.
    pub(crate) fn asked(&self) -> usize {
        self.llm.requests().len()
    }
}

/// The value of sample `name` with `labels` at `url`, if it has one.
fn sample(url: &str, name: &str, labels: &[(&str, &str)]) -> anyhow::Result<Option<f64>> {
    let has = |s: &crate::operations::metrics::Sample| {
        labels
            .iter()
            .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
    };
    Ok(crate::operations::metrics::scrape(url)?
        .into_iter()
        .find(|s| s.name == name && has(s))
        .map(|s| s.value))
}

/// A spec for the LLM agent `teller` on `ledger`, with `extra` in its
/// `[[mcp]]` table; its fallback `human` has no worker, so a session that
/// went there would show it.
fn teller_spec(dir: &Path, llm: &FakeLlm, ledger: &Ledger, extra: &str) -> anyhow::Result<String> {
    let spec = dir.join(format!("teller-{}.toml", ledger.port));
    std::fs::write(
        &spec,
        format!(
            r#"name = "teller"
kind = "llm"
timeout_ms = 60000
fallback = "human"

[llm]
base_url = "{}"
model = "test-model"
system_prompt = "You run the ledger."

[[mcp]]
url = "{}"
timeout_ms = 60000
{extra}
"#,
            llm.url(),
            ledger.url()
        ),
    )?;
    Ok(spec.to_string_lossy().into_owned())
}

/// The ledger's tool call `tool` with `arguments` (a JSON object), as the model makes it.
pub(crate) fn call(tool: &str, arguments: &Json) -> Scripted {
    Scripted::tool_calls(&[(tool, &arguments.to_string())])
}

#[tokio::test(flavor = "multi_thread")]
async fn read_only_and_idempotent_calls_are_made_again_after_a_kill() -> anyhow::Result<()> {
    let script = vec![
        call("balance", &json!({"account": "A"})),
        call("set_limit", &json!({"account": "A", "limit": 100})),
        Scripted::text("Limit set."),
    ];
    let mut t = Teller::start(script, false, "").await?;
    let check = t.baton(&["check", "--tools", &t.spec])?;
    for class in [
        "tool balance: read-only",
        "tool set_limit: idempotent",
        "tool transfer: not repeatable",
        "tool close_account: not repeatable",
    ] {
        assert!(check.contains(class), "{class}: {check}");
    }
    t.ledger.stall("stall-after", "balance")?;
    t.worker("w1").await?;
    let log = t.system.process("w1").stderr();
    assert!(
        log.contains("tool=balance class=read-only")
            && log.contains("tool=transfer class=not repeatable"),
        "the start log names each tool's class: {log}"
    );
    let task = t.send("Set A's limit to 100.").await?;
    t.kill_during("balance", 1, "w1", "w2").await?;
    t.ledger.stall("stall-after", "set_limit")?;
    t.kill_during("set_limit", 1, "w2", "w3").await?;
    assert_eq!(t.end(&task).await?.kind, EventType::Completed);
    // Each in-doubt call was made again; no answered step was asked again.
    let counts = (t.ledger.effects("balance"), t.ledger.effects("set_limit"));
    assert_eq!((counts, t.asked()), ((2, 2), 3));
    assert!(t.inbox()?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_honours_the_key_gets_the_repeat_with_the_same_key() -> anyhow::Result<()> {
    let script = vec![
        call("transfer", &json!({"account": "A", "amount": 5})),
        Scripted::text("Sent."),
    ];
    let mut t = Teller::start(script, true, "idempotent = true").await?;
    let check = t.baton(&["check", "--tools", &t.spec])?;
    assert!(check.contains("tool transfer: keyed"), "{check}");
    t.ledger.stall("stall-after", "transfer")?;
    t.worker("w1").await?;
    let task = t.send("Send 5 from A.").await?;
    t.kill_during("transfer", 1, "w1", "w2").await?;
    assert_eq!(t.end(&task).await?.kind, EventType::Completed);
    let lines = t.ledger.lines("transfer");
    assert_eq!(lines.len(), 2, "made again: {lines:?}");
    assert_eq!(lines[0]["key"], lines[1]["key"], "with the same key");
    assert_eq!(t.ledger.effects("transfer"), 1, "and the server acted once");
    // Each worker introduced itself to the server as Baton.
    assert!(
        lines.iter().all(|line| line["client"] == "baton"),
        "{lines:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unannotated_call_in_doubt_goes_to_the_inbox_and_happened_goes_on_without_it()
-> anyhow::Result<()> {
    let args = json!({"account": "A", "amount": 5});
    let script = vec![call("transfer", &args), Scripted::text("Sent.")];
    let mut t = Teller::start(script, false, "").await?;
    let sent = baton_proto::now_ms();
    let (task, waiting) = t.in_doubt("Send 5 from A.", "transfer", &args).await?;

    // The runbook's contract: id, reason, tool, arguments (an object).
    let id = waiting["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(waiting["agent"], "teller");
    assert_eq!(waiting["session"], task.session.to_string());
    let made = waiting["made_at"].as_u64().unwrap_or_default();
    assert!(made >= sent && made <= baton_proto::now_ms(), "{waiting}");
    // Not made again; the session waits, and no fallback agent has it.
    let kinds = t.kinds(&task).await?;
    assert_eq!(kinds.last(), Some(&EventType::Waiting), "{kinds:?}");
    assert!(!kinds.contains(&EventType::Escalated), "{kinds:?}");
    assert_eq!(t.ledger.effects("transfer"), 1);

    // The wrong command for the entry, and an answer, are refused.
    let wrong = t.refused(&["inbox", "approve", &id])?;
    assert!(wrong.contains("baton inbox resolve"), "{wrong}");
    let reply = t.refused(&["inbox", "reply", &id, "done"])?;
    assert!(reply.contains("not a question"), "{reply}");

    let result = "transfer T-77 of 5 done";
    let settled = t.baton(&["inbox", "resolve", &id, "--happened", "--result", result])?;
    assert!(settled.contains("not made again"), "{settled}");
    assert_eq!(t.end(&task).await?.kind, EventType::Completed);
    // The model read the person's result; nothing was asked or made twice.
    assert_eq!((t.asked(), t.last_said(1)), (2, result.to_owned()));
    assert_eq!(t.ledger.effects("transfer"), 1);
    let ends = t
        .kinds(&task)
        .await?
        .iter()
        .filter(|k| k.is_terminal())
        .count();
    assert_eq!(ends, 1);

    // Settling again is refused and changes nothing.
    let again = t.refused(&["inbox", "resolve", &id, "--not-happened"])?;
    assert!(again.contains("settled already"), "{again}");
    let unknown = t.refused(&["inbox", "approve", "no-such-entry"])?;
    assert!(unknown.contains("nothing is waiting"), "{unknown}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(t.ledger.effects("transfer"), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_in_doubt_call_that_did_not_happen_is_made_once() -> anyhow::Result<()> {
    let args = json!({"account": "A", "amount": 7});
    let script = vec![call("transfer", &args), Scripted::text("Sent.")];
    let mut t = Teller::start(script, false, "").await?;
    t.ledger.stall("stall-before", "transfer")?;
    t.worker("w1").await?;
    let task = t.send("Send 7 from A.").await?;
    // The call is under way (the model asked for it), not yet in effect:
    // the worker and the server both die, so it never happens.
    let llm = &t.llm;
    eventually(Duration::from_secs(20), || {
        let asked = llm.requests().len();
        std::future::ready(if asked == 1 {
            Ok(())
        } else {
            Err("no model call yet")
        })
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(800)).await;
    t.system.process("w1").kill9();
    t.system.process("ledger").kill9();
    t.ledger.calm()?;
    t.ledger.serve(&mut t.system).await?;
    t.worker("w2").await?;
    let waiting = t.entry("tool_outcome_unknown", "transfer", &args).await?;
    assert_eq!(t.ledger.effects("transfer"), 0);
    let id = waiting["id"].as_str().unwrap_or_default();
    t.baton(&["inbox", "resolve", id, "--not-happened"])?;
    assert_eq!(t.end(&task).await?.kind, EventType::Completed);
    assert_eq!(
        t.ledger.effects("transfer"),
        1,
        "made once, after the person's word"
    );
    assert_eq!(t.asked(), 2, "the answered step was not asked again");
    assert!(
        t.last_said(1).starts_with("transfer done"),
        "{}",
        t.last_said(1)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_can_fail_the_session_over_an_in_doubt_call() -> anyhow::Result<()> {
    let args = json!({"account": "A", "amount": 9});
    let mut t = Teller::start(vec![call("transfer", &args)], false, "").await?;
    let (task, waiting) = t.in_doubt("Send 9 from A.", "transfer", &args).await?;
    let id = waiting["id"].as_str().unwrap_or_default();
    let note = "the bank cannot tell";
    t.baton(&[
        "inbox", "resolve", id, "--fail", "--note", note, "--as", "ops",
    ])?;
    let end = t.end(&task).await?;
    assert_eq!(end.kind, EventType::Failed);
    assert_eq!(
        end.reason.as_ref().map(|r| r.as_str()),
        Some("tool_outcome_unknown")
    );
    let detail = end.detail.clone().unwrap_or_default();
    assert!(detail.contains(note) && detail.contains("ops"), "{detail}");
    // Failed, not handed to the fallback; one end; the call made once.
    let kinds = t.kinds(&task).await?;
    assert!(!kinds.contains(&EventType::Escalated), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| k.is_terminal()).count(), 1);
    assert_eq!((t.ledger.effects("transfer"), t.asked()), (1, 1));
    let labels = [("tool", "transfer"), ("decision", "fail")];
    let counted = t.metrics("w2", "baton_tool_in_doubt_total", &labels)?;
    assert_eq!(counted, Some(1.0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn destructive_calls_wait_for_approval_bound_to_their_arguments() -> anyhow::Result<()> {
    let (a, b) = (json!({"account": "A"}), json!({"account": "B"}));
    let script = vec![
        call("balance", &a),
        call("close_account", &a),
        call("close_account", &b),
        Scripted::text("Closed A; B stays open."),
    ];
    let mut t = Teller::start(script, false, "approve = \"destructive\"").await?;
    t.worker("w1").await?;
    let task = t.send("Close A and B.").await?;

    // The read-only lookup went ahead; the close waits, not made.
    let first = t.entry("approval_required", "close_account", &a).await?;
    assert_eq!(t.ledger.effects("balance"), 1);
    assert_eq!(t.ledger.effects("close_account"), 0);
    let kinds = t.kinds(&task).await?;
    assert!(
        kinds.contains(&EventType::ToolApprovalRequested),
        "{kinds:?}"
    );
    let url = crate::operations::metrics::metrics_url(t.system.process("w1").stderr())?;
    let pending = eventually(Duration::from_secs(10), || async {
        match sample(&url, "baton_tool_approvals_pending", &[("agent", "teller")])? {
            Some(n) if n == 1.0 => Ok(n),
            other => anyhow::bail!("pending approvals: {other:?}"),
        }
    })
    .await?;
    assert_eq!(pending, 1.0);
    let calls = [
        ("tool", "balance"),
        ("class", "read-only"),
        ("outcome", "ok"),
    ];
    assert_eq!(
        t.metrics("w1", "baton_tool_calls_total", &calls)?,
        Some(1.0)
    );
    let asked = [("tool", "close_account"), ("decision", "waiting")];
    assert_eq!(
        sample(&url, "baton_tool_approvals_total", &asked)?,
        Some(1.0)
    );

    // Everything restarts while it waits (the NATS server with its store,
    // the MCP server, the worker); the approval is still asked for.
    t.system.process("w1").kill9();
    t.system.process("ledger").kill9();
    tokio::task::block_in_place(|| t.system.server.restart())?;
    t.ledger.serve(&mut t.system).await?;
    let still = t.entry("approval_required", "close_account", &a).await?;
    assert_eq!(still["id"], first["id"]);
    // Approved while no worker runs: honoured once when one starts.
    let id = first["id"].as_str().unwrap_or_default();
    t.baton(&["inbox", "approve", id, "--as", "ops"])?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(t.ledger.effects("close_account"), 0);
    t.worker("w2").await?;
    t.ledger.until("close_account", 1).await?;

    // Other arguments need an approval of their own; a denial reaches the model.
    let second = t.entry("approval_required", "close_account", &b).await?;
    assert_ne!(second["id"], first["id"]);
    let again = t.refused(&["inbox", "approve", id])?;
    assert!(again.contains("settled already"), "{again}");
    let id = second["id"].as_str().unwrap_or_default();
    let note = "B has a payment pending";
    t.baton(&["inbox", "deny", id, "--note", note])?;
    assert_eq!(t.end(&task).await?.kind, EventType::Completed);
    assert_eq!(t.ledger.effects("close_account"), 1, "A once, B never");
    let denied = t.last_said(3);
    assert!(
        denied.starts_with("error: denied") && denied.contains(note),
        "{denied}"
    );
    assert_eq!(t.asked(), 4, "no answered step asked again");
    let kinds = t.kinds(&task).await?;
    let count = |kind: EventType| kinds.iter().filter(|k| **k == kind).count();
    let decided = [
        EventType::ToolApprovalRequested,
        EventType::ToolApproved,
        EventType::ToolDenied,
    ]
    .map(count);
    assert_eq!(decided, [2, 1, 1]);
    for decision in ["approved", "denied"] {
        let labels = [("tool", "close_account"), ("decision", decision)];
        let counted = t.metrics("w2", "baton_tool_approvals_total", &labels)?;
        assert_eq!(counted, Some(1.0), "{decision}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn approve_naming_a_tool_the_server_lacks_stops_the_worker() -> anyhow::Result<()> {
    let extra = "approve = [\"transfer\", \"wire_money\"]";
    let t = Teller::start(vec![], false, extra).await?;
    let stderr = t.refused(&["worker", "--spec", &t.spec, "--no-registry"])?;
    let missing = "approve lists \"wire_money\", which the server does not have";
    assert!(stderr.contains(missing), "{stderr}");
    let bad = teller_spec(t.dir.path(), &t.llm, &t.ledger, "approve = \"sometimes\"")?;
    let stderr = t.refused(&["check", &bad])?;
    assert!(
        stderr.contains("approve = \"sometimes\" is not a choice"),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_shows_waiting_calls_with_their_arguments_and_settles_them()
-> anyhow::Result<()> {
    use crate::gateways::console::{browser, console};
    let evil = "<img src=x onerror=\"window.__pwned=1\">";
    let args = json!({"account": evil, "amount": 3});
    let close = json!({"account": "C"});
    let script = vec![
        call("transfer", &args),
        Scripted::text("Sent."),
        call("close_account", &close),
        Scripted::text("Closed."),
    ];
    let mut t = Teller::start(script, false, "approve = [\"close_account\"]").await?;
    let url = console(&mut t.system, "console", &[]).await?;

    // An in-doubt call: shown with its arguments as text, and three decisions.
    let (task, _) = t.in_doubt("Send 3.", "transfer", &args).await?;
    let session = task.session.to_string();
    let result = "transfer T-9 of 3 done";
    let seen = browser(&["decide", &url, &session, "happened", result])?;
    assert_eq!(seen["reason"], "tool_outcome_unknown", "{seen}");
    assert_eq!(seen["tool"], "transfer", "{seen}");
    assert_eq!(seen["arguments"], args, "{seen}");
    assert_eq!(
        seen["buttons"],
        json!(["happened", "not_happened", "fail"]),
        "{seen}"
    );
    assert_eq!(seen["pwned"], Json::Null, "{seen}");
    assert_eq!(seen["errors"], json!([]), "{seen}");
    assert!(
        seen["notice"]
            .as_str()
            .unwrap_or_default()
            .contains("decided"),
        "{seen}"
    );
    assert_eq!(t.end(&task).await?.kind, EventType::Completed);
    assert_eq!(t.last_said(1), result);
    assert_eq!(t.ledger.effects("transfer"), 1);

    // A call waiting for approval: two decisions; approved from the page.
    let task = t.send("Close C.").await?;
    t.entry("approval_required", "close_account", &close)
        .await?;
    assert_eq!(t.ledger.effects("close_account"), 0);
    let seen = browser(&["decide", &url, &task.session.to_string(), "approved"])?;
    assert_eq!(seen["buttons"], json!(["approved", "denied"]), "{seen}");
    assert_eq!(t.end(&task).await?.kind, EventType::Completed);
    assert_eq!(t.ledger.effects("close_account"), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn random_kills_double_no_write_when_a_person_settles_every_call_in_doubt()
-> anyhow::Result<()> {
    const SESSIONS: usize = 20;
    const STEPS: usize = 3;
    // Each session transfers 1, 2, then 3 from its own account, one call a
    // step; the answer follows from the conversation.
    let llm = FakeLlm::responding(|body| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let done = messages.iter().filter(|m| m["role"] == "tool").count();
        let account = messages
            .iter()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_owned();
        if done < STEPS {
            call("transfer", &json!({"account": account, "amount": done + 1}))
        } else {
            Scripted::text("all sent")
        }
    })?;
    // The ledger ignores the idempotency key and takes 0.15 s on either
    // side of each effect, so kills land before and after effects.
    let mut t = Teller::with(llm, false, 0.15, "").await?;
    for worker in ["w0", "w1"] {
        t.worker(worker).await?;
    }
    let mut tasks = Vec::new();
    for n in 0..SESSIONS {
        tasks.push(t.send(&format!("acct-{n}")).await?);
    }
    let mut live = vec!["w0".to_owned(), "w1".to_owned()];
    let kills = 5;
    for kill in 0..kills {
        tokio::time::sleep(Duration::from_millis(fastrand::u64(400..1200))).await;
        let victim = live.remove(fastrand::usize(..live.len()));
        t.system.process(&victim).kill9();
        let next = format!("w{}", kill + 2);
        t.worker(&next).await?;
        live.push(next);
    }
    // A person works the inbox as the runbook says: a call whose effect
    // the ledger shows happened; any other did not.
    let (mut happened, mut not_happened) = (0, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        for entry in t.inbox()? {
            let id = entry["id"].as_str().unwrap_or_default().to_owned();
            let took = t
                .ledger
                .lines("transfer")
                .iter()
                .any(|l| l["args"] == entry["arguments"]);
            let decision = if took { "--happened" } else { "--not-happened" };
            if t.baton(&["inbox", "resolve", &id, decision]).is_ok() {
                *(if took {
                    &mut happened
                } else {
                    &mut not_happened
                }) += 1;
            }
        }
        let mut ended = 0;
        for task in &tasks {
            ended += usize::from(t.kinds(task).await?.iter().any(EventType::is_terminal));
        }
        if ended == SESSIONS {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{ended} of {SESSIONS} ended"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let mut doubled = 0;
    let mut wrong = 0;
    for (n, task) in tasks.iter().enumerate() {
        let account = format!("acct-{n}");
        let mut amounts: Vec<u64> = t
            .ledger
            .lines("transfer")
            .iter()
            .filter(|l| l["args"]["account"] == account.as_str())
            .filter_map(|l| l["args"]["amount"].as_u64())
            .collect();
        amounts.sort_unstable();
        doubled += amounts.len().saturating_sub(STEPS);
        wrong += usize::from(amounts != [1, 2, 3]);
        let kinds = t.kinds(task).await?;
        let ends: Vec<_> = kinds.iter().filter(|k| k.is_terminal()).collect();
        wrong += usize::from(ends != [&EventType::Completed]);
    }
    println!(
        "{SESSIONS} sessions x {STEPS} transfers, {kills} kills: {} calls in doubt settled by a person \
         ({happened} happened, {not_happened} did not), {doubled} transfers doubled, {wrong} sessions wrong",
        happened + not_happened
    );
    assert_eq!((doubled, wrong), (0, 0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_entry_of_a_cancelled_session_is_not_settled() -> anyhow::Result<()> {
    let args = json!({"account": "A", "amount": 4});
    let script = vec![call("transfer", &args), Scripted::text("Sent.")];
    let mut t = Teller::start(script, false, "").await?;
    let (task, waiting) = t.in_doubt("Send 4 from A.", "transfer", &args).await?;
    let session = task.session.to_string();
    t.baton(&["cancel", &session, "--detail", "customer hung up"])?;
    let id = waiting["id"].as_str().unwrap_or_default();
    let refused = t.refused(&["inbox", "resolve", id, "--not-happened"])?;
    assert!(refused.contains("was cancelled"), "{refused}");
    // Nothing was made again, and the session keeps its one end.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!((t.ledger.effects("transfer"), t.asked()), (1, 1));
    let kinds = t.kinds(&task).await?;
    assert_eq!(
        kinds.iter().filter(|k| k.is_terminal()).count(),
        1,
        "{kinds:?}"
    );
    assert!(t.inbox()?.is_empty(), "the entry left the inbox");
    Ok(())
}
