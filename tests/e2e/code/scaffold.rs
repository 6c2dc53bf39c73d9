//! `baton new agent --python NAME`: the agent it writes runs as written.

use baton_proto::Envelope;

use super::output;
use crate::util::System;

#[tokio::test(flavor = "multi_thread")]
async fn a_new_python_agent_runs_as_written_and_is_not_overwritten() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    let dir = tempfile::tempdir()?;
    let folder = dir.path().to_string_lossy().into_owned();
    let wrote = system.baton_stdout(&["new", "agent", "--python", "greeter", "--dir", &folder])?;
    assert!(
        wrote.contains("greeter.py") && wrote.contains("greeter.toml"),
        "{wrote}"
    );
    let spec = dir.path().join("greeter.toml");
    let checked = system.baton(&["check", &spec.to_string_lossy()]).output()?;
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );

    system.spec_worker("w1", &spec, &["--no-registry"]).await?;
    let task = Envelope::task("hello there, new agent");
    let (_, end) = super::run_completed(&system, "greeter", &task).await?;
    assert_eq!(output(&end)["echo"], "hello there, new agent");
    assert_eq!(output(&end)["words"], 4);

    // A second run leaves the files alone and says how to overwrite them.
    let again = system
        .baton(&["new", "agent", "--python", "greeter", "--dir", &folder])
        .output()?;
    assert!(!again.status.success());
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(
        said.contains("exists") && said.contains("--force"),
        "{said}"
    );
    let bad = system.baton(&["new", "agent", "no.dots"]).output()?;
    assert!(!bad.status.success());
    Ok(())
}
