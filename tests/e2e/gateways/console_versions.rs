//! The console's versions page and `baton versions` read the same library:
//! `helper` at versions 1 and 2 shares new sessions half and half, and a
//! version 3 whose workers run was never rolled out, so it waits (never
//! "draining"). In a browser, the page, reached from the navigation, follows
//! `baton rollout helper --back` without a reload and lists the change.

use std::time::Duration;

use crate::gateways::console::{console, get};
use crate::util::{System, wants};

/// Runs a phase of `scripts/console_versions.py`; its JSON answer.
pub(crate) fn browser(args: &[&str]) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(
        std::path::Path::new("/usr/bin/chromium").exists()
            || std::env::var_os("CHROMIUM").is_some(),
        "the browser tests need Chromium: apt-get install chromium (or set CHROMIUM)"
    );
    crate::util::python_json("console_versions.py", "playwright", args)
}

/// A registry and `helper` at versions 1 (the first, so current), 2 and 3,
/// one live worker each, with 2 rolled out to 50 %.
async fn three_versions() -> anyhow::Result<System> {
    let mut system = System::start().await?;
    system.registry("r1").await?;
    for version in ["1", "2", "3"] {
        let label = format!("v{version}");
        system
            .agent(&label, "helper", "help", 1, &["--version", version])
            .await?;
        // The first to run is current: start them one after another.
        system
            .lookup_until(&wants(&[]), Duration::from_secs(10), |answer| {
                (answer.candidates.iter())
                    .any(|c| c.agent == "helper" && c.versions.contains_key(version))
            })
            .await?;
    }
    system.baton_stdout(&["rollout", "helper", "--to", "2", "--weight", "50"])?;
    Ok(system)
}

/// The state and weight of each version in `baton versions helper --json`.
fn states(system: &System) -> anyhow::Result<Vec<(String, String, u64)>> {
    let shown: serde_json::Value =
        serde_json::from_str(&system.baton_stdout(&["versions", "helper", "--json"])?)?;
    let rows = shown["versions"].as_array().cloned().unwrap_or_default();
    Ok(rows
        .iter()
        .map(|r| {
            (
                r["version"].as_str().unwrap_or("").to_owned(),
                r["state"].as_str().unwrap_or("").to_owned(),
                r["weight"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_versions_page_shows_the_rollout_and_follows_it_back_live() -> anyhow::Result<()> {
    let mut system = three_versions().await?;
    let owned = |rows: &[(&str, &str, u64)]| -> Vec<(String, String, u64)> {
        (rows.iter())
            .map(|(v, s, w)| ((*v).to_owned(), (*s).to_owned(), *w))
            .collect()
    };
    // The CLI: version 3 never took work, so it waits for a rollout.
    assert_eq!(
        states(&system)?,
        owned(&[
            ("1", "current", 50),
            ("2", "ramping", 50),
            ("3", "waiting", 0)
        ])
    );
    let table = system.baton_stdout(&["versions", "helper"])?;
    assert!(!table.contains("draining"), "{table}");
    assert!(table.contains("2 rolled out: 1 50%, 2 50%"), "{table}");

    // Over HTTP: the navigation links the page, which says the same.
    let url = console(&mut system, "console", &[]).await?;
    let (status, home) = get(&url, "/").await?;
    assert_eq!(status, 200);
    assert!(
        home.contains(r#"<a href="/versions">Versions</a>"#),
        "{home}"
    );
    let (status, page) = get(&url, "/versions").await?;
    assert_eq!(status, 200, "{page}");
    for row in [
        r#"<tr data-version="1" data-state="current" data-weight="50">"#,
        r#"<tr data-version="2" data-state="ramping" data-weight="50">"#,
        r#"<tr data-version="3" data-state="waiting" data-weight="0">"#,
    ] {
        assert!(page.contains(row), "{row} in {page}");
    }
    assert!(!page.contains("draining"), "{page}");

    // In a browser: `rollout --back` reaches the open page.
    let baton = baton_testkit::baton_binary();
    let nats = system.server.url().to_owned();
    let seen = browser(&["back", &url, &baton.to_string_lossy(), &nats, "helper"])?;
    assert_eq!(seen["title"], "Versions · Baton", "{seen}");
    assert_eq!(
        seen["before"],
        serde_json::json!([
            ["helper@1", "current", 50, "1"],
            ["helper@2", "ramping", 50, "1"],
            ["helper@3", "waiting", 0, "1"]
        ]),
        "{seen}"
    );
    assert!(
        (seen["said_before"].as_str().unwrap_or(""))
            .contains("go to helper@1 (50 %) and to helper@2 (50 %, ramping)"),
        "{seen}"
    );
    assert!(
        (seen["said_before"].as_str().unwrap_or(""))
            .contains("baton rollout helper --back sends them all to helper@1"),
        "{seen}"
    );
    // Version 1 was the first: with no ramp there is nothing to go back to.
    assert!(
        !(seen["said_after"].as_str().unwrap_or("")).contains("--back"),
        "{seen}"
    );
    let headings = seen["headings"].as_array().cloned().unwrap_or_default();
    assert!(headings.contains(&"Live workers".into()), "{seen}");
    assert!(headings.contains(&"Conversations pinned".into()), "{seen}");
    assert_eq!(
        seen["after"],
        serde_json::json!([
            ["helper@1", "current", 100, "1"],
            ["helper@2", "draining", 0, "1"],
            ["helper@3", "waiting", 0, "1"]
        ]),
        "{seen}"
    );
    assert_eq!(seen["stayed"], true, "the page changed without a reload");
    assert_eq!(
        seen["changes"],
        serde_json::json!([["first", "1"], ["ramp", "2"], ["back", "2"]]),
        "{seen}"
    );
    assert_eq!(seen["errors"], serde_json::json!([]), "{seen}");
    // And the CLI agrees.
    assert_eq!(
        states(&system)?,
        owned(&[
            ("1", "current", 100),
            ("2", "draining", 0),
            ("3", "waiting", 0)
        ])
    );
    Ok(())
}
