//! Session budgets: what a session spends on models travels with it from
//! hop to hop, and a model call that would pass the session's budget is
//! not made. The stand-in model reports usage and counts every request.

use std::time::Duration;

use baton_proto::{EventType, Value};
use baton_testkit::{FakeLlm, Scripted, eventually};

use crate::util::{System, llm_table, session_in, spec_workers as workers};

/// Two LLM agent types on `llm`: `first` hands the conversation to
/// `second`, whose fallback is the person `desk` (a human agent); `more`
/// goes into both `[llm]` tables.
async fn two_hops_with(llm: &FakeLlm, more: &str) -> anyhow::Result<(System, tempfile::TempDir)> {
    let table = llm_table(llm, more);
    workers(&[
        (
            "first",
            format!("name = \"first\"\nkind = \"llm\"\n\n[[handoffs]]\nto = \"second\"\n{table}"),
        ),
        (
            "second",
            format!("name = \"second\"\nkind = \"llm\"\nfallback = \"desk\"\n{table}"),
        ),
        (DESK.0, DESK.1.to_owned()),
    ])
    .await
}

async fn two_hops(llm: &FakeLlm) -> anyhow::Result<(System, tempfile::TempDir)> {
    two_hops_with(llm, "").await
}

/// Runs `baton ARGS`, then waits for the session to reach the person at
/// `desk` for going over its budget after `calls` model calls: the envelope
/// the person got.
async fn stopped(
    system: &System,
    llm: &FakeLlm,
    args: &[&str],
    calls: usize,
) -> anyhow::Result<baton_proto::Envelope> {
    let out = system.baton(args).output()?;
    anyhow::ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let entry = first_in_inbox(system).await?;
    assert_eq!(llm.requests().len(), calls, "the next call was not made");
    let envelope = entry.envelope;
    assert_eq!(
        envelope.reason.as_ref().map(|r| r.as_str()),
        Some("budget_exceeded")
    );
    Ok(envelope)
}

/// Asserts that the person is told `text` in the context's problem.
fn problem_says(envelope: &baton_proto::Envelope, text: &str) {
    let problem = &envelope.context.problem;
    assert!(problem.contains(text), "{problem}");
}

/// The stand-in's answers: `first` hands off (100 tokens in, 20 out), then
/// `second` answers (50 in, 10 out).
fn script() -> Vec<Scripted> {
    vec![
        Scripted::tool_calls(&[("transfer_to_second", r#"{"reason": "needs an answer"}"#)])
            .with_usage("stand-in", 100, 20),
        Scripted::text("the answer").with_usage("stand-in", 50, 10),
    ]
}

/// The first task that waits for a person, once there is one.
async fn first_in_inbox(system: &System) -> anyhow::Result<baton_client::InboxEntry> {
    let inbox = baton_client::Inbox::open(system.nats.clone(), Default::default(), 1).await?;
    let entry = eventually(Duration::from_secs(30), || async {
        let entries = inbox.list().await.map_err(|err| err.to_string())?;
        entries
            .into_iter()
            .next()
            .ok_or_else(|| "nothing in the inbox yet".to_owned())
    })
    .await?;
    Ok(entry)
}

#[tokio::test(flavor = "multi_thread")]
async fn what_a_session_spends_travels_across_hops_to_its_end() -> anyhow::Result<()> {
    let llm = FakeLlm::start(script())?;
    let (system, _dir) = two_hops(&llm).await?;
    let out = system
        .baton(&["send", "--to", "first", "--direct", "--wait", "a question"])
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 100 + 20 at the first hop, 50 + 10 at the second.
    assert!(
        stdout.contains("spent:  180 tokens (150 in, 30 out)"),
        "{stdout}"
    );
    assert_eq!(llm.requests().len(), 2);

    // `watch` shows the spending growing, event by event.
    let session = session_in(&stdout)?;
    let watched = system.baton(&["watch", session]).output()?;
    let watched = String::from_utf8_lossy(&watched.stdout);
    let line = |what: &str| {
        watched
            .lines()
            .find(|line| line.contains(what))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        line("first handed off to second").ends_with("[spent 120 tokens (100 in, 20 out)]"),
        "{watched}"
    );
    assert!(
        line("completed: the answer").ends_with("[spent 180 tokens (150 in, 30 out)]"),
        "{watched}"
    );
    // The console's session page says what it spent.
    let mut system = system;
    let base = crate::gateways::console::console(&mut system, "console", &[]).await?;
    let (status, page) =
        crate::gateways::console::get(&base, &format!("/sessions/{session}")).await?;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("<span id=\"spent\">180 tokens (150 in, 30 out)</span>"),
        "{page}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_would_pass_the_budget_is_not_made_and_a_person_is_told_why()
-> anyhow::Result<()> {
    let llm = FakeLlm::start(script())?;
    let (system, _dir) = two_hops(&llm).await?;
    // The first hop spends 120; the second's call would pass 400 (its
    // prompt and the 256 tokens an answer may take), so it is not made and
    // the session goes to the fallback, the person at `desk`.
    let args = [
        "send",
        "--to",
        "first",
        "--direct",
        "--budget-tokens",
        "400",
        "a question",
    ];
    let envelope = stopped(&system, &llm, &args, 1).await?;
    assert_eq!(envelope.usage.map(|u| u.total()), Some(120));
    assert_eq!(told(&envelope, "spent_tokens"), Some(Value::from(120_u64)));
    assert_eq!(told(&envelope, "limit_tokens"), Some(Value::from(400_u64)));
    assert!(
        told(&envelope, "next_call_tokens")
            .and_then(|v| v.as_u64())
            .is_some_and(|next| next > 80)
    );
    problem_says(&envelope, "spent 120 tokens of its budget of 400 tokens");
    // Its session waits for the person: no model was paid for the end.
    let history = system.client.history(envelope.session).await?;
    assert_eq!(
        history.last().map(|e| e.kind.clone()),
        Some(EventType::Waiting)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_budget_below_one_token_is_refused_before_anything_is_sent() -> anyhow::Result<()> {
    let system = System::start().await?;
    for bad in ["0", "-5", "many"] {
        let out = system
            .baton(&["send", "--budget-tokens", bad, "a question"])
            .output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}: {stderr}");
        assert!(stderr.contains("--budget-tokens"), "{bad}: {stderr}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_router_gives_a_task_without_a_budget_its_default() -> anyhow::Result<()> {
    let llm = FakeLlm::start(script())?;
    let (mut system, _dir) = two_hops(&llm).await?;
    let default = ["--default-budget-tokens", "400", "--no-registry"];
    system.router(&default).await?;
    // Through the ingress, with no budget of its own.
    let envelope = stopped(&system, &llm, &["send", "--to", "first", "a question"], 1).await?;
    assert_eq!(envelope.budget.and_then(|b| b.tokens), Some(400));
    Ok(())
}

const DESK: (&str, &str) = ("desk", "name = \"desk\"\nkind = \"human\"\n");

/// `boss` (an LLM agent type) delegates to `helper` (another), and its
/// fallback is the person `desk`.
async fn delegating(llm: &FakeLlm) -> anyhow::Result<(System, tempfile::TempDir)> {
    let table = llm_table(llm, "");
    workers(&[
        (
            "boss",
            format!(
                "name = \"boss\"\nkind = \"llm\"\nfallback = \"desk\"\n\n[[delegates]]\nagent = \"helper\"\n{table}"
            ),
        ),
        ("helper", format!("name = \"helper\"\nkind = \"llm\"\n{table}")),
        (DESK.0, DESK.1.to_owned()),
    ])
    .await
}

/// `boss` delegates (100 in, 20 out), `helper` answers (`helper_in`, 100
/// out), and `boss` answers with the result (200 in, 30 out).
fn delegation_script(helper_in: u64) -> Vec<Scripted> {
    vec![
        Scripted::tool_calls(&[("agent_run_helper", r#"{"task": "find the part"}"#)])
            .with_usage("stand-in", 100, 20),
        Scripted::text("the part").with_usage("stand-in", helper_in, 100),
        Scripted::text("the whole").with_usage("stand-in", 200, 30),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_childs_spending_counts_toward_its_parent() -> anyhow::Result<()> {
    let llm = FakeLlm::start(delegation_script(40))?;
    let (system, _dir) = delegating(&llm).await?;
    let out = system
        .baton(&["send", "--to", "boss", "--direct", "--wait", "a question"])
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("the whole"), "{stdout}");
    // 120 delegating, 140 in the child, 230 in the continuation.
    assert!(
        stdout.contains("spent:  490 tokens (340 in, 150 out)"),
        "{stdout}"
    );
    assert_eq!(llm.requests().len(), 3);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_budget_spent_by_a_child_stops_the_parents_next_call() -> anyhow::Result<()> {
    // The child spends 500, which leaves the continuation's call no room
    // in a budget of 600; counted without the child it would fit.
    let llm = FakeLlm::start(delegation_script(400))?;
    let (system, _dir) = delegating(&llm).await?;
    let args = [
        "send",
        "--to",
        "boss",
        "--direct",
        "--budget-tokens",
        "600",
        "a question",
    ];
    // The continuation's call is not made.
    let envelope = stopped(&system, &llm, &args, 2).await?;
    assert_eq!(envelope.usage.map(|u| u.total()), Some(620));
    problem_says(&envelope, "spent 620 tokens of its budget of 600 tokens");
    Ok(())
}

/// Starts `baton COMMAND serve` with `args` as process `label`; its URL.
async fn gateway(
    system: &mut System,
    label: &str,
    args: &[&str],
    listening: &str,
) -> anyhow::Result<String> {
    let command = system.baton(args);
    system.adopt(label, baton_testkit::ChildProcess::spawn(command, label)?);
    system
        .wait_log(label, listening, Duration::from_secs(30))
        .await?;
    system.logged_url(label)
}

/// Starts the router, `baton mcp serve` for agent type `agent` (calls wait
/// 2 s) and `baton a2a serve`, each with `flags` (its budget); returns
/// their URLs.
async fn gateways(
    system: &mut System,
    agent: &str,
    mcp_flags: &[&str],
    a2a_flags: &[&str],
) -> anyhow::Result<(String, String)> {
    // The gateways start sessions through the ingress.
    system.router(&["--no-registry"]).await?;
    let mut args = vec!["mcp", "serve", "--http", "127.0.0.1:0", "--agents", agent];
    args.extend(["--timeout-secs", "2"]);
    args.extend_from_slice(mcp_flags);
    let mcp = gateway(system, "mcp", &args, "MCP server listening").await?;
    let mut args = vec!["a2a", "serve", "--listen", "127.0.0.1:0"];
    args.extend_from_slice(a2a_flags);
    let a2a = gateway(system, "a2a", &args, "A2A server listening").await?;
    Ok((mcp, a2a))
}

/// A call of tool `agent` through the MCP gateway at `url`, with the budget
/// argument of `mode` (`budget`: tokens, `budget_cost`) set to `amount`
/// (JSON).
fn mcp_budget(
    url: &str,
    mode: &str,
    agent: &str,
    amount: &str,
) -> anyhow::Result<serde_json::Value> {
    crate::util::python_json("mcp_client.py", "mcp", &[mode, url, agent, "q", amount])
}

/// Fails unless the tool call was refused with a message that names `what`.
fn refused_naming(reply: &serde_json::Value, what: &str) {
    assert_eq!(reply["is_error"], true, "{reply}");
    assert!(
        reply["text"][0].as_str().unwrap_or_default().contains(what),
        "{reply}"
    );
}

/// The tasks waiting for a person, once there are `count`.
async fn inbox_entries(
    system: &System,
    count: usize,
) -> anyhow::Result<Vec<baton_client::InboxEntry>> {
    let inbox = baton_client::Inbox::open(system.nats.clone(), Default::default(), 1).await?;
    let entries = eventually(Duration::from_secs(30), || async {
        let entries = inbox.list().await.map_err(|err| err.to_string())?;
        if entries.len() == count {
            Ok(entries)
        } else {
            Err(format!("{} in the inbox", entries.len()))
        }
    })
    .await?;
    Ok(entries)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_gateways_set_a_budget_that_a_caller_may_lower_but_not_raise() -> anyhow::Result<()> {
    let transfer = || {
        Scripted::tool_calls(&[("transfer_to_second", r#"{"reason": "needs an answer"}"#)])
            .with_usage("stand-in", 100, 20)
    };
    let llm = FakeLlm::start(vec![transfer(), transfer()])?;
    let (mut system, _dir) = two_hops(&llm).await?;
    let (mcp, a2a) = gateways(
        &mut system,
        "first",
        &["--budget-tokens", "1000"],
        &["--budget-tokens", "400"],
    )
    .await?;

    // Bad budgets are refused before a session starts.
    let mcp_call = |tokens: &str| mcp_budget(&mcp, "budget", "first", tokens);
    refused_naming(&mcp_call("0")?, "`budget_tokens`");
    let a2a_call = |tokens: &str| {
        crate::util::python_json(
            "a2a_client.py",
            "a2a",
            &[&a2a, "send_budget", "first", "q", tokens],
        )
    };
    let refused = a2a_call("-5")?;
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or_default()
            .contains("`budget_tokens`"),
        "{refused}"
    );
    assert_eq!(llm.requests().len(), 0);

    // MCP: the call asks for less than the gateway's 1000.
    let lower = mcp_call("400")?;
    assert!(
        lower["text"][0]
            .as_str()
            .unwrap_or_default()
            .contains("did not end"),
        "{lower}"
    );
    // A2A: the message asks for more than the gateway's 400.
    let higher = a2a_call("5000")?;
    assert_eq!(higher["state"], "TASK_STATE_INPUT_REQUIRED", "{higher}");

    // Both sessions stopped at 400: the second hop's call was not made.
    let entries = inbox_entries(&system, 2).await?;
    for entry in &entries {
        assert_eq!(entry.envelope.budget.and_then(|b| b.tokens), Some(400));
        assert_eq!(
            entry.envelope.reason.as_ref().map(|r| r.as_str()),
            Some("budget_exceeded")
        );
    }
    assert_eq!(llm.requests().len(), 2);
    Ok(())
}

/// What the fallback was told: `variables.budget_exceeded[name]`.
fn told(envelope: &baton_proto::Envelope, name: &str) -> Option<Value> {
    match &envelope.context.variables["budget_exceeded"] {
        Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| k.as_str() == Some(name))
            .map(|(_, v)| v.clone()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cost_budget_is_kept_by_the_price_table() -> anyhow::Result<()> {
    let llm = FakeLlm::start(script())?;
    // Reading is free, writing costs 0.01 a token: the first hop's 20
    // tokens cost 0.2, and the second hop's call may write 256 (2.56).
    let price = "[llm.price]\ninput_per_million = 0\noutput_per_million = 10000\n";
    let (mut system, _dir) = two_hops_with(&llm, price).await?;
    let args = [
        "send",
        "--to",
        "first",
        "--direct",
        "--budget-cost",
        "2.6",
        "a question",
    ];
    let envelope = stopped(&system, &llm, &args, 1).await?;
    assert_eq!(envelope.budget.and_then(|b| b.cost_micros), Some(2_600_000));
    assert_eq!(envelope.usage.map(|u| u.cost_micros), Some(200_000));
    assert_eq!(told(&envelope, "scope"), Some(Value::from("session")));
    assert_eq!(told(&envelope, "spent_cost"), Some(Value::from(0.2)));
    assert_eq!(told(&envelope, "limit_cost"), Some(Value::from(2.6)));
    problem_says(&envelope, "spent 0.2 of its budget of 2.6");
    // What it cost is counted for Prometheus too.
    let metrics = crate::operations::metrics::metrics_url(system.process("first").stderr())?;
    let samples = crate::operations::metrics::scrape(&metrics)?;
    let cost = crate::operations::metrics::value(
        &samples,
        "baton_llm_cost_total",
        &[("model", "stand-in")],
    );
    assert!((cost - 0.2).abs() < 1e-9, "{cost}");
    // An amount that is not one is refused, naming the flag.
    for bad in ["0", "-1", "lots", "0.0000001"] {
        let out = system
            .baton(&["send", "--budget-cost", bad, "q"])
            .output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("--budget-cost"),
            "{bad}: {stderr}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_keeps_to_its_own_cap_per_hop() -> anyhow::Result<()> {
    // The model calls a tool that does not exist, spending 270; asking it
    // again (the prompt and up to 100 tokens) would pass the cap of 300.
    let llm = FakeLlm::start(vec![
        Scripted::tool_calls(&[("no_such_tool", "{}")]).with_usage("stand-in", 250, 20),
        Scripted::text("never asked"),
    ])?;
    let table = llm_table(&llm, "max_tokens = 100\nhop_budget_tokens = 300\n");
    let (system, _dir) = workers(&[
        (
            "capped",
            format!("name = \"capped\"\nkind = \"llm\"\nfallback = \"desk\"\n{table}"),
        ),
        (DESK.0, DESK.1.to_owned()),
    ])
    .await?;
    let args = ["send", "--to", "capped", "--direct", "a question"];
    let envelope = stopped(&system, &llm, &args, 1).await?;
    assert_eq!(
        envelope.budget, None,
        "no session budget: the agent's own cap"
    );
    assert_eq!(told(&envelope, "scope"), Some(Value::from("hop")));
    assert_eq!(told(&envelope, "spent_tokens"), Some(Value::from(270_u64)));
    problem_says(&envelope, "its cap per hop is 300 tokens");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_gateways_set_a_cost_budget_too() -> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![])?;
    // Writing costs 0.01 a token: a call that may write 256 tokens may cost 2.56.
    let price = "[llm.price]\ninput_per_million = 0\noutput_per_million = 10000\n";
    let (mut system, _dir) = two_hops_with(&llm, price).await?;
    let (mcp, a2a) = gateways(
        &mut system,
        "second",
        &["--budget-cost", "5"],
        &["--budget-cost", "1"],
    )
    .await?;
    let mcp_call = |cost: &str| mcp_budget(&mcp, "budget_cost", "second", cost);
    refused_naming(&mcp_call("\"lots\"")?, "`budget_cost`");
    // Less than the gateway's 5; the A2A message asks for more than its 1.
    let lower = mcp_call("0.5")?;
    assert_eq!(lower["is_error"], true, "{lower}");
    let meta = r#"{"budget_cost": 3}"#;
    let higher = crate::util::python_json(
        "a2a_client.py",
        "a2a",
        &[&a2a, "send_meta", "second", "q", meta],
    )?;
    assert_eq!(higher["state"], "TASK_STATE_INPUT_REQUIRED", "{higher}");
    let entries = inbox_entries(&system, 2).await?;
    let mut costs: Vec<_> = entries
        .iter()
        .map(|entry| entry.envelope.budget.and_then(|b| b.cost_micros))
        .collect();
    costs.sort_unstable();
    assert_eq!(costs, [Some(500_000), Some(1_000_000)]);
    for entry in &entries {
        assert_eq!(
            entry.envelope.reason.as_ref().map(|r| r.as_str()),
            Some("budget_exceeded")
        );
    }
    assert_eq!(llm.requests().len(), 0, "no call could be afforded");
    Ok(())
}
