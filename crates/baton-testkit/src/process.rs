//! Real binaries as child processes, for end-to-end tests.

use std::env;
use std::fs::{self, File};
use std::io;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// A spawned process whose stdout and stderr go to files, killed on drop.
///
/// Show [`ChildProcess::output`] in assertion messages so a failing test
/// says what the process printed.
#[derive(Debug)]
pub struct ChildProcess {
    child: Child,
    label: String,
    /// Set once the process has been reaped, so its pid is never signalled
    /// again (it may belong to another process by then).
    status: Option<ExitStatus>,
    output_dir: TempDir,
}

impl ChildProcess {
    /// Spawns `cmd` with stdout and stderr captured to files in a temporary
    /// directory. `label` names the process in [`ChildProcess::output`].
    ///
    /// stdin is left as `cmd` configured it.
    ///
    /// # Errors
    ///
    /// Any error from creating the capture files or from spawning.
    pub fn spawn(mut cmd: Command, label: &str) -> io::Result<ChildProcess> {
        let output_dir = tempfile::Builder::new()
            .prefix(&format!("baton-proc-{}-", sanitize(label)))
            .tempdir()?;
        let stdout = File::create(output_dir.path().join("stdout"))?;
        let stderr = File::create(output_dir.path().join("stderr"))?;
        let child = cmd
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::from(stderr))
            .spawn()?;
        Ok(ChildProcess {
            child,
            label: label.to_owned(),
            status: None,
            output_dir,
        })
    }

    /// Kills the process with SIGKILL and waits for it. Idempotent.
    pub fn kill9(&mut self) {
        if self.status.is_none() {
            // kill fails only if the process has already exited; wait reaps it.
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }

    /// Sends SIGTERM (through the `kill` command) and returns without waiting.
    ///
    /// Does nothing if the process has already exited.
    pub fn terminate(&mut self) {
        if !self.is_running() {
            return;
        }
        let sent = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !sent.is_ok_and(|s| s.success()) {
            eprintln!(
                "warning: `kill -TERM {}` ({}) failed",
                self.pid(),
                self.label
            );
        }
    }

    /// Waits up to `timeout` for the process to exit; `None` if it is still
    /// running.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if !self.is_running() {
                return self.status;
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether the process is still running (reaps it if it has exited).
    pub fn is_running(&mut self) -> bool {
        if self.status.is_some() {
            return false;
        }
        match self.child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                self.status = Some(status);
                false
            }
            Err(_) => false,
        }
    }

    /// Everything the process has written to stdout so far.
    pub fn stdout(&self) -> String {
        self.read_capture("stdout")
    }

    /// Everything the process has written to stderr so far.
    pub fn stderr(&self) -> String {
        self.read_capture("stderr")
    }

    /// The label, stdout and stderr together, for assertion messages.
    pub fn output(&self) -> String {
        format!(
            "--- {label} stdout ---\n{}\n--- {label} stderr ---\n{}",
            self.stdout(),
            self.stderr(),
            label = self.label
        )
    }

    /// The label given to [`ChildProcess::spawn`].
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The operating-system process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn read_capture(&self, name: &str) -> String {
        fs::read(self.output_dir.path().join(name))
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn sanitize(label: &str) -> String {
    label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// The `baton` executable to test: `$BATON_BIN` if set, else `baton` next to
/// the running test binary's profile directory (`target/<profile>/baton`).
///
/// # Panics
///
/// If the executable does not exist; the message says to build it first
/// (`cargo build -p baton-cli`).
pub fn baton_binary() -> PathBuf {
    if let Some(bin) = env::var_os("BATON_BIN").filter(|v| !v.is_empty()) {
        let bin = PathBuf::from(bin);
        assert!(
            bin.is_file(),
            "BATON_BIN is {}, which does not exist: build it first (cargo build -p baton-cli) \
             or unset BATON_BIN",
            bin.display()
        );
        return bin;
    }
    let exe = env::current_exe().expect("cannot locate the running test executable");
    let mut dir = exe
        .parent()
        .expect("test executable has no parent directory");
    // Test binaries live in target/<profile>/deps, examples in .../examples.
    while dir
        .file_name()
        .is_some_and(|name| name == "deps" || name == "examples")
    {
        dir = dir.parent().expect("target directory has no parent");
    }
    let bin = dir.join(format!("baton{}", env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "{} does not exist: build it first: cargo build -p baton-cli (or set BATON_BIN)",
        bin.display()
    );
    bin
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(script);
        cmd
    }

    fn sleep_30() -> Command {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        cmd
    }

    #[test]
    fn captures_output_and_exit_status() {
        let mut p = ChildProcess::spawn(sh("echo out; echo err >&2; exit 3"), "echo").unwrap();
        let status = p.wait_timeout(Duration::from_secs(10)).expect("exits");
        assert_eq!(status.code(), Some(3));
        assert!(!p.is_running());
        assert_eq!(p.stdout(), "out\n");
        assert_eq!(p.stderr(), "err\n");
        assert!(
            p.output().contains("--- echo stderr ---\nerr"),
            "{}",
            p.output()
        );
    }

    #[cfg(unix)]
    #[test]
    fn kill9_is_sigkill_and_idempotent() {
        use std::os::unix::process::ExitStatusExt;
        let mut p = ChildProcess::spawn(sh("echo started; exec sleep 30"), "sleeper").unwrap();
        assert!(p.is_running());
        assert_eq!(p.wait_timeout(Duration::from_millis(50)), None);
        p.kill9();
        p.kill9();
        assert!(!p.is_running());
        let status = p.wait_timeout(Duration::ZERO).expect("reaped");
        assert_eq!(status.signal(), Some(9));
    }

    #[cfg(unix)]
    #[test]
    fn terminate_sends_sigterm() {
        use std::os::unix::process::ExitStatusExt;
        let mut p = ChildProcess::spawn(sleep_30(), "sleep").unwrap();
        p.terminate();
        let status = p
            .wait_timeout(Duration::from_secs(10))
            .expect("exits on SIGTERM");
        assert_eq!(status.signal(), Some(15));
        p.terminate(); // no-op once exited
    }

    #[cfg(unix)]
    #[test]
    fn drop_kills_the_process() {
        let p = ChildProcess::spawn(sleep_30(), "sleep").unwrap();
        let pid = p.pid().to_string();
        drop(p);
        // `kill -0` fails once the process is gone (and reaped by Drop).
        let alive = Command::new("kill")
            .args(["-0", &pid])
            .stderr(Stdio::null())
            .status();
        assert!(!alive.unwrap().success(), "pid {pid} still alive");
    }
}
