//! The calls protocol without the package: the Node example
//! (`examples/persistent/calls.mjs`) journals a step and says a message.

use baton_proto::{Envelope, EventType};

use super::output;
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
    let events = system.run("calls_node", &task).await?;
    let end = events.last().expect("an end");
    assert_eq!(
        end.kind,
        EventType::Completed,
        "{:?} {:?}",
        kinds(&events),
        end.detail
    );
    assert_eq!(output(end)["order"], "O-20");
    assert_eq!(std::fs::read_to_string(&counts)?.lines().count(), 1);
    let said: Vec<String> = (end.context.iter())
        .flat_map(|context| context.messages.iter())
        .map(|message| message.content.clone())
        .collect();
    assert!(said.iter().any(|m| m == "Reserved O-20."), "{said:?}");
    Ok(())
}
