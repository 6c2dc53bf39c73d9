//! The MCP project's own conformance suite (`@modelcontextprotocol/conformance`,
//! installed by `./just test` into .tools with Node.js 22) against both
//! sides. The server: `baton mcp serve` with the examples/mcp-conformance
//! agents, every server scenario passing or failing as this test says, and
//! the tools that ask the user run twice, the second time with the client's
//! answer. The client: a worker's `[[mcp]]` connection, reached as
//! `baton check --tools` does, signing in as the scenario asks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::util::{System, example, wants};

/// The scenarios that fail, each because Baton does not offer what it
/// tests: resources, prompts and sampling are not declared (see
/// docs/operators/gateways.md, "What it does not offer"), so even their
/// listings answer "method not found", as MCP asks of an undeclared one.
const NOT_OFFERED: [&str; 12] = [
    "tools-call-sampling",
    "resources-list",
    "prompts-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "resources-subscribe",
    "resources-unsubscribe",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
];

/// The tools that ask the user (an exec `ask` with a `schema`).
const ASKING: [&str; 3] = [
    "test_elicitation",
    "test_elicitation_sep1034_defaults",
    "test_elicitation_sep1330_enums",
];

/// The suite's runner and Node.js 22, as `./just test` installs them.
fn suite() -> anyhow::Result<(PathBuf, PathBuf)> {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools");
    let node = tools.join("bin/node22");
    let runner =
        tools.join("mcp-conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js");
    anyhow::ensure!(
        node.exists() && runner.exists(),
        "the MCP conformance suite is not installed: run the tests with `./just test` (or scripts/test-setup), which installs it into .tools"
    );
    Ok((node, runner))
}

/// How the suite ends a result folder's name: `-` and the time.
const STAMP: &str = "-2026-11-29T05-43-05-698Z";

/// Runs the suite's `args` with `out` as its results folder, the client
/// under test reaching NATS at `nats` and noting how it ended in `log`,
/// when given; its output.
fn run_suite(args: &[&str], out: &Path, client: Option<(&str, &Path)>) -> anyhow::Result<String> {
    let (node, runner) = suite()?;
    let ran = tokio::task::block_in_place(|| {
        let mut command = std::process::Command::new(&node);
        command
            .arg(&runner)
            .args(args)
            .arg("-o")
            .arg(out)
            .env("BATON_BIN", baton_testkit::baton_binary());
        if let Some((nats, log)) = client {
            command
                .env("NATS_URL", nats)
                .env("CONFORMANCE_CLIENT_LOG", log);
        }
        command.output()
    })?;
    Ok(String::from_utf8_lossy(&ran.stdout).into_owned())
}

/// Each scenario's checks, from the suite's `checks.json` files: in
/// `server-<scenario>-<timestamp>`, or `<scenario>-<timestamp>` for a
/// client's (`auth/…` in a folder of its own).
fn outcomes(out: &Path) -> anyhow::Result<BTreeMap<String, Vec<serde_json::Value>>> {
    let mut outcomes = BTreeMap::new();
    let mut folders = vec![out.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder)? {
            let dir = entry?.path();
            if !dir.join("checks.json").exists() {
                if dir.is_dir() {
                    folders.push(dir);
                }
                continue;
            }
            let name = dir.strip_prefix(out)?.to_string_lossy().into_owned();
            // `-YYYY-MM-DDTHH-MM-SS-mmmZ` ends it.
            let named = name.strip_prefix("server-").unwrap_or(&name);
            let scenario = (named.len().checked_sub(STAMP.len()))
                .and_then(|end| named.get(..end))
                .filter(|_| named.ends_with('Z'))
                .map(str::to_owned)
                .ok_or_else(|| anyhow::anyhow!("an unexpected result folder {name}"))?;
            let checks: serde_json::Value =
                serde_json::from_slice(&std::fs::read(dir.join("checks.json"))?)?;
            let checks = checks.as_array().cloned().unwrap_or_default();
            anyhow::ensure!(!checks.is_empty(), "{scenario} ran no check");
            outcomes.insert(scenario, checks);
        }
    }
    Ok(outcomes)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_projects_conformance_suite_passes_all_but_what_is_not_offered()
-> anyhow::Result<()> {
    suite()?;
    let dir = tempfile::tempdir()?;
    let runs = dir.path().join("runs");
    let mut system = System::start().await?;
    system.registry("registry").await?;
    system.router(&[]).await?;
    let folder = example("mcp-conformance");
    let mut specs: Vec<PathBuf> = std::fs::read_dir(&folder)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    specs.retain(|path| path.extension().is_some_and(|e| e == "toml"));
    specs.sort();
    for spec in &specs {
        let label = spec
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let spec = spec.to_string_lossy().into_owned();
        let mut worker = system.baton(&["worker", "--spec", &spec]);
        worker.env("CONFORMANCE_RUNS", &runs);
        system.adopt(&label, baton_testkit::ChildProcess::spawn(worker, &label)?);
    }
    let count = specs.len();
    system
        .lookup_until(&wants(&[]), Duration::from_secs(60), |a| {
            a.candidates.len() == count
        })
        .await?;
    let command = system.baton(&["mcp", "serve", "--http", "127.0.0.1:0"]);
    system.adopt("mcp", baton_testkit::ChildProcess::spawn(command, "mcp")?);
    system
        .wait_log("mcp", "MCP server listening", Duration::from_secs(30))
        .await?;
    let url = system.logged_url("mcp")?;

    let out = dir.path().join("results");
    let said = run_suite(&["server", "--suite", "all", "--url", &url], &out, None)?;
    let checks = outcomes(&out)?;
    // A scenario passes when none of its checks is a FAILURE.
    let outcomes: BTreeMap<&str, bool> = (checks.iter())
        .map(|(scenario, checks)| {
            let passed = checks.iter().all(|check| check["status"] != "FAILURE");
            (scenario.as_str(), passed)
        })
        .collect();
    // Every server scenario of the suite ran: the active ones and the two
    // pending (JSON Schema 2020-12, SSE polling).
    assert_eq!(outcomes.len(), 32, "{outcomes:?}\n{said}");
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|(_, passed)| !**passed)
        .map(|(scenario, _)| *scenario)
        .collect();
    let mut not_offered = NOT_OFFERED.to_vec();
    not_offered.sort_unstable();
    assert_eq!(failed, not_offered, "{said}");
    for scenario in [
        "tools-call-elicitation",
        "elicitation-sep1034-defaults",
        "elicitation-sep1330-enums",
        "json-schema-2020-12",
        "tools-call-with-progress",
        "tools-call-with-logging",
        "dns-rebinding-protection",
    ] {
        assert_eq!(outcomes.get(scenario), Some(&true), "{scenario}\n{said}");
    }

    // The client's answer reached the agent, which said it.
    let answered = &checks["tools-call-elicitation"][0]["details"]["result"]["content"][0]["text"];
    assert_eq!(
        answered,
        r#"User response: action=accept, content={"username": "testuser", "email": "test@example.com"}"#
    );
    // Each asking tool ran twice: it asked, then it answered with the
    // client's result.
    let runs = std::fs::read_to_string(&runs)?;
    for tool in ASKING {
        let times = runs.lines().filter(|line| *line == tool).count();
        assert_eq!(times, 2, "{tool} in {runs}");
    }
    assert!(
        runs.lines().any(|line| line == "test_simple_text"),
        "{runs}"
    );
    Ok(())
}

/// The client scenarios of spec 2025-11-25 (and its client-credentials
/// extension, and the 2025-03-26 back-compatibility ones), each with
/// whether Baton's client passes it now. Those that fail test what it does
/// not do yet: step up a token's scopes, and sign in with a JWT.
const CLIENT_SCENARIOS: [(&str, bool); 22] = [
    ("initialize", true),
    ("tools_call", true),
    ("elicitation-sep1034-client-defaults", true),
    ("sse-retry", true),
    ("auth/metadata-default", true),
    ("auth/metadata-var1", true),
    ("auth/metadata-var2", true),
    ("auth/metadata-var3", true),
    ("auth/basic-cimd", true),
    ("auth/scope-from-www-authenticate", true),
    ("auth/scope-from-scopes-supported", true),
    ("auth/scope-omitted-when-undefined", true),
    ("auth/scope-step-up", true),
    ("auth/scope-retry-limit", true),
    ("auth/token-endpoint-auth-basic", true),
    ("auth/token-endpoint-auth-post", true),
    ("auth/token-endpoint-auth-none", true),
    ("auth/pre-registration", true),
    ("auth/client-credentials-basic", true),
    ("auth/client-credentials-jwt", true),
    // The suite's authorization server says its issuer is `…/oauth` in the
    // metadata it serves at the root's well-known path: RFC 8414 §3.3 says
    // such metadata MUST NOT be used, and the MCP SDK (3.x) refuses it.
    ("auth/2025-03-26-oauth-metadata-backcompat", false),
    ("auth/2025-03-26-oauth-endpoint-fallback", true),
];

#[tokio::test(flavor = "multi_thread")]
async fn a_workers_mcp_client_passes_the_suites_scenarios_it_speaks() -> anyhow::Result<()> {
    suite()?;
    // `baton mcp login` keeps the sign-ins in this server.
    let system = System::start().await?;
    let dir = tempfile::tempdir()?;
    let driver = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/e2e/scripts/mcp_conformance_client.py")
        .to_string_lossy()
        .into_owned();
    let command = format!("python3 {driver}");
    let out = dir.path().join("results");
    let log = dir.path().join("client.log");
    let mut seen = Vec::new();
    for (scenario, passes) in CLIENT_SCENARIOS {
        let args = ["client", "--command", &command, "--scenario", scenario];
        let said = run_suite(&args, &out, Some((system.server.url(), &log)))?;
        let checks = outcomes(&out)?;
        let checks = checks
            .get(scenario)
            .ok_or_else(|| anyhow::anyhow!("no results for {scenario}:\n{said}"))?;
        let failed = (checks.iter()).any(|check| check["status"] == "FAILURE");
        seen.push((scenario, !failed));
        if passes && failed {
            eprintln!("{scenario}:\n{said}");
        }
        std::fs::remove_dir_all(&out)?;
    }
    assert_eq!(seen, CLIENT_SCENARIOS.to_vec());
    // The client under test (a worker, after `baton mcp login`, for a
    // person's sign-in) ended well wherever the servers saw it pass.
    let ended = std::fs::read_to_string(&log)?;
    // Where the server refuses every scope it names, the client rightly
    // gives up (`auth/scope-retry-limit`).
    let ends_well = |scenario: &str| scenario != "auth/scope-retry-limit";
    for (scenario, _) in (CLIENT_SCENARIOS.iter()).filter(|(s, passes)| *passes && ends_well(s)) {
        assert!(
            ended.lines().any(|line| line == format!("{scenario} 0")),
            "{scenario} did not end well:\n{ended}"
        );
    }

    // The doctor lists each sign-in `baton mcp login` kept (each scenario
    // served at a URL of its own), and never a token.
    let doctor = system.baton(&["doctor", "--json"]).output()?;
    let said = String::from_utf8_lossy(&doctor.stdout);
    let report: serde_json::Value = serde_json::from_str(&said)?;
    let signed: Vec<&serde_json::Value> = (report["findings"].as_array().into_iter().flatten())
        .filter(|finding| finding["check"] == "mcp-login")
        .collect();
    let logged_in = CLIENT_SCENARIOS
        .iter()
        .filter(|(scenario, passes)| {
            *passes && scenario.starts_with("auth/") && !scenario.contains("client-credentials")
        })
        .count();
    assert!(
        signed.len() >= logged_in,
        "{logged_in} sign-ins: {signed:#?}"
    );
    assert!(
        signed.iter().all(|finding| finding["message"]
            .as_str()
            .is_some_and(|m| m.contains("signed in to http://"))),
        "{signed:#?}"
    );
    assert!(
        !said.contains("test-token"),
        "a token in the doctor's report: {said}"
    );
    Ok(())
}
