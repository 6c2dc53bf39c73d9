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
struct Ledger {
    port: u16,
    log: PathBuf,
    control: PathBuf,
    keyed: bool,
}

impl Ledger {
    /// Starts a ledger as process `ledger` of `system`, its files in `dir`;
    /// `keyed`: it honours the idempotency key.
    async fn start(system: &mut System, dir: &Path, keyed: bool) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let ledger = Self {
            port,
            log: dir.join("ledger.jsonl"),
            control: dir.join("ledger.control"),
            keyed,
        };
        ledger.serve(system).await?;
        Ok(ledger)
    }

    /// Starts (again) the server process, and waits until it listens.
    async fn serve(&self, system: &mut System) -> anyhow::Result<()> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/scripts/ledger.py");
        let mut server = std::process::Command::new("python3");
        server
            .arg(script)
            .args(["--http", &self.port.to_string()])
            .env("LEDGER_LOG", &self.log)
            .env("LEDGER_CONTROL", &self.control);
        if self.keyed {
            server.env("LEDGER_KEYED", "1");
        }
        system.adopt(
            "ledger",
            baton_testkit::ChildProcess::spawn(server, "ledger")?,
        );
        let port = self.port;
        eventually(Duration::from_secs(20), || async move {
            std::net::TcpStream::connect(("127.0.0.1", port)).map(drop)
        })
        .await?;
        Ok(())
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Makes the next calls of `tool` stall (`stall-after`: after taking
    /// effect; `stall-before`: before), until [`Ledger::calm`].
    fn stall(&self, mode: &str, tool: &str) -> anyhow::Result<()> {
        Ok(std::fs::write(&self.control, format!("{mode} {tool}"))?)
    }

    fn calm(&self) -> anyhow::Result<()> {
        Ok(std::fs::write(&self.control, "")?)
    }

    /// Every line the ledger logged for `tool`: effects and keyed repeats.
    fn lines(&self, tool: &str) -> Vec<Json> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str::<Json>(line).ok())
            .filter(|line| line["tool"] == tool)
            .collect()
    }

    /// The side effects `tool` took.
    fn effects(&self, tool: &str) -> usize {
        self.lines(tool)
            .iter()
            .filter(|line| line["repeat"] != true)
            .count()
    }

    /// Waits until `tool` took `count` effects.
    async fn until(&self, tool: &str, count: usize) -> anyhow::Result<()> {
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

/// A spec for the LLM agent `teller` on `ledger`, with `extra` in its
/// `[[mcp]]` table; its fallback `human` has no worker, so a session that
/// went there would show it.
fn teller_spec(dir: &Path, llm: &FakeLlm, ledger: &Ledger, extra: &str) -> anyhow::Result<String> {
    let spec = dir.join("teller.toml");
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

/// Starts a teller worker as process `label`, with a short `ack_wait` so a
/// killed worker's message comes back soon, and `flags`.
async fn teller(
    system: &mut System,
    label: &str,
    spec: &str,
    flags: &[&str],
) -> anyhow::Result<()> {
    let mut args = vec![
        "worker",
        "--spec",
        spec,
        "--no-registry",
        "--ack-wait-secs",
        "2",
    ];
    args.extend_from_slice(flags);
    system.spawn(label, &args, "worker started").await
}

/// Sends `text` to the teller, straight to its subject.
async fn send(system: &System, text: &str) -> anyhow::Result<Envelope> {
    let task = Envelope::task(text);
    system
        .client
        .submit_to(&AgentName::new("teller")?, &task)
        .await?;
    Ok(task)
}

/// The inbox, as `baton inbox ls --json` lists it.
fn inbox(system: &System) -> anyhow::Result<Vec<Json>> {
    system
        .baton_stdout(&["inbox", "ls", "--json"])?
        .lines()
        .map(|line| Ok(serde_json::from_str(line)?))
        .collect()
}

/// The inbox entry waiting with `reason` for a call of `tool` with
/// `arguments`, once there is one.
async fn entry(
    system: &System,
    reason: &str,
    tool: &str,
    arguments: &Json,
) -> anyhow::Result<Json> {
    let found = eventually(Duration::from_secs(30), || async {
        inbox(system)?
            .into_iter()
            .find(|e| e["reason"] == reason && e["tool"] == tool && &e["arguments"] == arguments)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "no {reason} entry for {tool} {arguments} yet: {:?}",
                    inbox(system)
                )
            })
    })
    .await?;
    Ok(found)
}

/// `baton ARGS`, expected to fail: its stderr.
fn refused(system: &System, args: &[&str]) -> anyhow::Result<String> {
    let output = tokio::task::block_in_place(|| system.baton(args).output())?;
    anyhow::ensure!(
        !output.status.success(),
        "baton {args:?} should have failed: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    Ok(String::from_utf8_lossy(&output.stderr).into_owned())
}

/// The kinds of `session`'s stored events.
async fn kinds_of(system: &System, session: uuid::Uuid) -> anyhow::Result<Vec<EventType>> {
    Ok(system
        .stored_events(session)
        .await?
        .into_iter()
        .map(|e| e.kind)
        .collect())
}

/// The content of the last message the model was sent in request `n`.
fn last_said(llm: &FakeLlm, n: usize) -> String {
    llm.requests()[n].body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// Kills the worker `label` once `tool` took `effects` effects (its call
/// stalls there), calms the ledger, and starts worker `next`.
async fn kill_during(
    system: &mut System,
    ledger: &Ledger,
    (tool, effects): (&str, usize),
    (label, next): (&str, &str),
    spec: &str,
) -> anyhow::Result<()> {
    ledger.until(tool, effects).await?;
    system.process(label).kill9();
    ledger.calm()?;
    teller(system, next, spec, &[]).await
}

#[tokio::test(flavor = "multi_thread")]
async fn read_only_and_idempotent_calls_are_made_again_after_a_kill() -> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![
        Scripted::tool_calls(&[("balance", r#"{"account": "A"}"#)]),
        Scripted::tool_calls(&[("set_limit", r#"{"account": "A", "limit": 100}"#)]),
        Scripted::text("Limit set."),
    ])?;
    let dir = tempfile::tempdir()?;
    let mut system = System::start().await?;
    let ledger = Ledger::start(&mut system, dir.path(), false).await?;
    let spec = teller_spec(dir.path(), &llm, &ledger, "")?;
    let check = system.baton_stdout(&["check", "--tools", &spec])?;
    for class in [
        "tool balance: read-only",
        "tool set_limit: idempotent",
        "tool transfer: not repeatable",
        "tool close_account: not repeatable",
    ] {
        assert!(check.contains(class), "{class}: {check}");
    }
    ledger.stall("stall-after", "balance")?;
    teller(&mut system, "w1", &spec, &[]).await?;
    let log = system.process("w1").stderr();
    assert!(
        log.contains("tool=balance class=read-only")
            && log.contains("tool=transfer class=not repeatable"),
        "the start log names each tool's class: {log}"
    );
    let task = send(&system, "Set A's limit to 100.").await?;
    kill_during(&mut system, &ledger, ("balance", 1), ("w1", "w2"), &spec).await?;
    ledger.stall("stall-after", "set_limit")?;
    kill_during(&mut system, &ledger, ("set_limit", 1), ("w2", "w3"), &spec).await?;
    let end = system
        .client
        .wait(task.session, Duration::from_secs(30))
        .await?;
    assert_eq!(end.kind, EventType::Completed);
    // Each in-doubt call was made again; no answered step was asked again.
    assert_eq!(
        (
            ledger.effects("balance"),
            ledger.effects("set_limit"),
            llm.requests().len()
        ),
        (2, 2, 3)
    );
    assert!(inbox(&system)?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_honours_the_key_gets_the_repeat_with_the_same_key() -> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![
        Scripted::tool_calls(&[("transfer", r#"{"account": "A", "amount": 5}"#)]),
        Scripted::text("Sent."),
    ])?;
    let dir = tempfile::tempdir()?;
    let mut system = System::start().await?;
    let ledger = Ledger::start(&mut system, dir.path(), true).await?;
    let spec = teller_spec(dir.path(), &llm, &ledger, "idempotent = true")?;
    let check = system.baton_stdout(&["check", "--tools", &spec])?;
    assert!(check.contains("tool transfer: keyed"), "{check}");
    ledger.stall("stall-after", "transfer")?;
    teller(&mut system, "w1", &spec, &[]).await?;
    let task = send(&system, "Send 5 from A.").await?;
    kill_during(&mut system, &ledger, ("transfer", 1), ("w1", "w2"), &spec).await?;
    let end = system
        .client
        .wait(task.session, Duration::from_secs(30))
        .await?;
    assert_eq!(end.kind, EventType::Completed);
    let lines = ledger.lines("transfer");
    assert_eq!(lines.len(), 2, "made again: {lines:?}");
    assert_eq!(lines[0]["key"], lines[1]["key"], "with the same key");
    assert_eq!(ledger.effects("transfer"), 1, "and the server acted once");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unannotated_call_in_doubt_goes_to_the_inbox_and_happened_goes_on_without_it()
-> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![
        Scripted::tool_calls(&[("transfer", r#"{"account": "A", "amount": 5}"#)]),
        Scripted::text("Sent."),
    ])?;
    let dir = tempfile::tempdir()?;
    let mut system = System::start().await?;
    let ledger = Ledger::start(&mut system, dir.path(), false).await?;
    let spec = teller_spec(dir.path(), &llm, &ledger, "")?;
    ledger.stall("stall-after", "transfer")?;
    teller(&mut system, "w1", &spec, &[]).await?;
    let sent = baton_proto::now_ms();
    let task = send(&system, "Send 5 from A.").await?;
    kill_during(&mut system, &ledger, ("transfer", 1), ("w1", "w2"), &spec).await?;

    // The runbook's contract: id, reason, tool, arguments (an object).
    let waiting = entry(
        &system,
        "tool_outcome_unknown",
        "transfer",
        &json!({"account": "A", "amount": 5}),
    )
    .await?;
    let id = waiting["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(waiting["agent"], "teller");
    assert_eq!(waiting["session"], task.session.to_string());
    let made = waiting["made_at"].as_u64().unwrap_or_default();
    assert!(made >= sent && made <= baton_proto::now_ms(), "{waiting}");
    // Not made again; the session waits, and no fallback agent has it.
    let kinds = kinds_of(&system, task.session).await?;
    assert_eq!(kinds.last(), Some(&EventType::Waiting), "{kinds:?}");
    assert!(!kinds.contains(&EventType::Escalated), "{kinds:?}");
    assert_eq!(ledger.effects("transfer"), 1);

    // The wrong command for the entry, and an answer, are refused.
    let wrong = refused(&system, &["inbox", "approve", &id])?;
    assert!(wrong.contains("baton inbox resolve"), "{wrong}");
    let reply = refused(&system, &["inbox", "reply", &id, "done"])?;
    assert!(reply.contains("not a question"), "{reply}");

    let settled = system.baton_stdout(&[
        "inbox",
        "resolve",
        &id,
        "--happened",
        "--result",
        "transfer T-77 of 5 done",
    ])?;
    assert!(settled.contains("not made again"), "{settled}");
    let end = system
        .client
        .wait(task.session, Duration::from_secs(30))
        .await?;
    assert_eq!(end.kind, EventType::Completed);
    // The model read the person's result; nothing was asked or made twice.
    assert_eq!(llm.requests().len(), 2);
    assert_eq!(last_said(&llm, 1), "transfer T-77 of 5 done");
    assert_eq!(ledger.effects("transfer"), 1);
    let ends = kinds_of(&system, task.session)
        .await?
        .iter()
        .filter(|k| k.is_terminal())
        .count();
    assert_eq!(ends, 1);

    // Settling again is refused and changes nothing.
    let again = refused(&system, &["inbox", "resolve", &id, "--not-happened"])?;
    assert!(again.contains("settled already"), "{again}");
    let unknown = refused(&system, &["inbox", "approve", "no-such-entry"])?;
    assert!(unknown.contains("nothing is waiting"), "{unknown}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(ledger.effects("transfer"), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_in_doubt_call_that_did_not_happen_is_made_once() -> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![
        Scripted::tool_calls(&[("transfer", r#"{"account": "A", "amount": 7}"#)]),
        Scripted::text("Sent."),
    ])?;
    let dir = tempfile::tempdir()?;
    let mut system = System::start().await?;
    let ledger = Ledger::start(&mut system, dir.path(), false).await?;
    let spec = teller_spec(dir.path(), &llm, &ledger, "")?;
    ledger.stall("stall-before", "transfer")?;
    teller(&mut system, "w1", &spec, &[]).await?;
    let task = send(&system, "Send 7 from A.").await?;
    // The call is under way (the model asked for it), not yet in effect:
    // the worker and the server both die, so it never happens.
    eventually(Duration::from_secs(20), || {
        std::future::ready(if llm.requests().len() == 1 {
            Ok(())
        } else {
            Err("no model call yet")
        })
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(800)).await;
    system.process("w1").kill9();
    system.process("ledger").kill9();
    ledger.calm()?;
    ledger.serve(&mut system).await?;
    teller(&mut system, "w2", &spec, &[]).await?;
    let waiting = entry(
        &system,
        "tool_outcome_unknown",
        "transfer",
        &json!({"account": "A", "amount": 7}),
    )
    .await?;
    assert_eq!(ledger.effects("transfer"), 0);
    let id = waiting["id"].as_str().unwrap_or_default();
    system.baton_stdout(&["inbox", "resolve", id, "--not-happened"])?;
    let end = system
        .client
        .wait(task.session, Duration::from_secs(30))
        .await?;
    assert_eq!(end.kind, EventType::Completed);
    assert_eq!(
        ledger.effects("transfer"),
        1,
        "made once, after the person's word"
    );
    assert_eq!(
        llm.requests().len(),
        2,
        "the answered step was not asked again"
    );
    assert!(
        last_said(&llm, 1).starts_with("transfer done"),
        "{}",
        last_said(&llm, 1)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_can_fail_the_session_over_an_in_doubt_call() -> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![Scripted::tool_calls(&[(
        "transfer",
        r#"{"account": "A", "amount": 9}"#,
    )])])?;
    let dir = tempfile::tempdir()?;
    let mut system = System::start().await?;
    let ledger = Ledger::start(&mut system, dir.path(), false).await?;
    let spec = teller_spec(dir.path(), &llm, &ledger, "")?;
    ledger.stall("stall-after", "transfer")?;
    teller(&mut system, "w1", &spec, &[]).await?;
    let task = send(&system, "Send 9 from A.").await?;
    kill_during(&mut system, &ledger, ("transfer", 1), ("w1", "w2"), &spec).await?;
    let waiting = entry(
        &system,
        "tool_outcome_unknown",
        "transfer",
        &json!({"account": "A", "amount": 9}),
    )
    .await?;
    let id = waiting["id"].as_str().unwrap_or_default();
    system.baton_stdout(&[
        "inbox",
        "resolve",
        id,
        "--fail",
        "--note",
        "the bank cannot tell",
        "--as",
        "ops",
    ])?;
    let end = system
        .client
        .wait(task.session, Duration::from_secs(30))
        .await?;
    assert_eq!(end.kind, EventType::Failed);
    assert_eq!(
        end.reason.as_ref().map(|r| r.as_str()),
        Some("tool_outcome_unknown")
    );
    let detail = end.detail.clone().unwrap_or_default();
    assert!(
        detail.contains("the bank cannot tell") && detail.contains("ops"),
        "{detail}"
    );
    // Failed, not handed to the fallback; one end; the call made once.
    let kinds = kinds_of(&system, task.session).await?;
    assert!(!kinds.contains(&EventType::Escalated), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| k.is_terminal()).count(), 1);
    assert_eq!(ledger.effects("transfer"), 1);
    assert_eq!(llm.requests().len(), 1);
    Ok(())
}

/// The value of sample `name` with `labels` at `url`, if it has one.
fn sample(url: &str, name: &str, labels: &[(&str, &str)]) -> anyhow::Result<Option<f64>> {
    Ok(crate::metrics::scrape(url)?
        .into_iter()
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value))
}

#[tokio::test(flavor = "multi_thread")]
async fn destructive_calls_wait_for_approval_bound_to_their_arguments() -> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![
        Scripted::tool_calls(&[("balance", r#"{"account": "A"}"#)]),
        Scripted::tool_calls(&[("close_account", r#"{"account": "A"}"#)]),
        Scripted::tool_calls(&[("close_account", r#"{"account": "B"}"#)]),
        Scripted::text("Closed A; B stays open."),
    ])?;
    let dir = tempfile::tempdir()?;
    let mut system = System::start().await?;
    let ledger = Ledger::start(&mut system, dir.path(), false).await?;
    let spec = teller_spec(dir.path(), &llm, &ledger, "approve = \"destructive\"")?;
    let metrics = ["--metrics-addr", "127.0.0.1:0"];
    teller(&mut system, "w1", &spec, &metrics).await?;
    let url = crate::metrics::metrics_url(system.process("w1").stderr())?;
    let task = send(&system, "Close A and B.").await?;

    // The read-only lookup went ahead; the close waits, not made.
    let first = entry(
        &system,
        "approval_required",
        "close_account",
        &json!({"account": "A"}),
    )
    .await?;
    assert_eq!(ledger.effects("balance"), 1);
    assert_eq!(ledger.effects("close_account"), 0);
    let kinds = kinds_of(&system, task.session).await?;
    assert!(
        kinds.contains(&EventType::ToolApprovalRequested),
        "{kinds:?}"
    );
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
    assert_eq!(sample(&url, "baton_tool_calls_total", &calls)?, Some(1.0));
    let asked = [("tool", "close_account"), ("decision", "waiting")];
    assert_eq!(
        sample(&url, "baton_tool_approvals_total", &asked)?,
        Some(1.0)
    );

    // Approved while no worker runs: honoured once when one starts.
    system.process("w1").kill9();
    let id = first["id"].as_str().unwrap_or_default();
    system.baton_stdout(&["inbox", "approve", id, "--as", "ops"])?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(ledger.effects("close_account"), 0);
    teller(&mut system, "w2", &spec, &metrics).await?;
    let url = crate::metrics::metrics_url(system.process("w2").stderr())?;
    ledger.until("close_account", 1).await?;

    // Other arguments need an approval of their own; a denial reaches the model.
    let second = entry(
        &system,
        "approval_required",
        "close_account",
        &json!({"account": "B"}),
    )
    .await?;
    assert_ne!(second["id"], first["id"]);
    let again = refused(&system, &["inbox", "approve", id])?;
    assert!(again.contains("settled already"), "{again}");
    let id = second["id"].as_str().unwrap_or_default();
    system.baton_stdout(&["inbox", "deny", id, "--note", "B has a payment pending"])?;
    let end = system
        .client
        .wait(task.session, Duration::from_secs(30))
        .await?;
    assert_eq!(end.kind, EventType::Completed);
    assert_eq!(ledger.effects("close_account"), 1, "A once, B never");
    let denied = last_said(&llm, 3);
    assert!(
        denied.starts_with("error: denied") && denied.contains("B has a payment pending"),
        "{denied}"
    );
    assert_eq!(llm.requests().len(), 4, "no answered step asked again");
    let kinds = kinds_of(&system, task.session).await?;
    let count = |kind: EventType| kinds.iter().filter(|k| **k == kind).count();
    assert_eq!(
        (
            count(EventType::ToolApprovalRequested),
            count(EventType::ToolApproved),
            count(EventType::ToolDenied)
        ),
        (2, 1, 1)
    );
    for (decision, n) in [("approved", 1.0), ("denied", 1.0)] {
        let labels = [("tool", "close_account"), ("decision", decision)];
        assert_eq!(
            sample(&url, "baton_tool_approvals_total", &labels)?,
            Some(n),
            "{decision}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn approve_naming_a_tool_the_server_lacks_stops_the_worker() -> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![])?;
    let dir = tempfile::tempdir()?;
    let mut system = System::start().await?;
    let ledger = Ledger::start(&mut system, dir.path(), false).await?;
    let spec = teller_spec(
        dir.path(),
        &llm,
        &ledger,
        "approve = [\"transfer\", \"wire_money\"]",
    )?;
    let stderr = refused(&system, &["worker", "--spec", &spec, "--no-registry"])?;
    assert!(
        stderr.contains("approve lists \"wire_money\", which the server does not have"),
        "{stderr}"
    );
    let bad = teller_spec(dir.path(), &llm, &ledger, "approve = \"sometimes\"")?;
    let stderr = refused(&system, &["check", &bad])?;
    assert!(
        stderr.contains("approve = \"sometimes\" is not a choice"),
        "{stderr}"
    );
    Ok(())
}
