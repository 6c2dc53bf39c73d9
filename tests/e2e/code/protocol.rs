//! The calls protocol without the package: the Node example
//! (`examples/persistent/calls.mjs`) journals a step and says a message.

use baton_proto::Envelope;

use super::{output, run_completed, said};
use crate::util::{System, example, kinds};

#[tokio::test(flavor = "multi_thread")]
async fn a_node_program_journals_its_step_through_the_protocol() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    let dir = tempfile::tempdir()?;
    let counts = dir.path().join("counts");
    let script = example("persistent/calls.mjs");
    let spec = std::fs::read_to_string(example("persistent/calls_node.toml"))?.replace(
        "command = [\"node\", \"calls.mjs\"]",
        &format!("command = [\"node\", {:?}]", script.to_string_lossy()),
    ) + &format!("\n[exec.env]\nCOUNTS = {:?}\n", counts.to_string_lossy());
    let path = dir.path().join("calls_node.toml");
    std::fs::write(&path, spec)?;
    system.spec_worker("w1", &path, &["--no-registry"]).await?;
    let task = Envelope::task("reserve the blue one");
    let (_, end) = run_completed(&system, "calls_node", &task).await?;
    assert_eq!(output(&end)["order"], "O-20");
    assert_eq!(std::fs::read_to_string(&counts)?.lines().count(), 1);
    let said = said(&end);
    assert!(said.iter().any(|m| m == "Reserved O-20."), "{said:?}");
    Ok(())
}

/// A raw program (no package) that calls as the package does: a step, a
/// `say` marked `wait: false` (which the worker answers anyway: it takes
/// `wait: false` on a step's value only), then the step's value, not
/// waited for, and its answer in one write. It writes the calls'
/// results it got to `SEEN`.
const UNAWAITED: &str = r#"import json, os, sys
out = sys.stdout
seen = open(os.environ["SEEN"], "a")
def send(*messages):
    out.write("".join(json.dumps(m) + "\n" for m in messages))
    out.flush()
def result():
    while True:
        line = json.loads(sys.stdin.readline())
        if "call" in line:
            seen.write(json.dumps(line) + "\n")
            seen.flush()
            return line
for line in sys.stdin:
    request = json.loads(line)
    if "call" in request:  # a result after the answer: there should be none
        seen.write(json.dumps(request) + "\n")
        seen.flush()
        continue
    task = request["id"]
    assert request.get("no_wait") is True, request
    send({"call": "s1", "task": task, "op": "step", "name": "charge"})
    key = result()["result"]["key"]
    send({"call": "s2", "task": task, "wait": False, "op": "say", "text": "Charging."})
    result()
    send(
        {"call": "s3", "task": task, "wait": False, "op": "step_done", "name": "charge", "key": key, "value": {"receipt": "r-1"}},
        {"id": task, "reply": {"action": "terminate", "output": "charged"}},
    )
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_steps_value_sent_with_its_answer_is_journaled_first_and_other_calls_are_answered()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    let dir = tempfile::tempdir()?;
    let (program, seen) = (dir.path().join("raw.py"), dir.path().join("seen"));
    std::fs::write(&program, UNAWAITED)?;
    let spec = format!(
        "name = \"raw\"\nkind = \"exec\"\ntimeout_ms = 20000\n\n[exec]\ncommand = [\"python3\", {:?}]\nmode = \"persistent\"\n\n[exec.env]\nSEEN = {:?}\n",
        program.to_string_lossy(),
        seen.to_string_lossy()
    );
    let path = dir.path().join("raw.toml");
    std::fs::write(&path, spec)?;
    system.spec_worker("w1", &path, &["--no-registry"]).await?;
    let (events, _) = run_completed(&system, "raw", &Envelope::task("charge it")).await?;
    // The value was taken before the answer: the step is shown as ended.
    assert_eq!(
        super::shown(&events),
        ["step:charge ok"],
        "{:?}",
        kinds(&events)
    );
    // The step and the `say` were answered, the step's value was not (a
    // result for it would be read, and written down, after the answer).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let results: Vec<serde_json::Value> = std::fs::read_to_string(&seen)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let calls: Vec<&str> = results.iter().filter_map(|r| r["call"].as_str()).collect();
    assert_eq!(calls, ["s1", "s2"], "{results:?}");
    let said = said(events.last().expect("an end"));
    assert!(said.iter().any(|m| m == "Charging."), "{said:?}");
    Ok(())
}
