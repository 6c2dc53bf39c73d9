//! `baton a2a serve` against the official A2A Python SDK's client: cards,
//! blocking and streaming sends, get, list, cancel of a running agent,
//! input-required answered by the client, errors, and the bearer token.

use std::time::Duration;

use serde_json::Value;

use crate::util::{System, wants};

/// The registry, the router, the demo agents, a person's inbox, an agent
/// that takes a minute, and the gateway (process `a2a`, with `env`).
async fn system(env: &[(&str, &str)]) -> anyhow::Result<(System, String, tempfile::TempDir)> {
    let mut system = System::start().await?;
    system
        .refund_desk("fragile", &["--fatal", "--no-fallback"])
        .await?;
    system.human_support().await?;
    let dir = tempfile::tempdir()?;
    let spec = dir.path().join("slow.toml");
    std::fs::write(
        &spec,
        "name = \"slow\"\nkind = \"exec\"\ndescription = \"Takes a minute\"\ntimeout_ms = 120000\n\n[exec]\ncommand = [\"sleep\", \"60\"]\n",
    )?;
    system.spec_worker("slow", &spec, &[]).await?;
    system
        .lookup_until(&wants(&[]), Duration::from_secs(10), |a| {
            a.candidates.len() == 5
        })
        .await?;
    let mut command = system.baton(&["a2a", "serve", "--listen", "127.0.0.1:0"]);
    for (key, value) in env {
        command.env(key, value);
    }
    system.adopt("a2a", baton_testkit::ChildProcess::spawn(command, "a2a")?);
    system
        .wait_log("a2a", "A2A server listening", Duration::from_secs(30))
        .await?;
    let url = system.logged_url("a2a")?;
    Ok((system, url, dir))
}

/// Runs `scripts/a2a_client.py URL STEP ARGS`; its JSON answer.
pub(crate) fn client(url: &str, step: &str, args: &[&str]) -> anyhow::Result<Value> {
    let mut all = vec![url, step];
    all.extend_from_slice(args);
    crate::util::python_json("a2a_client.py", "a2a", &all)
}

/// Borrowed arguments.
fn spawn(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

const REFUND: &str = "I want a refund for order ABC-123";

#[tokio::test(flavor = "multi_thread")]
async fn the_a2a_sdk_sends_streams_lists_and_reads_tasks() -> anyhow::Result<()> {
    let (system, url, _dir) = system(&[]).await?;

    let cards = client(&url, "card", &["refund"])?;
    let ingress = &cards["ingress"];
    assert_eq!(ingress["name"], "baton", "{ingress}");
    let skills: Vec<&str> = ingress["skills"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(
        skills,
        [
            "fragile",
            "general_enquiry",
            "human_support",
            "refund",
            "slow"
        ]
    );
    let agent = &cards["agent"];
    assert_eq!(agent["name"], "refund");
    assert_eq!(
        agent["supportedInterfaces"][0]["protocolBinding"],
        "JSONRPC"
    );
    assert_eq!(
        agent["supportedInterfaces"][0]["url"],
        format!("{url}/agents/refund")
    );
    assert_eq!(agent["capabilities"]["streaming"], true);
    let tags = strings(&agent["skills"][0]["tags"]);
    // The spec's description, and capabilities, domains and tier, from the registry.
    assert_eq!(
        agent["description"], "Decides refunds under the shop's policy",
        "{agent}"
    );
    assert!(tags.contains(&"refunds"), "{agent}");
    assert!(tags.contains(&"domain:billing"), "{agent}");
    assert!(tags.iter().any(|t| t.starts_with("tier:")), "{agent}");

    // Blocking: the whole session, with its path and answer.
    let sent = client(&url, "send", &["general_enquiry", REFUND])?;
    assert_eq!(sent["state"], "TASK_STATE_COMPLETED", "{sent}");
    let answer = strings(&sent["answer"]);
    assert!(
        answer[0].starts_with("Refunds are accepted within 30 days"),
        "{sent}"
    );
    assert_eq!(
        sent["metadata"]["baton"]["path"],
        serde_json::json!(["general_enquiry", "refund"])
    );
    assert!(
        sent["history"].as_u64().unwrap_or(0) >= 2,
        "the conversation: {sent}"
    );
    let id = sent["id"].as_str().unwrap_or_default().to_owned();
    let got = client(&url, "get", &[&id])?;
    assert_eq!(got["state"], "TASK_STATE_COMPLETED");
    assert_eq!(got["answer"], sent["answer"]);

    // Feedback on the finished task: the registry stores it, the task stays as it was.
    let liked = client(&url, "feedback", &[&id, r#"{"score": 0.75}"#, "spot on"])?;
    assert_eq!(liked["state"], "TASK_STATE_COMPLETED", "{liked}");
    assert_eq!(liked["answer"], sent["answer"], "{liked}");
    let noted = baton_testkit::eventually(Duration::from_secs(10), || async {
        let book: Value = serde_json::from_str(&system.baton_stdout(&[
            "notebook",
            "general_enquiry",
            "--json",
        ])?)?;
        let refund = book["collaborators"][0].clone();
        anyhow::ensure!(refund["feedback"] == 1, "{book}");
        Ok(refund)
    })
    .await?;
    assert_eq!(
        (noted["agent"].as_str(), noted["feedback_score"].as_f64()),
        (Some("refund"), Some(0.75)),
        "{noted}"
    );
    let refused = client(&url, "feedback", &[&id, r#"{"score": 2}"#, "too much"])?;
    let why = refused["message"].as_str().unwrap_or_default();
    assert!(why.contains("the score must be from 0"), "{refused}");

    // Streaming: the task, the hops as working, the answer, completed.
    let streamed = client(&url, "stream", &["general_enquiry", REFUND])?;
    let events = streamed["events"].as_array().cloned().unwrap_or_default();
    assert_eq!(events[0]["kind"], "task", "{streamed}");
    assert_eq!(events[0]["state"], "TASK_STATE_SUBMITTED", "{streamed}");
    assert!(
        events.iter().any(|e| e["state"] == "TASK_STATE_WORKING"
            && strings(&e["text"]) == ["handoff general_enquiry -> refund (knowledge_gap)"]),
        "{streamed}"
    );
    let n = events.len();
    assert_eq!(events[n - 2]["kind"], "artifact", "{streamed}");
    assert_eq!(events[n - 1]["state"], "TASK_STATE_COMPLETED", "{streamed}");

    // The example client streams the same session and prints the answer.
    let script = crate::util::example("a2a/ask.py");
    let asked = std::process::Command::new("python3")
        .arg(script)
        .arg(format!("{url}/agents/general_enquiry"))
        .arg(REFUND)
        .output()?;
    let printed = String::from_utf8_lossy(&asked.stdout);
    assert!(
        asked.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&asked.stderr)
    );
    assert!(
        printed.contains("answer: Refunds are accepted within 30 days"),
        "{printed}"
    );
    assert!(
        printed.trim_end().ends_with("TASK_STATE_COMPLETED:"),
        "{printed}"
    );

    // Listing by context: exactly this context's tasks (the turns of its
    // conversation: the first fails, so nobody holds it, and the second
    // goes to the agent it is sent to).
    let context = uuid::Uuid::new_v4().to_string();
    let first = client(&url, "send_in", &[&context, "fragile", "break"])?;
    let second = client(&url, "send_in", &[&context, "refund", REFUND])?;
    assert_eq!(first["state"], "TASK_STATE_FAILED", "{first}");
    assert!(strings(&first["status"])[0].contains("fatal"), "{first}");
    assert_eq!(second["state"], "TASK_STATE_COMPLETED", "{second}");
    let listed = client(&url, "list", &[&context])?;
    assert_eq!(listed["total"], 2, "{listed}");
    let ids: Vec<&str> = listed["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["id"].as_str())
        .collect();
    let first = first["id"].as_str().unwrap_or_default();
    let second = second["id"].as_str().unwrap_or_default();
    assert_eq!(ids, [second, first]);
    // Pages of one, in the same order; and the failed one alone by state.
    let pages = serde_json::json!([[second], [first]]);
    assert_eq!(listed["pages"], pages, "{listed}");
    assert_eq!(listed["last_token"], "", "{listed}");
    assert_eq!(listed["failed"], serde_json::json!([first]), "{listed}");

    // Errors: an ended task has nothing to subscribe to; an unknown one is not found.
    let ended = client(&url, "ended", &[&id])?;
    assert_eq!(ended["subscribe"], "UnsupportedOperationError", "{ended}");
    assert_eq!(ended["missing"], "TaskNotFoundError", "{ended}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_a2a_sdk_cancels_a_running_task_and_answers_one_that_waits_for_input()
-> anyhow::Result<()> {
    let (system, url, _dir) = system(&[]).await?;

    let cancelled = client(&url, "cancel_running", &["slow", "take your time"])?;
    assert_eq!(cancelled["cancelled"], "TASK_STATE_CANCELED", "{cancelled}");
    let seen = cancelled["subscribed"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        seen.last().map(|e| &e["state"]),
        Some(&Value::from("TASK_STATE_CANCELED")),
        "{cancelled}"
    );
    assert_eq!(cancelled["again"], "TaskNotCancelableError", "{cancelled}");
    assert_eq!(
        cancelled["got"]["state"], "TASK_STATE_CANCELED",
        "{cancelled}"
    );
    let session: uuid::Uuid = cancelled["started"]["id"]
        .as_str()
        .unwrap_or_default()
        .parse()?;
    let stored = system.stored_events(session).await?;
    let terminal: Vec<_> = stored.iter().filter(|e| e.kind.is_terminal()).collect();
    assert_eq!(terminal.len(), 1);
    assert_eq!(terminal[0].reason, Some(baton_proto::Reason::Cancelled));

    let asked = client(
        &url,
        "input",
        &[
            "human_support",
            "Can a person check order 7?",
            "Order 7 shipped today",
        ],
    )?;
    assert_eq!(
        asked["asked"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asked}"
    );
    assert!(
        strings(&asked["asked"]["status"])[0].contains("Can a person check order 7?"),
        "{asked}"
    );
    assert_eq!(
        asked["answered"]["state"], "TASK_STATE_COMPLETED",
        "{asked}"
    );
    assert_eq!(
        strings(&asked["answered"]["answer"]),
        ["Order 7 shipped today"],
        "{asked}"
    );
    assert_eq!(asked["again"], "UnsupportedOperationError", "{asked}");
    // A task id from another context, or an unknown one, is refused first.
    assert_eq!(asked["elsewhere"], "InvalidParamsError", "{asked}");
    assert_eq!(asked["unknown"], "TaskNotFoundError", "{asked}");

    // An answer with {"handoff": "refund"} goes on to that agent type.
    let handed = client(
        &url,
        "input_handoff",
        &[
            "human_support",
            "A refund, please",
            "Approved by Ann",
            "refund",
        ],
    )?;
    assert_eq!(
        handed["asked"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{handed}"
    );
    assert_eq!(
        handed["answered"]["state"], "TASK_STATE_COMPLETED",
        "{handed}"
    );
    let path = &handed["answered"]["metadata"]["baton"]["path"];
    assert_eq!(
        path,
        &serde_json::json!(["human_support", "refund"]),
        "{handed}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_a2a_gateway_needs_its_token_beyond_loopback_and_when_set() -> anyhow::Result<()> {
    let token = "a2a-s3cret";
    let (mut system, url, _dir) = system(&[("BATON_A2A_TOKEN", token)]).await?;
    let refused = system
        .baton(&["a2a", "serve", "--listen", "0.0.0.0:0"])
        .output()?;
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--access-token"));

    let cards = client(&url, "card", &["refund"])?;
    assert_eq!(
        cards["agent"]["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"], "Bearer",
        "{cards}"
    );
    let calls = client(&url, "token", &[token, "refund", REFUND])?;
    assert_eq!(calls["without"], "A2AClientError", "{calls}");
    assert_eq!(calls["wrong"], "A2AClientError", "{calls}");
    assert_eq!(calls["with"]["state"], "TASK_STATE_COMPLETED", "{calls}");
    assert!(!system.process("a2a").stderr().contains(token));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_a2a_gateway_and_a_cancel_work_under_the_generated_permission_blocks()
-> anyhow::Result<()> {
    use crate::operations::permissions::{as_user, generated_config};
    let users: &[(&str, &[&str])] = &[
        ("router", &["router"]),
        ("registry", &["registry"]),
        ("intake", &["worker", "intake"]),
        ("slow", &["worker", "slow"]),
        ("operator", &["operator"]),
    ];
    let config = generated_config(users)?;
    let mut system = System::secured(&config, "admin", "admin-pw").await?;
    let with = |user: &str, args: &[&str]| -> Vec<String> {
        let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        all.extend(as_user(user));
        all
    };
    let router = with(
        "router",
        &["router", "--default-agent", "intake", "--no-registry"],
    );
    system
        .spawn("router", &spawn(&router), "router started")
        .await?;
    let registry = with("registry", &["registry", "--heartbeat-ms", "200"]);
    system
        .spawn("registry", &spawn(&registry), "registry serving lookups")
        .await?;
    let intake = with("intake", &["--heartbeat-ms", "200", "--no-fallback"]);
    system.relay("intake", "intake", &spawn(&intake)).await?;
    let slow = with(
        "slow",
        &[
            "--heartbeat-ms",
            "200",
            "--no-fallback",
            "--work-ms",
            "60000",
        ],
    );
    system.relay("slow", "slow", &spawn(&slow)).await?;
    let gateway = with("operator", &["a2a", "serve", "--listen", "127.0.0.1:0"]);
    system
        .spawn("a2a", &spawn(&gateway), "A2A server listening")
        .await?;
    let url = system.logged_url("a2a")?;

    let sent = client(&url, "send", &["intake", "where is my order"])?;
    assert_eq!(sent["state"], "TASK_STATE_COMPLETED", "{sent}");
    let cancelled = client(&url, "cancel_running", &["slow", "take your time"])?;
    assert_eq!(cancelled["cancelled"], "TASK_STATE_CANCELED", "{cancelled}");
    assert_eq!(
        cancelled["got"]["state"], "TASK_STATE_CANCELED",
        "{cancelled}"
    );
    // The slow worker followed the cancel under its own block, and stopped the run.
    system
        .wait_log(
            "slow",
            "session cancelled; run stopped",
            Duration::from_secs(10),
        )
        .await?;
    for label in ["a2a", "slow", "intake", "router"] {
        let log = system.process(label).stderr();
        assert!(!log.contains("Permissions Violation"), "{label}: {log}");
        assert!(
            !log.contains("cancelled sessions stopped"),
            "{label}: {log}"
        );
    }
    Ok(())
}
