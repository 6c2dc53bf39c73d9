//! A Python agent in the rest of Baton: a conversation's turns, and the
//! budget of a hop.

use baton_proto::EventType;
use baton_testkit::{FakeLlm, Scripted};

use super::{Coder, llm_table, output};
use crate::util::kinds;

#[tokio::test(flavor = "multi_thread")]
async fn a_python_agent_holds_a_conversation_and_reads_its_earlier_turns() -> anyhow::Result<()> {
    let mut t = Coder::start("chat", &[], "").await?;
    t.system.router(&["--default-agent", "coder"]).await?;
    t.worker("w1").await?;
    let send = |text: &str| -> anyhow::Result<String> {
        t.baton(&[
            "send",
            "--conversation",
            "py-1",
            "--to",
            "coder",
            "--wait",
            text,
        ])
    };
    let first = send("Hello there.")?;
    assert!(
        first.contains("turn 1: Hello there.; before: []; conversation: True"),
        "{first}"
    );
    let second = send("And again.")?;
    assert!(
        second.contains("turn 2: And again.; before: ['turn 1: Hello there."),
        "{second}"
    );
    assert!(second.contains("conversation: True"), "{second}");
    let shown = t.baton(&["conversations", "show", "py-1"])?;
    assert!(shown.contains("answer (coder"), "{shown}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_agents_model_calls_stop_at_the_hop_budget() -> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![
        Scripted::text("A long first answer.").with_usage("stand-in", 40, 30),
        Scripted::text("never asked"),
    ])?;
    let extra = llm_table(&llm, "max_tokens = 20\nhop_budget_tokens = 90\n");
    let mut t = Coder::start("spend", &[], &extra).await?;
    t.worker("w1").await?;
    let task = t.send("Spend it.").await?;
    let events = t.end(&task).await?;
    let end = events.last().expect("an end");
    // The fallback is a person; none is configured, so the session fails
    // with the budget's reason, and the second call was never made.
    assert_ne!(end.kind, EventType::Completed, "{:?}", kinds(&events));
    let said = format!("{:?} {:?}", end.detail, end.reason);
    assert!(said.contains("budget"), "{said}");
    assert_eq!(llm.requests().len(), 1);
    let _ = output(end);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_agent_answers_an_a2a_client_with_artifacts_and_a_rejection() -> anyhow::Result<()>
{
    use std::time::Duration;
    let mut t = Coder::start("a2a", &[], "").await?;
    t.system.registry("registry").await?;
    t.system.router(&["--default-agent", "coder"]).await?;
    let spec = t.spec.clone();
    t.system.spec_worker("w1", &spec, &[]).await?;
    let mut command = t.system.baton(&["a2a", "serve", "--listen", "127.0.0.1:0"]);
    command.env_remove("BATON_A2A_TOKEN");
    t.system
        .adopt("a2a", baton_testkit::ChildProcess::spawn(command, "a2a")?);
    t.system
        .wait_log("a2a", "A2A server listening", Duration::from_secs(30))
        .await?;
    let url = t.system.logged_url("a2a")?;
    let client = |text: &str| crate::gateways::a2a::client(&url, "send", &["coder", text]);
    let answered = client("what is in it?")?;
    assert_eq!(answered["state"], "TASK_STATE_COMPLETED", "{answered}");
    assert_eq!(
        answered["answer"],
        serde_json::json!(["part one", "part two"]),
        "{answered}"
    );
    let rejected = client("please reject this")?;
    assert_eq!(rejected["state"], "TASK_STATE_REJECTED", "{rejected}");
    Ok(())
}
