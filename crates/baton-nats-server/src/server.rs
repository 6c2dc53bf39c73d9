//! A `nats-server` child process with JetStream, for tests and `baton dev`.

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::binary::checked_binary;
use crate::error::{Error, ErrorKind};

/// How long [`NatsServer::start`] waits for the server to report its port.
const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How many lines of the server's log an error message quotes.
const LOG_TAIL_LINES: usize = 20;

/// Options for [`NatsServer::start_with`].
///
/// The default is what [`NatsServer::start`] uses: a random port and a
/// temporary store that is removed on drop.
///
/// # Examples
///
/// ```no_run
/// use baton_nats_server::{NatsServer, ServerOptions};
///
/// let server = NatsServer::start_with(
///     ServerOptions::default().store_dir("./data".into()).port(4222),
/// )?;
/// # Ok::<(), baton_nats_server::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    store_dir: Option<PathBuf>,
    port: Option<u16>,
    args: Vec<OsString>,
    startup_timeout: Option<Duration>,
}

impl ServerOptions {
    /// Uses `dir` as the JetStream store (`-sd`) and keeps it after the
    /// server is dropped. Without this a temporary directory is used.
    #[must_use]
    pub fn store_dir(mut self, dir: PathBuf) -> Self {
        self.store_dir = Some(dir);
        self
    }

    /// Listens on this client port instead of a random one. `0` means random.
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port).filter(|&p| p != 0);
        self
    }

    /// Appends an extra command-line argument for `nats-server`, such as
    /// `--server_name` or `-D`.
    #[must_use]
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// How long to wait for the server to accept connections (default 10 s).
    #[must_use]
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = Some(timeout);
        self
    }
}

/// A running `nats-server` with JetStream, listening on 127.0.0.1.
///
/// Dropping it kills the server (SIGKILL) and removes the temporary store.
#[derive(Debug)]
pub struct NatsServer {
    child: Option<Child>,
    bin: PathBuf,
    port: u16,
    url: String,
    store_dir: PathBuf,
    args: Vec<OsString>,
    startup_timeout: Duration,
    /// Holds the ports files, the log and (unless a store dir was given)
    /// the store, so dropping it cleans up all three.
    work: TempDir,
}

impl NatsServer {
    /// The server process's id, while it runs.
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Starts a server on a random port with a temporary store.
    ///
    /// Returns once the server accepts TCP connections.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotFound`] or [`ErrorKind::TooOld`] if there is no usable
    /// binary (see [`crate::nats_server_binary`]), [`ErrorKind::Startup`] if
    /// the server exits or is not ready within 10 s (the message quotes its
    /// log), [`ErrorKind::Io`] if the temporary directory cannot be created.
    pub fn start() -> Result<NatsServer, Error> {
        NatsServer::start_with(ServerOptions::default())
    }

    /// Starts a server with the given options.
    ///
    /// # Errors
    ///
    /// As for [`NatsServer::start`]; a fixed port that is already taken is
    /// an [`ErrorKind::Startup`] error.
    pub fn start_with(opts: ServerOptions) -> Result<NatsServer, Error> {
        let bin = checked_binary()?;
        let work = tempfile::Builder::new()
            .prefix("baton-nats-")
            .tempdir()
            .map_err(|e| Error::io("creating a temporary directory for nats-server", e))?;
        let store_dir = match opts.store_dir {
            Some(dir) => dir,
            None => work.path().join("store"),
        };
        fs::create_dir_all(&store_dir).map_err(|e| {
            Error::io(
                format_args!("creating store dir {}", store_dir.display()),
                e,
            )
        })?;
        let mut server = NatsServer {
            child: None,
            bin,
            port: opts.port.unwrap_or(0),
            url: String::new(),
            store_dir,
            args: opts.args,
            startup_timeout: opts.startup_timeout.unwrap_or(DEFAULT_STARTUP_TIMEOUT),
            work,
        };
        server.spawn()?;
        Ok(server)
    }

    /// The client URL, `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The client port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The JetStream store directory passed as `-sd`.
    pub fn store_dir(&self) -> &Path {
        &self.store_dir
    }

    /// The server's log so far (its stdout and stderr), for failure messages.
    pub fn log(&self) -> String {
        fs::read(self.log_path())
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }

    /// Kills the server with SIGKILL and waits for it to exit.
    ///
    /// Calling it again, or on a server that is already stopped, does nothing.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // kill fails only if the child was already reaped; wait reaps it.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts it again on the same port with the same
    /// store, as after a crash.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Startup`] if the new process does not come up, for
    /// example because another process took the port in between.
    pub fn restart(&mut self) -> Result<(), Error> {
        self.kill();
        self.spawn()
    }

    fn log_path(&self) -> PathBuf {
        self.work.path().join("nats-server.log")
    }

    fn spawn(&mut self) -> Result<(), Error> {
        let ports_dir = self.work.path().join("ports");
        fs::create_dir_all(&ports_dir)
            .map_err(|e| Error::io("creating the ports file directory", e))?;
        // Append, so a restart keeps the log of the earlier run.
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| Error::io("creating the nats-server log file", e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| Error::io("creating the nats-server log file", e))?;
        // -1 asks nats-server for a random free port.
        let port_arg = if self.port == 0 {
            "-1".to_owned()
        } else {
            self.port.to_string()
        };
        let child = Command::new(&self.bin)
            .args(["-js", "-a", "127.0.0.1", "-p", &port_arg])
            .arg("-sd")
            .arg(&self.store_dir)
            .arg("--ports_file_dir")
            .arg(&ports_dir)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| Error::io(format_args!("starting {}", self.bin.display()), e))?;
        let pid = child.id();
        self.child = Some(child);
        match self.wait_until_ready(&ports_dir, pid) {
            Ok(port) => {
                self.port = port;
                self.url = format!("nats://127.0.0.1:{port}");
                Ok(())
            }
            Err(err) => {
                self.kill();
                Err(err)
            }
        }
    }

    /// Polls for the ports file of process `pid`, then for a TCP connection.
    fn wait_until_ready(&mut self, ports_dir: &Path, pid: u32) -> Result<u16, Error> {
        let deadline = Instant::now() + self.startup_timeout;
        // Killed servers leave their ports files behind; ours has our pid.
        let file = ports_dir.join(format!("nats-server_{pid}.ports"));
        loop {
            let exited = match self.child.as_mut().map(Child::try_wait) {
                Some(Ok(None)) => None,
                Some(Ok(Some(status))) => Some(status.to_string()),
                Some(Err(e)) => Some(e.to_string()),
                None => Some("killed".to_owned()),
            };
            if let Some(status) = exited {
                return Err(
                    self.startup_error(format!("nats-server exited during startup ({status})"))
                );
            }
            if let Some(port) = read_ports_file(&file).or_else(|| find_ports_file(ports_dir, pid)) {
                let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
                if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                    return Ok(port);
                }
            }
            if Instant::now() >= deadline {
                return Err(self.startup_error(format!(
                    "nats-server did not accept connections within {:?}",
                    self.startup_timeout
                )));
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    fn startup_error(&self, what: String) -> Error {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
        Error::new(
            ErrorKind::Startup,
            format!(
                "{what}: {} {}\n--- last lines of its log ---\n{tail}",
                self.bin.display(),
                self.port_description()
            ),
        )
    }

    fn port_description(&self) -> String {
        if self.port == 0 {
            "(random port)".to_owned()
        } else {
            format!("(port {})", self.port)
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        // Kill before `work` is dropped so the store is not in use when removed.
        self.kill();
    }
}

/// The ports file is named after the executable, which may not be
/// `nats-server` (a renamed or versioned binary), so fall back to any
/// `*_<pid>.ports` file.
fn find_ports_file(dir: &Path, pid: u32) -> Option<u16> {
    let suffix = format!("_{pid}.ports");
    fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .find(|entry| entry.file_name().to_string_lossy().ends_with(&suffix))
        .and_then(|entry| read_ports_file(&entry.path()))
}

/// Reads `{"nats":["nats://127.0.0.1:PORT"]}`; `None` while the file is
/// missing or only partly written.
fn read_ports_file(path: &Path) -> Option<u16> {
    let text = fs::read_to_string(path).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    let url = value.get("nats")?.get(0)?.as_str()?;
    url.rsplit(':').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader};

    use super::*;

    /// Connects and reads the server's INFO line, proving a NATS server with
    /// JetStream answers on `port`.
    fn info_line(port: u16) -> String {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut line = String::new();
        BufReader::new(stream)
            .read_line(&mut line)
            .expect("read INFO");
        line
    }

    fn assert_jetstream_on(port: u16) {
        let info = info_line(port);
        assert!(info.starts_with("INFO {"), "{info}");
        assert!(info.contains("\"jetstream\":true"), "{info}");
        assert!(info.contains(&format!("\"port\":{port}")), "{info}");
    }

    #[test]
    fn parallel_servers_get_different_ports() {
        let a = thread::spawn(NatsServer::start);
        let b = thread::spawn(NatsServer::start);
        let a = a.join().unwrap().unwrap();
        let b = b.join().unwrap().unwrap();
        assert_ne!(a.port(), b.port());
        assert_ne!(a.store_dir(), b.store_dir());
        assert_eq!(a.url(), format!("nats://127.0.0.1:{}", a.port()));
        assert_jetstream_on(a.port());
        assert_jetstream_on(b.port());
    }

    #[test]
    fn restart_keeps_port_and_store() {
        let mut server = NatsServer::start().unwrap();
        let port = server.port();
        let marker = server.store_dir().join("marker");
        fs::write(&marker, "kept").unwrap();

        server.kill();
        server.kill(); // idempotent
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err());

        server.restart().unwrap();
        assert_eq!(server.port(), port);
        assert_eq!(server.url(), format!("nats://127.0.0.1:{port}"));
        assert_jetstream_on(port);
        assert_eq!(fs::read_to_string(&marker).unwrap(), "kept");
        // Both runs are in the log.
        assert_eq!(server.log().matches("Starting nats-server").count(), 2);
    }

    #[test]
    fn temporary_store_is_removed_on_drop() {
        let server = NatsServer::start().unwrap();
        let store = server.store_dir().to_owned();
        assert!(store.join("jetstream").is_dir(), "{}", store.display());
        drop(server);
        assert!(!store.exists(), "{} still exists", store.display());
    }

    #[test]
    fn given_store_dir_is_kept_on_drop() {
        let outer = tempfile::tempdir().unwrap();
        let store = outer.path().join("store");
        let server =
            NatsServer::start_with(ServerOptions::default().store_dir(store.clone())).unwrap();
        assert_eq!(server.store_dir(), store);
        let port = server.port();
        drop(server);
        assert!(store.join("jetstream").is_dir());
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    }

    #[test]
    fn taken_port_is_a_startup_error_quoting_the_log() {
        let first = NatsServer::start().unwrap();
        let err = NatsServer::start_with(ServerOptions::default().port(first.port())).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Startup);
        let msg = err.to_string();
        assert!(msg.contains("exited during startup"), "{msg}");
        assert!(msg.contains("address already in use"), "{msg}");
        // The first server is unaffected.
        assert_jetstream_on(first.port());
    }

    #[test]
    fn ports_file_parsing() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("srv_42.ports");
        assert_eq!(read_ports_file(&file), None);
        fs::write(&file, r#"{"nats":["nats://127.0.0.1:4"#).unwrap();
        assert_eq!(read_ports_file(&file), None, "partial write");
        fs::write(&file, r#"{"nats":["nats://127.0.0.1:44333"]}"#).unwrap();
        assert_eq!(read_ports_file(&file), Some(44333));
        assert_eq!(find_ports_file(dir.path(), 42), Some(44333));
        assert_eq!(find_ports_file(dir.path(), 4), None);
    }
}
