//! A Python agent in the rest of Baton: a conversation's turns, and the
//! budget of a hop.

use baton_proto::EventType;
use baton_testkit::{FakeLlm, Scripted};

use super::{Coder, output};
use crate::util::kinds;

#[tokio::test(flavor = "multi_thread")]
async fn a_python_agent_holds_a_conversation_and_reads_its_earlier_turns() -> anyhow::Result<()> {
    let mut t = Coder::start("chat", &[], "").await?;
    t.system.router(&["--default-agent", "coder"]).await?;
    t.worker("w1").await?;
    let send = |text: &str| -> anyhow::Result<String> {
        t.baton(&["send", "--conversation", "py-1", "--to", "coder", "--wait", text])
    };
    let first = send("Hello there.")?;
    assert!(first.contains("turn 1: Hello there.; before: []; conversation: True"), "{first}");
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
    let extra = format!(
        "\n[llm]\nbase_url = \"{}\"\nmodel = \"stand-in\"\nmax_tokens = 20\nhop_budget_tokens = 90\n",
        llm.url()
    );
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
