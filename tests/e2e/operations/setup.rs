//! `./just test`'s set-up (scripts/tools.sh): what it finds missing, and
//! that it stops with the command to run where it may not install.

use std::process::Command;

/// Runs `script` in bash with scripts/tools.sh sourced; exit code and stderr.
fn with_tools(script: &str, env: &[(&str, &str)]) -> anyhow::Result<(Option<i32>, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut command = Command::new("bash");
    command
        .current_dir(root)
        .arg("-c")
        .arg(format!("source scripts/tools.sh && {script}"))
        .env_remove("CHROMIUM")
        .env_remove("BATON_NO_INSTALL");
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output()?;
    Ok((
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

#[test]
fn where_it_may_not_install_it_stops_and_names_the_command() -> anyhow::Result<()> {
    let (code, stderr) = with_tools(
        "install_packages 'the tests' chromium nodejs",
        &[("BATON_NO_INSTALL", "1")],
    )?;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("the tests need chromium nodejs")
            && stderr.contains(
                "run `sudo apt-get install chromium nodejs`, then run the same command again"
            ),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one message: {stderr}");
    Ok(())
}

#[test]
fn a_chromium_named_by_the_user_is_used_or_refused_by_name() -> anyhow::Result<()> {
    // An executable CHROMIUM counts as present (node is on every machine
    // the tests run on, so nothing is missing).
    let (code, stderr) = with_tools(
        "test -z \"$(missing_packages)\"",
        &[("CHROMIUM", "/bin/sh")],
    )?;
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stderr) = with_tools("missing_packages", &[("CHROMIUM", "/nowhere/chromium")])?;
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("CHROMIUM is set to '/nowhere/chromium', which is not an executable"),
        "{stderr}"
    );
    Ok(())
}
