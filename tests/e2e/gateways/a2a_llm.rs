//! An LLM agent says everything A2A can through the built-in tool
//! `a2a_reply` (`[llm] a2a_reply = true`), seen with the official A2A
//! Python SDK on both bindings: artifacts of text, file and data parts,
//! streamed in chunks; a direct Message; a rejection; and a call it could
//! not read, which the model is told of once. A task not sent through A2A
//! is not offered the tool. The stand-in model counts what it was asked.
//! A Rust agent reads the message's id and metadata and answers the same way,
//! and a person answers a human agent's task so with `baton inbox reply --a2a`.

use baton_testkit::{FakeLlm, Scripted};
use serde_json::{Value, json};

use crate::gateways::a2a::client;
use crate::util::{System, llm_table};

/// What the stand-in model answers, in the order the test sends.
fn script() -> Vec<Scripted> {
    let reply = |arguments: Value| Scripted::tool_calls(&[("a2a_reply", &arguments.to_string())]);
    let chunks = json!({"artifacts": [
        {"artifactId": "report", "parts": [{"text": "part one "}], "append": true},
        {"artifactId": "report", "parts": [{"text": "part two"}], "append": true, "lastChunk": true},
        {"artifactId": "file", "parts": [{"raw": "dGNr", "filename": "out.txt", "mediaType": "text/plain"}]},
        {"artifactId": "data", "parts": [{"data": {"count": 42}}]},
    ]});
    vec![
        reply(chunks.clone()),
        reply(json!({"message": [{"text": "A direct answer"}]})),
        reply(json!({"reject": "not a task for me"})),
        // Unreadable (no parts), then a plain answer.
        reply(json!({"message": []})),
        Scripted::text("Plain words"),
        reply(chunks),
        Scripted::text("Sent by baton"),
    ]
}

/// The worker of `spec` (agent type `name`), behind the router and the
/// gateway; the gateway's URL.
async fn behind_a2a(
    name: &str,
    spec: String,
) -> anyhow::Result<(System, String, tempfile::TempDir)> {
    let (mut system, dir) = crate::util::spec_workers_with(&[(name, spec)], &[]).await?;
    system
        .router(&["--default-agent", name, "--no-registry"])
        .await?;
    let args = ["a2a", "serve", "--listen", "127.0.0.1:0"];
    system.spawn("a2a", &args, "A2A server listening").await?;
    let url = system.logged_url("a2a")?;
    Ok((system, url, dir))
}

/// `writer`, an LLM agent offered `a2a_reply`, behind the gateway.
async fn system(llm: &FakeLlm) -> anyhow::Result<(System, String, tempfile::TempDir)> {
    let spec = format!(
        "name = \"writer\"\nkind = \"llm\"\ndescription = \"Writes reports\"\n{}",
        llm_table(llm, "a2a_reply = true\n")
    );
    behind_a2a("writer", spec).await
}

/// The names of the tools request `n` offered the model.
fn offered(llm: &FakeLlm, n: usize) -> Vec<String> {
    llm.requests()[n].body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|tool| tool["function"]["name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_llm_agent_answers_with_artifacts_a_message_or_a_rejection() -> anyhow::Result<()> {
    let llm = FakeLlm::start(script())?;
    let (system, url, _dir) = system(&llm).await?;

    // Artifacts: a text artifact in two chunks, a file and data, on JSON-RPC.
    let task = &client(&url, "whole", &["writer", "Write the report"])?["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    let artifacts = task["artifacts"].as_array().expect("artifacts");
    let ids: Vec<&str> = artifacts
        .iter()
        .map(|a| a["artifactId"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(ids, ["report", "file", "data"], "{task}");
    assert_eq!(
        artifacts[0]["parts"],
        json!([{"text": "part one "}, {"text": "part two"}])
    );
    assert_eq!(artifacts[1]["parts"][0]["filename"], "out.txt");
    assert_eq!(artifacts[1]["parts"][0]["mediaType"], "text/plain");
    assert_eq!(artifacts[1]["parts"][0]["raw"], "dGNr");
    // Protobuf's Struct holds numbers as doubles.
    assert_eq!(artifacts[2]["parts"][0]["data"], json!({"count": 42.0}));
    assert!(offered(&llm, 0).contains(&"a2a_reply".to_owned()));

    // A direct Message, over HTTP+JSON: no task.
    let direct = client(&url, "rest:whole", &["writer", "Just answer"])?;
    assert!(direct.get("task").is_none(), "{direct}");
    assert_eq!(
        direct["message"]["parts"],
        json!([{"text": "A direct answer"}])
    );
    assert_eq!(direct["message"]["role"], "ROLE_AGENT");

    // A rejection.
    let rejected = &client(&url, "whole", &["writer", "Book me a flight"])?["task"];
    assert_eq!(
        rejected["status"]["state"], "TASK_STATE_REJECTED",
        "{rejected}"
    );

    // A call the gateway could not read: the model is told why, once, and
    // its next answer (text) is a text part.
    let plain = &client(&url, "whole", &["writer", "Say it plainly"])?["task"];
    assert_eq!(plain["status"]["state"], "TASK_STATE_COMPLETED", "{plain}");
    assert_eq!(
        plain["artifacts"][0]["parts"],
        json!([{"text": "Plain words"}])
    );
    let told = &llm.requests()[4].body["messages"];
    let told = told.as_array().and_then(|m| m.last()).expect("messages");
    assert_eq!(told["role"], "tool", "{told}");
    assert!(
        told["content"]
            .as_str()
            .is_some_and(|c| c.contains("non-empty list of parts")),
        "{told}"
    );

    // Streamed: each chunk one artifact update, in order, with append and lastChunk.
    let streamed = client(&url, "stream", &["writer", "Stream the report"])?;
    let updates: Vec<(Value, Value, Value, Value)> = streamed["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["kind"] == "artifact")
        .map(|e| {
            (
                e["id"].clone(),
                e["append"].clone(),
                e["last"].clone(),
                e["text"].clone(),
            )
        })
        .collect();
    assert_eq!(
        updates[..2],
        [
            (
                json!("report"),
                json!(true),
                json!(false),
                json!(["part one "])
            ),
            (
                json!("report"),
                json!(true),
                json!(true),
                json!(["part two"])
            ),
        ],
        "{streamed}"
    );
    assert_eq!(updates.len(), 4, "{streamed}");

    // Not through A2A: the tool is not offered.
    let sent = system.baton_stdout(&["send", "--wait", "--to", "writer", "Hello"])?;
    assert!(sent.contains("Sent by baton"), "{sent}");
    let last = llm.requests().len() - 1;
    assert!(!offered(&llm, last).contains(&"a2a_reply".to_owned()));
    // One request a message, the corrected call's two.
    assert_eq!(llm.requests().len(), 7);
    Ok(())
}

/// A Rust agent that answers in A2A's terms what reached it of the A2A
/// message (`Task::variable("a2a")`), and rejects when its metadata asks.
struct Clerk;

impl baton_worker::Agent for Clerk {
    async fn handle(
        &self,
        task: baton_worker::Task,
    ) -> Result<baton_worker::Outcome, baton_worker::AgentError> {
        let heard = task
            .variable("a2a")
            .and_then(|value| serde_json::to_value(value).ok())
            .unwrap_or_default();
        let said = if heard["metadata"]["reject"] == true {
            json!({"a2a": {"reject": "asked to"}})
        } else {
            let text = format!(
                "{}|{}|{}",
                heard["message_id"].as_str().unwrap_or_default(),
                heard["metadata"],
                heard["reference_task_ids"]
            );
            json!({"a2a": {"artifacts": [{"artifactId": "heard", "parts": [{"text": text}]}]}})
        };
        let output = rmpv::ext::to_value(said)
            .map_err(|err| baton_worker::AgentError::fatal(err.to_string()))?;
        Ok(baton_worker::Outcome::complete(output).into())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rust_agent_hears_the_a2a_message_and_answers_in_its_terms() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    let config = baton_worker::WorkerConfig::new(baton_worker::AgentName::new("clerk")?)
        .with_registry(false);
    let worker = baton_worker::Worker::new(system.nats.clone(), config, Clerk);
    let running = tokio::spawn(worker.run(std::future::pending::<()>()));
    system
        .router(&["--default-agent", "clerk", "--no-registry"])
        .await?;
    let args = ["a2a", "serve", "--listen", "127.0.0.1:0"];
    system.spawn("a2a", &args, "A2A server listening").await?;
    let url = system.logged_url("a2a")?;

    let heard = client(&url, "send_meta", &["clerk", "Hi", r#"{"locale": "fr"}"#])?;
    assert_eq!(heard["state"], "TASK_STATE_COMPLETED", "{heard}");
    let text = heard["answer"][0].as_str().unwrap_or_default();
    let [message_id, metadata, refs] = text.splitn(3, '|').collect::<Vec<_>>()[..] else {
        panic!("{heard}");
    };
    assert!(message_id.parse::<uuid::Uuid>().is_ok(), "{heard}");
    assert_eq!(
        serde_json::from_str::<Value>(metadata)?,
        json!({"locale": "fr"})
    );
    assert_eq!(refs, "[]");

    let rejected = client(&url, "send_meta", &["clerk", "Hi", r#"{"reject": true}"#])?;
    assert_eq!(rejected["state"], "TASK_STATE_REJECTED", "{rejected}");
    running.abort();
    Ok(())
}

/// The one task waiting in the inbox: its id.
fn waiting(system: &System) -> anyhow::Result<String> {
    let listed = system.baton_stdout(&["inbox", "ls", "--json"])?;
    let lines: Vec<Value> = listed
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    anyhow::ensure!(lines.len() == 1, "{listed}");
    Ok(lines[0]["id"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_answers_a_human_agents_task_in_a2a_terms() -> anyhow::Result<()> {
    let spec = "name = \"desk\"\nkind = \"human\"\ndescription = \"A person\"\n".to_owned();
    let (system, url, _dir) = behind_a2a("desk", spec).await?;

    // A rejection.
    let asked = client(&url, "send", &["desk", "Book me a flight"])?;
    assert_eq!(asked["state"], "TASK_STATE_INPUT_REQUIRED", "{asked}");
    let id = waiting(&system)?;
    // Bad JSON is refused with the fix, and the task still waits.
    let bad = system
        .baton(&["inbox", "reply", &id, "No", "--a2a", "{reject"])
        .output()?;
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--a2a is not JSON"));
    assert_eq!(waiting(&system)?, id);
    let args = ["inbox", "reply", &id, "Not ours", "--a2a"];
    let replied = system.baton_stdout(&[&args[..], &[r#"{"reject": "not ours"}"#]].concat())?;
    assert!(replied.contains("completed"), "{replied}");
    let task = asked["id"].as_str().unwrap_or_default();
    let rejected = client(&url, "get", &[task])?;
    assert_eq!(rejected["state"], "TASK_STATE_REJECTED", "{rejected}");

    // An artifact.
    let asked = client(&url, "send", &["desk", "Quote me"])?;
    let id = waiting(&system)?;
    let said = r#"{"artifacts": [{"artifactId": "quote", "parts": [{"text": "42 EUR"}]}]}"#;
    system.baton_stdout(&["inbox", "reply", &id, "Quoted", "--a2a", said])?;
    let quoted = client(&url, "get", &[asked["id"].as_str().unwrap_or_default()])?;
    assert_eq!(quoted["state"], "TASK_STATE_COMPLETED", "{quoted}");
    assert_eq!(quoted["answer"], json!(["42 EUR"]), "{quoted}");
    Ok(())
}
