//! The Python client of proto-schemas/ completes a demo session.

use std::time::Duration;

use crate::util::{System, wants};

#[tokio::test(flavor = "multi_thread")]
async fn the_python_client_completes_a_demo_session() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.registry("registry").await?;
    system
        .router(&["--default-agent", "general_enquiry"])
        .await?;
    for agent in ["general_enquiry", "refund", "human_support"] {
        system
            .spawn(agent, &["worker", agent], "worker started")
            .await?;
    }
    system
        .lookup_until(&wants(&[]), Duration::from_secs(5), |a| {
            a.candidates.len() == 3
        })
        .await?;
    let output = system.python_client(&["I want a refund for order ABC-123"])?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("ModuleNotFoundError"),
        "the Python client needs nats-py and msgpack: run the tests with `./just test`, which installs them\n{stderr}"
    );
    assert!(
        output.status.success(),
        "python client failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("handoff general_enquiry -> refund"),
        "{stdout}"
    );
    assert!(stdout.contains("completed"), "{stdout}");
    assert!(
        stdout.contains("path: general_enquiry -> refund"),
        "{stdout}"
    );
    Ok(())
}
