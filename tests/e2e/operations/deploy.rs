//! What `deploy/` ships: the Kubernetes files are `baton manifests` output,
//! and the KEDA trigger it generates reads the right consumer's lag from
//! a real server's `/jsz`, computed as KEDA's `nats-jetstream` scaler does.
//! (`.ci/validate-deploy` checks the files against their schemas.)

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use baton_proto::{AgentName, Envelope};
use baton_testkit::{baton_binary, eventually};

use crate::util::System;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The `.yaml` files of `dir`, by name.
fn yaml_files(dir: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            files.insert(name, std::fs::read_to_string(&path)?);
        }
    }
    Ok(files)
}

/// `baton manifests ARGS --out DIR` (from the repository root).
fn manifests(args: &[&str], out: &Path) -> anyhow::Result<()> {
    let output = std::process::Command::new(baton_binary())
        .current_dir(root())
        .arg("manifests")
        .args(args)
        .arg("--out")
        .arg(out)
        .output()?;
    anyhow::ensure!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

#[test]
fn deploy_kubernetes_is_the_output_of_baton_manifests() -> anyhow::Result<()> {
    let out = tempfile::tempdir()?;
    let specs = [
        "examples/support/human_support.toml",
        "examples/support/refunds.toml",
        "examples/support/triage.toml",
    ];
    let mut args = specs.to_vec();
    args.extend(["--default-agent", "triage", "--fallback", "human_support"]);
    manifests(&args, out.path())?;
    let generated = yaml_files(out.path())?;
    let shipped = yaml_files(&root().join("deploy/kubernetes"))?;
    assert_eq!(
        generated.keys().collect::<Vec<_>>(),
        shipped.keys().collect::<Vec<_>>()
    );
    for (name, text) in &generated {
        assert_eq!(
            Some(text),
            shipped.get(name),
            "deploy/kubernetes/{name} is out of date: regenerate it (see its README)"
        );
    }
    // The exec agent's script travels with its spec.
    assert!(generated["agent-triage.yaml"].contains("triage.sh: |"));
    Ok(())
}

#[test]
fn manifests_refuse_bad_input_with_the_fix() -> anyhow::Result<()> {
    let out = tempfile::tempdir()?;
    let run = |args: &[&str]| {
        std::process::Command::new(baton_binary())
            .current_dir(root())
            .arg("manifests")
            .args(args)
            .arg("--out")
            .arg(out.path())
            .output()
    };
    let missing = run(&["examples/support/nothing.toml"])?;
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read the spec"));
    let bounds = run(&[
        "examples/support/triage.toml",
        "--min-pods",
        "5",
        "--max-pods",
        "2",
    ])?;
    assert!(String::from_utf8_lossy(&bounds.stderr).contains("--min-pods 5 is above --max-pods 2"));
    Ok(())
}

/// `key: value` of the first line of `text` that starts (after spaces) with `key:`.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .map(str::trim)
        .find_map(|line| line.strip_prefix(&format!("{key}: ")))
        .map(|value| value.trim_matches('\''))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_generated_keda_trigger_reads_the_backlog_from_jsz() -> anyhow::Result<()> {
    let out = tempfile::tempdir()?;
    manifests(&["examples/support/triage.toml"], out.path())?;
    let triage = std::fs::read_to_string(out.path().join("agent-triage.yaml"))?;
    let trigger = triage
        .split("kind: ScaledObject")
        .nth(1)
        .unwrap_or_default();
    let (account, stream, consumer) = (
        field(trigger, "account"),
        field(trigger, "stream"),
        field(trigger, "consumer"),
    );
    let (Some(account), Some(stream), Some(consumer)) = (account, stream, consumer) else {
        anyhow::bail!("the trigger lacks account, stream or consumer:\n{trigger}");
    };
    let threshold = field(trigger, "lagThreshold");
    assert_eq!(threshold, Some("8"), "the spec's concurrency");
    let (mut system, monitor) = System::monitored().await?;
    // Two tasks held by a slow worker (ack pending), five waiting.
    let flags = ["--no-registry", "--work-ms", "60000", "--concurrency", "2"];
    system.relay("triage", "triage", &flags).await?;
    for n in 0..7 {
        let task = Envelope::task(format!("backlog {n}"));
        system
            .client
            .submit_to(&AgentName::new("triage")?, &task)
            .await?;
    }
    // As KEDA asks: /jsz?acc=<account>&consumers=true&config=true, then
    // num_pending + num_ack_pending of the consumer in that account's stream.
    let url = format!(
        "http://127.0.0.1:{monitor}/jsz?acc={}&consumers=true&config=true",
        account.replace('$', "%24")
    );
    let (lag, ack_pending) = eventually(Duration::from_secs(20), || async {
        let jsz = crate::operations::metrics::get_json(&url).await?;
        let details = jsz["account_details"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let found = details
            .iter()
            .filter(|a| a["name"] == account || a["id"] == account)
            .flat_map(|a| a["stream_detail"].as_array().cloned().unwrap_or_default())
            .filter(|s| s["name"] == stream)
            .flat_map(|s| s["consumer_detail"].as_array().cloned().unwrap_or_default())
            .find(|c| c["name"] == consumer)
            .ok_or_else(|| {
                anyhow::anyhow!("no consumer {consumer} in {stream} of {account}: {jsz}")
            })?;
        let pending = found["num_pending"].as_u64().unwrap_or(0);
        let ack_pending = found["num_ack_pending"].as_u64().unwrap_or(0);
        // The server's counts settle in a moment: wait for both.
        anyhow::ensure!(ack_pending == 2, "{ack_pending} ack pending so far");
        anyhow::ensure!(
            pending + ack_pending == 7,
            "a backlog of {pending} + {ack_pending} so far"
        );
        Ok((pending + ack_pending, ack_pending))
    })
    .await?;
    assert_eq!((lag, ack_pending), (7, 2));
    Ok(())
}
