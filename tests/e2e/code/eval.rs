//! `baton eval` on a Python agent: its program runs again, its model is
//! asked anew, and its step and tool calls are answered from the record.
//! A step the recorded session did not run is never run: the evaluation
//! stops there as `would_write`. Each step's side effect is counted in a
//! file, and the order server logs each refund.

use serde_json::Value as Json;

use super::history::{counted, refunds, stand_ins, two_versions};

/// The one session `baton eval coder --version VERSION --json` printed.
fn evaluated(t: &super::Coder, version: &str) -> anyhow::Result<Json> {
    let stdout = t.baton(&["eval", "coder", "--version", version, "--json"])?;
    let lines: Vec<Json> = (stdout.lines())
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    anyhow::ensure!(lines.len() == 2, "one session and the summary: {stdout}");
    Ok(lines[0].clone())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_agents_evaluation_reuses_its_steps_and_tools_and_never_runs_a_new_step()
-> anyhow::Result<()> {
    let (llm, _logs, log, tables) = stand_ins()?;
    let t = two_versions("history", &[("REFUND", "1")], &tables).await?;
    let task = t.send("Please refund order ABC-123.").await?;
    t.completed(&task).await?;
    let effects = ["coder:prepare", "coder:one", "coder:two"];
    assert_eq!(counted(&t, effects), [1, 1, 0], "{:?}", t.counts());
    assert_eq!((llm.requests().len(), refunds(&log)), (1, 1));

    // Version 2's own step was never run by the recorded session: the
    // evaluation stops before it. The model was asked anew; the recorded
    // step and refund were reused.
    let two = evaluated(&t, "2")?;
    assert_eq!(two["session"], task.session.to_string(), "{two}");
    assert_eq!(two["trial"]["reason"], "would_write", "{two}");
    let call = two["would_write"].as_str().unwrap_or_default();
    assert!(call.contains("step \"flavour-two\""), "{two}");
    assert_eq!(two["same_answer"], false, "{two}");
    assert_eq!(counted(&t, effects), [1, 1, 0], "{:?}", t.counts());
    assert_eq!((llm.requests().len(), refunds(&log)), (2, 1));

    // Version 1 again: every step and the refund come from the record;
    // only the model's answer is new (the stand-in counts).
    let one = evaluated(&t, "1")?;
    assert_eq!(one["trial"]["outcome"], "completed", "{one}");
    assert!(one.get("would_write").is_none(), "{one}");
    let answer = one["trial"]["answer"].as_str().unwrap_or_default();
    assert!(answer.contains("said 3") && answer.contains("one"), "{one}");
    assert_eq!(one["same_answer"], false, "{one}");
    // Its events say what it replays.
    let replay: uuid::Uuid = one["replay"].as_str().unwrap_or_default().parse()?;
    let events = t.system.client.history(replay).await?;
    let kinds: Vec<&str> = events.iter().map(|event| event.kind.as_str()).collect();
    let replayed = Some(task.session);
    assert!(
        events.iter().all(|event| event.replay_of == replayed),
        "{kinds:?}"
    );
    assert_eq!(counted(&t, effects), [1, 1, 0], "{:?}", t.counts());
    assert_eq!((llm.requests().len(), refunds(&log)), (3, 1));
    Ok(())
}
