//! Deadlines hold while the agent runs: the run is cancelled at the
//! deadline (an exec program is killed) and the session ends with
//! `deadline_exceeded`, whatever the agent would have decided.

use std::time::Duration;

use baton_proto::{Envelope, EventType, now_ms};
use baton_testkit::eventually;

use crate::util::{System, kinds};

const SLOW: &str = r#"
import json, os, sys, time
json.load(sys.stdin)
with open(os.environ["PID_FILE"], "w") as f:
    f.write(str(os.getpid()))
time.sleep(60)
print(json.dumps({"output": "too late"}))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_running_past_the_deadline_is_cancelled_and_the_session_fails()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("slow.py"), SLOW)?;
    let pid_file = dir.path().join("pid");
    std::fs::write(
        dir.path().join("slow.toml"),
        format!(
            "name = \"slow\"\nkind = \"exec\"\ntimeout_ms = 120000\n[exec]\ncommand = [\"python3\", \"slow.py\"]\n[exec.env]\nPID_FILE = {:?}\n",
            pid_file.display().to_string()
        ),
    )?;
    system
        .spec_worker("slow", &dir.path().join("slow.toml"), &["--no-registry"])
        .await?;
    let deadline = now_ms() + 2_000;
    let task = Envelope::task("take your time").with_deadline(deadline);
    let events = system.run("slow", &task).await?;
    assert_eq!(
        kinds(&events),
        ["accepted", "dead_lettered", "failed"],
        "the agent's late answer is not used"
    );
    let failed = events.last().unwrap();
    assert_eq!(
        failed.reason.as_ref().map(|r| r.as_str()),
        Some("deadline_exceeded")
    );
    // It ended at the deadline, not when the agent would have answered (60 s).
    assert!(failed.at >= deadline, "{} before {deadline}", failed.at);
    assert!(
        failed.at < deadline + 10_000,
        "ended {} ms after the deadline",
        failed.at - deadline
    );
    // The program was killed.
    let pid = std::fs::read_to_string(&pid_file)?;
    eventually(Duration::from_secs(10), || {
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
        std::future::ready(if alive {
            Err(format!("exec program {pid} still runs"))
        } else {
            Ok(())
        })
    })
    .await?;
    assert_eq!(events[0].kind, EventType::Accepted);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_routers_default_deadline_ends_sessions_that_set_none() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .router(&["--no-registry", "--default-deadline-ms", "1500"])
        .await?;
    system
        .relay("p1", "plodder", &["--work-ms", "30000", "--no-fallback"])
        .await?;
    let task = Envelope::task("no deadline of my own").with_to("plodder");
    system.client.submit(&task).await?;
    let events = system
        .session_events(task.session, Duration::from_secs(20))
        .await?;
    let failed = events.last().unwrap();
    assert_eq!(failed.kind, EventType::Failed, "{:?}", kinds(&events));
    assert_eq!(
        failed.reason.as_ref().map(|r| r.as_str()),
        Some("deadline_exceeded")
    );
    Ok(())
}
