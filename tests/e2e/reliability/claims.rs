//! Contexts larger than one NATS message: the claim-check keeps their large
//! parts in the `BATON_CLAIMS` object store, and what cannot be sent even so
//! ends its session at once.

use std::path::Path;

use baton_proto::{DeadLetterReason, Envelope, EventType, Value};
use futures::StreamExt;

use crate::util::{System, agents, field, kinds};

/// Each grow agent checks that every earlier agent's message arrived whole,
/// adds one of `SIZE` bytes, and hands off to the next (the last answers
/// with what it saw).
const GROW: &str = r#"
import json, os, sys
SIZE = int(os.environ["GROW_SIZE"])
me, nxt = os.environ["BATON_AGENT"], os.environ.get("GROW_NEXT", "")
envelope = json.load(sys.stdin)
seen = []
for message in envelope["context"]["messages"]:
    name = message.get("name") or ""
    if name.startswith("grow_"):
        content = message["content"]
        if len(content) != SIZE or content != name[-1] * SIZE:
            print(f"{name}'s message arrived as {len(content)} bytes", file=sys.stderr)
            sys.exit(2)
        seen.append([name, len(content)])
reply = {"messages": [{"role": "agent", "content": me[-1] * SIZE, "name": me}]}
if nxt:
    reply.update(action="handoff", to=nxt, reason="knowledge_gap")
else:
    reply["output"] = {"seen": seen}
print(json.dumps(reply))
"#;

/// Sets many small variables: a context no claim-check can shrink, because
/// no single part of it is large.
const SPRAWL: &str = r#"
import json, sys
json.load(sys.stdin)
variables = {f"v{n:06d}": n for n in range(120000)}
print(json.dumps({"action": "handoff", "to": "sink", "reason": "knowledge_gap", "variables": variables}))
"#;

fn write_spec(dir: &Path, name: &str, script: &str, env: &[(&str, &str)]) -> std::path::PathBuf {
    std::fs::write(dir.join(format!("{name}.py")), script).unwrap();
    let env: Vec<String> = env.iter().map(|(k, v)| format!("{k} = {v:?}")).collect();
    let spec = format!(
        "name = {name:?}\nkind = \"exec\"\ntimeout_ms = 60000\n\n[exec]\ncommand = [\"python3\", \"{name}.py\"]\n\n[exec.env]\n{}\n",
        env.join("\n")
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, spec).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn a_five_megabyte_context_crosses_three_hops_and_each_part_is_stored_once()
-> anyhow::Result<()> {
    const SIZE: usize = 1_700_000;
    let mut system = System::start().await?;
    let dir = tempfile::tempdir()?;
    let size = SIZE.to_string();
    for (name, next) in [("grow_a", "grow_b"), ("grow_b", "grow_c"), ("grow_c", "")] {
        let spec = write_spec(
            dir.path(),
            name,
            GROW,
            &[("GROW_SIZE", &size), ("GROW_NEXT", next)],
        );
        system.spec_worker(name, &spec, &["--no-registry"]).await?;
    }
    let task = Envelope::task("grow the context");
    let events = system.run("grow_a", &task).await?;
    let done = events.last().unwrap();
    assert_eq!(done.kind, EventType::Completed, "{:?}", kinds(&events));
    assert_eq!(agents(&done.path), ["grow_a", "grow_b", "grow_c"]);
    // grow_c saw both earlier messages whole (and checked every byte).
    let seen = field(done.output.as_ref().unwrap(), "seen").unwrap();
    let size = Value::from(SIZE as u64);
    assert_eq!(
        seen,
        &Value::Array(vec![
            Value::Array(vec![Value::from("grow_a"), size.clone()]),
            Value::Array(vec![Value::from("grow_b"), size]),
        ])
    );
    // The first handoff carried a's message, the second a's and b's, and
    // the `completed` event's ending context all three (c's is new there):
    // each is stored once.
    let store = system
        .client
        .jetstream()
        .get_object_store("BATON_CLAIMS")
        .await?;
    let mut objects = Vec::new();
    let mut list = store.list().await?;
    while let Some(object) = list.next().await {
        objects.push(object?);
    }
    assert_eq!(
        objects.len(),
        3,
        "{:?}",
        objects.iter().map(|o| &o.name).collect::<Vec<_>>()
    );
    assert!(objects.iter().all(|o| o.size > SIZE && o.size < SIZE + 16));
    assert!(system.client.dead_letters().await?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_context_too_large_even_after_the_claim_check_fails_the_session_at_once()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    let dir = tempfile::tempdir()?;
    let spec = write_spec(dir.path(), "sprawl", SPRAWL, &[]);
    system
        .spec_worker("sprawl", &spec, &["--no-registry"])
        .await?;
    system.relay("s1", "sink", &["--no-fallback"]).await?;
    let task = Envelope::task("set a lot of variables");
    let events = system.run("sprawl", &task).await?;
    // One run, no retry, no handoff event: the envelope was never stored.
    assert_eq!(
        kinds(&events),
        ["accepted", "dead_lettered", "failed"],
        "{events:?}"
    );
    let failed = events.last().unwrap();
    assert_eq!(
        failed.reason.as_ref().map(|r| r.as_str()),
        Some("too_large")
    );
    let detail = failed.detail.clone().unwrap_or_default();
    assert!(detail.contains("max_payload"), "{detail}");
    let dead = system.client.dead_letters().await?;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, DeadLetterReason::TooLarge);
    assert_eq!(dead[0].agent, "sprawl");
    // Nothing reached the sink, and the agent does not run again after ack_wait.
    system.settled().await?;
    let stored = system.stored_events(task.session).await?;
    assert_eq!(kinds(&stored), ["accepted", "dead_lettered", "failed"]);
    Ok(())
}

/// Answers with the length of the user's message and whether it is whole.
const MEASURE: &str = r#"
import json, sys
envelope = json.load(sys.stdin)
text = envelope["context"]["messages"][0]["content"]
print(json.dumps({"output": {"length": len(text), "whole": text == "x" * len(text)}}))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_python_client_sends_a_task_larger_than_a_message() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    let dir = tempfile::tempdir()?;
    let spec = write_spec(dir.path(), "measure", MEASURE, &[]);
    system
        .spec_worker("measure", &spec, &["--no-registry"])
        .await?;
    let text = dir.path().join("big.txt");
    std::fs::write(&text, "x".repeat(3_000_000))?;
    let text = text.to_string_lossy();
    let output = system.python_client(&["--to", "measure", "--direct", "--file", &text])?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("completed: {'length': 3000000, 'whole': True}"),
        "{stdout}"
    );
    // The Rust side reads the Python side's object, and stored nothing else.
    let store = system
        .client
        .jetstream()
        .get_object_store("BATON_CLAIMS")
        .await?;
    let mut list = store.list().await?;
    let mut names = Vec::new();
    while let Some(object) = list.next().await {
        names.push(object?.name);
    }
    assert_eq!(names.len(), 1, "{names:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_answers_a_task_whose_context_is_larger_than_a_message() -> anyhow::Result<()> {
    const SIZE: usize = 1_500_000;
    let mut system = System::start().await?;
    let dir = tempfile::tempdir()?;
    let size = SIZE.to_string();
    let spec = write_spec(
        dir.path(),
        "grow_a",
        GROW,
        &[("GROW_SIZE", &size), ("GROW_NEXT", "human_support")],
    );
    system
        .spec_worker("grow_a", &spec, &["--no-registry"])
        .await?;
    system.human_support().await?;
    let task = Envelope::task("a long story for a person");
    system
        .client
        .submit_to(&baton_proto::AgentName::new("grow_a")?, &task)
        .await?;
    let waiting = system.waiting(task.session).await?;
    let id = waiting.envelope.unwrap().to_string();
    // The person sees the whole context.
    let show = system.baton(&["inbox", "show", &id]).output()?;
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(
        show.status.success(),
        "{}",
        String::from_utf8_lossy(&show.stderr)
    );
    assert!(
        shown.contains(&"a".repeat(SIZE)),
        "the 1.5 MB message is shown whole"
    );
    let reply = system
        .baton(&["inbox", "reply", &id, "Read it all. Done."])
        .output()?;
    assert!(
        reply.status.success(),
        "{}",
        String::from_utf8_lossy(&reply.stderr)
    );
    let end = system
        .client
        .wait(task.session, std::time::Duration::from_secs(30))
        .await?;
    assert_eq!(end.kind, EventType::Completed);
    assert_eq!(agents(&end.path), ["grow_a", "human_support"]);
    Ok(())
}

/// Answers with 700 KB: the `completed` event is claim-checked.
const VERBOSE: &str = r#"
import json, sys
json.load(sys.stdin)
print(json.dumps({"output": "y" * 700000}))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_large_answer_reaches_the_rust_and_the_python_client_whole() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    let dir = tempfile::tempdir()?;
    let spec = write_spec(dir.path(), "verbose", VERBOSE, &[]);
    system
        .spec_worker("verbose", &spec, &["--no-registry"])
        .await?;
    let output = system.python_client(&["--to", "verbose", "--direct", "tell me everything"])?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}\n{}",
        &stdout[..stdout.len().min(2000)],
        String::from_utf8_lossy(&output.stderr)
    );
    let answer = stdout
        .lines()
        .find_map(|line| line.strip_prefix("completed: "))
        .unwrap_or_default();
    assert_eq!(answer.len(), 700_000, "the answer arrived whole");
    assert!(answer.bytes().all(|b| b == b'y'));
    // As stored, the event is small: its answer is in the claim-check store.
    let stored = system.all_events().await?;
    let done = stored
        .iter()
        .find(|e| e.kind == EventType::Completed)
        .expect("completed");
    assert_eq!(done.output.as_ref().and_then(Value::as_str), Some(""));
    assert_eq!(done.claims.len(), 1);
    assert_eq!(done.claims[0].path, "/output");
    // The Rust client restores it too.
    let end = system
        .client
        .wait(done.session, std::time::Duration::from_secs(10))
        .await?;
    assert_eq!(
        end.output.as_ref().and_then(Value::as_str).map(str::len),
        Some(700_000)
    );
    assert!(end.claims.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_delegation_whose_context_is_larger_than_a_message_joins() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .relay(
            "parent",
            "parent",
            &["--delegate", "left,right", "--delegate-mode", "parallel"],
        )
        .await?;
    system.relay("left", "left", &[]).await?;
    system.relay("right", "right", &[]).await?;
    // The join holds the delegating envelope (and each child's context):
    // it is claim-checked like the envelope, or it could not be stored.
    let task = Envelope::task("a long conversation ".repeat(60_000));
    let events = system.run("parent", &task).await?;
    assert_eq!(
        events.last().map(|e| e.kind.clone()),
        Some(EventType::Completed)
    );
    let delegated = events
        .iter()
        .filter(|e| e.kind == EventType::Delegated)
        .count();
    assert_eq!(delegated, 2, "one per child");
    assert!(system.client.dead_letters().await?.is_empty());
    system.settled().await?;
    Ok(())
}
