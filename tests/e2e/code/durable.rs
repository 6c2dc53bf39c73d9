//! Durable steps: a Python handler runs again against the hop journal after
//! a kill -9, an answer or its children's results, and every recorded call
//! returns without being made again.

use std::time::Duration;

use baton_proto::EventType;

use super::{Coder, llm_table};
use crate::util::kinds;

#[tokio::test(flavor = "multi_thread")]
async fn a_program_killed_mid_step_runs_no_step_twice_and_the_write_in_doubt_goes_to_a_person()
-> anyhow::Result<()> {
    let mut t = Coder::start("steps", &[], "").await?;
    let pause = t.pausing()?;
    t.worker("w1").await?;
    let task = t.send("refund ABC-123").await?;
    t.reached("charge:reached", 1).await?;
    t.kill_program()?;
    std::fs::remove_file(&pause)?;

    // The charge started and left no result: a person says what happened.
    let entry = t.entry("tool_outcome_unknown").await?;
    assert_eq!(entry["tool"], "step:charge", "{entry}");
    assert_eq!(entry["session"], task.session.to_string());
    let id = entry["id"].as_str().unwrap_or_default().to_owned();
    let settled = t.baton(&[
        "inbox",
        "resolve",
        &id,
        "--happened",
        "--result",
        r#"{"receipt": "r-person"}"#,
    ])?;
    assert!(settled.contains("not made again"), "{settled}");

    let events = t.end(&task).await?;
    let end = events.last().expect("an end");
    assert_eq!(end.kind, EventType::Completed, "{:?}", kinds(&events));
    let output = super::output(end);
    assert_eq!(output["receipt"]["receipt"], "r-person", "{output}");
    assert_eq!(output["prepared"]["text"], "refund ABC-123", "{output}");
    assert_eq!(
        (t.count("prepare"), t.count("charge")),
        (1, 1),
        "{:?}",
        t.counts()
    );
    assert!(t.inbox()?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idempotent_step_cut_short_by_a_kill_runs_again_and_the_step_before_does_not()
-> anyhow::Result<()> {
    let mut t = Coder::start("steps", &[("IDEMPOTENT", "1")], "").await?;
    let pause = t.pausing()?;
    t.worker("w1").await?;
    let task = t.send("refund ABC-123").await?;
    t.reached("charge:reached", 1).await?;
    t.kill_program()?;
    std::fs::remove_file(&pause)?;
    let events = t.end(&task).await?;
    assert_eq!(
        events.last().map(|e| e.kind.clone()),
        Some(EventType::Completed),
        "{:?}",
        kinds(&events)
    );
    assert!(
        events.iter().any(|e| e.kind == EventType::Retrying),
        "{:?}",
        kinds(&events)
    );
    assert_eq!(
        (t.count("prepare"), t.count("charge")),
        (1, 2),
        "{:?}",
        t.counts()
    );
    assert!(t.inbox()?.is_empty());
    // Each step that ran is shown as a tool call named `step:NAME`.
    let shown: Vec<String> = (events.iter())
        .filter(|e| e.kind == EventType::ToolCalled)
        .filter_map(|e| e.detail.clone())
        .collect();
    let prepared = shown.iter().filter(|d| d.starts_with("step:prepare ok"));
    assert_eq!(prepared.count(), 1, "{shown:?}");
    assert!(
        shown.iter().any(|d| d.starts_with("step:charge ok")),
        "{shown:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_that_does_not_do_what_it_did_fails_plainly_and_is_not_retried()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let runs = dir.path().join("runs");
    let mut t = Coder::start("drift", &[("RUNS", &runs.to_string_lossy())], "").await?;
    t.worker("w1").await?;
    let task = t.send("anything").await?;
    let events = t.end(&task).await?;
    let end = events.last().expect("an end");
    assert_eq!(end.kind, EventType::Failed, "{:?}", kinds(&events));
    let detail = end.detail.clone().unwrap_or_default();
    assert!(
        detail.contains("step 1 is 'step-0' in the record, 'step-1' now"),
        "{detail}"
    );
    // Run 1 failed as retryable after its step; run 2 drifted, for good.
    let retried = events
        .iter()
        .filter(|e| e.kind == EventType::Retrying)
        .count();
    assert_eq!(retried, 1, "{:?}", kinds(&events));
    assert_eq!(std::fs::read_to_string(&runs)?.lines().count(), 2);
    assert_eq!(
        (t.count("step-0"), t.count("step-1")),
        (1, 0),
        "{:?}",
        t.counts()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn two_questions_across_a_worker_restart_run_each_step_once() -> anyhow::Result<()> {
    let mut t = Coder::start("asks", &[], "").await?;
    t.worker("w1").await?;
    let task = t.send("refund please").await?;
    let first = t.entry("input_required").await?;
    assert_eq!(t.count("one"), 1);
    let id = first["id"].as_str().unwrap_or_default().to_owned();
    // The worker (and its program) is killed before the answer.
    t.system.process("w1").kill9();
    t.worker("w2").await?;
    t.baton(&["inbox", "reply", &id, "ABC-123"])?;
    let second = baton_testkit::eventually(Duration::from_secs(30), || async {
        let entries = t.inbox()?;
        (entries
            .iter()
            .find(|e| e["reason"] == "input_required" && e["id"] != first["id"])
            .cloned())
        .ok_or_else(|| anyhow::anyhow!("no second question yet: {entries:?}"))
    })
    .await?;
    let id = second["id"].as_str().unwrap_or_default().to_owned();
    t.baton(&["inbox", "reply", &id, "49.50"])?;
    let events = t.end(&task).await?;
    let end = events.last().expect("an end");
    assert_eq!(end.kind, EventType::Completed, "{:?}", kinds(&events));
    let output = super::output(end);
    assert_eq!(
        (output["order"].as_str(), output["amount"].as_str()),
        (Some("ABC-123"), Some("49.50"))
    );
    assert_eq!(
        (t.count("one"), t.count("two"), t.count("three")),
        (1, 1, 1),
        "{:?}",
        t.counts()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn parallel_children_from_python_are_joined_once_and_a_question_after_them_runs_nothing_twice()
-> anyhow::Result<()> {
    // A model call before the delegation: the continuation, which runs
    // the handler again, gets its answer from the journal.
    let llm = baton_testkit::FakeLlm::start(vec![baton_testkit::Scripted::text("two parts")])?;
    let extra = llm_table(&llm, "");
    let mut t = Coder::start("delegate", &[("ASK_MODEL", "1")], &extra).await?;
    let helper = t.dir.path().join("helper.toml");
    std::fs::write(
        &helper,
        "name = \"helper\"\nkind = \"exec\"\n\n[exec]\ncommand = [\"python3\", \"-c\", \"import json, sys; e = json.load(sys.stdin); print(json.dumps({'action': 'terminate', 'output': 'did ' + e['context']['messages'][-1]['content']}))\"]\n",
    )?;
    t.system
        .spec_worker("helper", &helper, &["--no-registry"])
        .await?;
    t.worker("w1").await?;
    let task = t.send("split it").await?;
    let question = t.entry("input_required").await?;
    let id = question["id"].as_str().unwrap_or_default().to_owned();
    t.baton(&["inbox", "reply", &id, "yes"])?;
    let (events, end) = t.completed(&task).await?;
    let end = &end;
    let output = super::output(end);
    assert_eq!(
        output["parts"],
        serde_json::json!(["did part a", "did part b"]),
        "{output}"
    );
    assert_eq!(output["shipped"], "yes", "{output}");
    assert_eq!(
        (t.count("before"), t.count("after")),
        (1, 1),
        "{:?}",
        t.counts()
    );
    assert_eq!(llm.requests().len(), 1, "the model was asked once");
    let delegated = events
        .iter()
        .filter(|e| e.kind == EventType::Delegated)
        .count();
    assert_eq!(delegated, 2, "{:?}", kinds(&events));
    Ok(())
}

/// Kills the worker (`worker`) or the program (otherwise) while a step's
/// side effect runs, then starts a worker again: the step goes to a person.
async fn killed_mid_step(worker: bool) -> anyhow::Result<()> {
    let mut t = Coder::start("steps", &[], "").await?;
    let pause = t.pausing()?;
    t.worker("w1").await?;
    let task = t.send("refund ABC-123").await?;
    t.reached("charge:reached", 1).await?;
    t.kill(worker).await?;
    std::fs::remove_file(&pause)?;
    let entry = t.entry("tool_outcome_unknown").await?;
    assert_eq!(entry["tool"], "step:charge", "{entry}");
    let id = entry["id"].as_str().unwrap_or_default().to_owned();
    t.baton(&["inbox", "resolve", &id, "--not-happened"])?;
    t.completed(&task).await?;
    // Not happened: made again, once; the step before it never again.
    assert_eq!(
        (t.count("prepare"), t.count("charge")),
        (1, 2),
        "{:?}",
        t.counts()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_step_sends_the_step_to_a_person_and_not_happened_makes_it_once_more()
-> anyhow::Result<()> {
    killed_mid_step(true).await
}

/// Kills the worker or the program while the model is asked: the model is
/// asked again (an answer is no side effect), the step before it is not run
/// again, and the session completes once.
async fn killed_mid_model_call(worker: bool) -> anyhow::Result<()> {
    use baton_testkit::{FakeLlm, Scripted};
    let llm = FakeLlm::start(vec![
        Scripted::text("first answer, never heard").after(Duration::from_secs(3)),
        Scripted::text("Booked."),
    ])?;
    let extra = llm_table(&llm, "");
    let mut t = Coder::start("model", &[], &extra).await?;
    t.worker("w1").await?;
    let task = t.send("book it").await?;
    baton_testkit::eventually(Duration::from_secs(30), || {
        let asked = llm.requests().len();
        std::future::ready(if asked >= 1 {
            Ok(())
        } else {
            Err("not asked yet")
        })
    })
    .await?;
    t.kill(worker).await?;
    let (_, end) = t.completed(&task).await?;
    let end = &end;
    assert_eq!(super::output(end)["answer"], "Booked.");
    assert_eq!(
        (t.count("prepare"), llm.requests().len()),
        (1, 2),
        "{:?}",
        t.counts()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_program_killed_mid_model_call_asks_again_and_runs_no_step_twice() -> anyhow::Result<()> {
    killed_mid_model_call(false).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_model_call_asks_again_and_runs_no_step_twice() -> anyhow::Result<()> {
    killed_mid_model_call(true).await
}
