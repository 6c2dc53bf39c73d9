//! Session budgets: what a session spends on models travels with it from
//! hop to hop, and a model call that would pass the session's budget is
//! not made. The stand-in model reports usage and counts every request.

use std::time::Duration;

use baton_proto::{EventType, Value};
use baton_testkit::{FakeLlm, Scripted, eventually};

use crate::util::System;

/// Two LLM agent types on `llm`: `first` hands the conversation to
/// `second`, whose fallback is the person `desk` (a human agent).
async fn two_hops(llm: &FakeLlm) -> anyhow::Result<(System, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let write = |name: &str, text: String| -> anyhow::Result<String> {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, text)?;
        Ok(path.to_string_lossy().into_owned())
    };
    let llm_table = |prompt: &str| {
        format!(
            "\n[llm]\nbase_url = \"{}\"\nmodel = \"stand-in\"\nsystem_prompt = \"{prompt}\"\n",
            llm.url()
        )
    };
    let first = write(
        "first",
        format!(
            "name = \"first\"\nkind = \"llm\"\n\n[[handoffs]]\nto = \"second\"\n{}",
            llm_table("You triage.")
        ),
    )?;
    let second = write(
        "second",
        format!(
            "name = \"second\"\nkind = \"llm\"\nfallback = \"desk\"\n{}",
            llm_table("You answer.")
        ),
    )?;
    let desk = write("desk", "name = \"desk\"\nkind = \"human\"\n".to_owned())?;
    let mut system = System::start().await?;
    for (label, spec) in [("first", &first), ("second", &second), ("desk", &desk)] {
        let args = ["worker", "--spec", spec.as_str(), "--no-registry"];
        system.spawn(label, &args, "worker started").await?;
    }
    Ok((system, dir))
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
async fn first_in_inbox(system: &System) -> anyhow::Result<baton_worker::InboxEntry> {
    let inbox = baton_worker::Inbox::open(system.nats.clone(), Default::default(), 1).await?;
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
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_would_pass_the_budget_is_not_made_and_a_person_is_told_why()
-> anyhow::Result<()> {
    let llm = FakeLlm::start(script())?;
    let (system, _dir) = two_hops(&llm).await?;
    let args = [
        "send",
        "--to",
        "first",
        "--direct",
        "--budget-tokens",
        "400",
        "a question",
    ];
    let out = system.baton(&args).output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The first hop spends 120; the second's call would pass 400 (its
    // prompt and the 256 tokens an answer may take), so it is not made and
    // the session goes to the fallback, the person at `desk`.
    let entry = first_in_inbox(&system).await?;
    assert_eq!(llm.requests().len(), 1, "the second call was not made");
    let envelope = entry.envelope;
    assert_eq!(
        envelope.reason.as_ref().map(|r| r.as_str()),
        Some("budget_exceeded")
    );
    assert_eq!(envelope.usage.map(|u| u.total()), Some(120));
    let said = &envelope.context.variables["budget_exceeded"];
    let field = |name: &str| match said {
        Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| k.as_str() == Some(name))
            .and_then(|(_, v)| v.as_u64()),
        _ => None,
    };
    assert_eq!(
        (field("spent_tokens"), field("limit_tokens")),
        (Some(120), Some(400))
    );
    assert!(field("next_call_tokens").is_some_and(|next| next > 80));
    assert!(
        envelope
            .context
            .problem
            .contains("spent 120 of its 400 tokens"),
        "{}",
        envelope.context.problem
    );
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
    let out = system
        .baton(&["send", "--to", "first", "a question"])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let entry = first_in_inbox(&system).await?;
    assert_eq!(entry.envelope.budget.and_then(|b| b.tokens), Some(400));
    assert_eq!(
        entry.envelope.reason.as_ref().map(|r| r.as_str()),
        Some("budget_exceeded")
    );
    assert_eq!(llm.requests().len(), 1, "the second call was not made");
    Ok(())
}

/// `boss` (an LLM agent type) delegates to `helper` (another), and its
/// fallback is the person `desk`.
async fn delegating(llm: &FakeLlm) -> anyhow::Result<(System, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let llm_table = format!(
        "\n[llm]\nbase_url = \"{}\"\nmodel = \"stand-in\"\nsystem_prompt = \"Be brief.\"\n",
        llm.url()
    );
    let specs = [
        (
            "boss",
            format!(
                "name = \"boss\"\nkind = \"llm\"\nfallback = \"desk\"\n\n[[delegates]]\nagent = \"helper\"\n{llm_table}"
            ),
        ),
        (
            "helper",
            format!("name = \"helper\"\nkind = \"llm\"\n{llm_table}"),
        ),
        ("desk", "name = \"desk\"\nkind = \"human\"\n".to_owned()),
    ];
    let mut system = System::start().await?;
    for (name, text) in specs {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, text)?;
        let spec = path.to_string_lossy().into_owned();
        let args = ["worker", "--spec", spec.as_str(), "--no-registry"];
        system.spawn(name, &args, "worker started").await?;
    }
    Ok((system, dir))
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
    let out = system.baton(&args).output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let entry = first_in_inbox(&system).await?;
    assert_eq!(
        llm.requests().len(),
        2,
        "the continuation's call was not made"
    );
    let envelope = entry.envelope;
    assert_eq!(
        envelope.reason.as_ref().map(|r| r.as_str()),
        Some("budget_exceeded")
    );
    assert_eq!(envelope.usage.map(|u| u.total()), Some(620));
    assert!(
        envelope
            .context
            .problem
            .contains("spent 620 of its 600 tokens"),
        "{}",
        envelope.context.problem
    );
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

#[tokio::test(flavor = "multi_thread")]
async fn the_gateways_set_a_budget_that_a_caller_may_lower_but_not_raise() -> anyhow::Result<()> {
    let transfer = || {
        Scripted::tool_calls(&[("transfer_to_second", r#"{"reason": "needs an answer"}"#)])
            .with_usage("stand-in", 100, 20)
    };
    let llm = FakeLlm::start(vec![transfer(), transfer()])?;
    let (mut system, _dir) = two_hops(&llm).await?;
    // The gateways start sessions through the ingress.
    system.router(&["--no-registry"]).await?;
    let mcp_args = [
        "mcp",
        "serve",
        "--http",
        "127.0.0.1:0",
        "--agents",
        "first",
        "--timeout-secs",
        "2",
        "--budget-tokens",
        "1000",
    ];
    let mcp = gateway(&mut system, "mcp", &mcp_args, "MCP server listening").await?;
    let a2a_args = [
        "a2a",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--budget-tokens",
        "400",
    ];
    let a2a = gateway(&mut system, "a2a", &a2a_args, "A2A server listening").await?;

    // Bad budgets are refused before a session starts.
    let mcp_call = |tokens: &str| {
        crate::util::python_json(
            "mcp_client.py",
            "mcp",
            &["budget", &mcp, "first", "q", tokens],
        )
    };
    let refused = mcp_call("0")?;
    assert_eq!(refused["is_error"], true, "{refused}");
    assert!(
        refused["text"][0]
            .as_str()
            .unwrap_or_default()
            .contains("`budget_tokens`"),
        "{refused}"
    );
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
    let inbox = baton_worker::Inbox::open(system.nats.clone(), Default::default(), 1).await?;
    let entries = eventually(Duration::from_secs(30), || async {
        let entries = inbox.list().await.map_err(|err| err.to_string())?;
        if entries.len() == 2 {
            Ok(entries)
        } else {
            Err(format!("{} in the inbox", entries.len()))
        }
    })
    .await?;
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
