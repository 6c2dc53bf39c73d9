//! Test support: a server, `baton` processes, and a client to observe them.

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use anyhow::Context as _;
use baton_client::Client;
use baton_proto::{Envelope, Event, Subjects, Wire};
use baton_testkit::{ChildProcess, NatsServer, eventually};
use futures::StreamExt;
use uuid::Uuid;

/// A nats-server plus the `baton` processes a test started; all killed on drop.
pub struct System {
    // Dropped in order: processes first, then the server.
    processes: HashMap<String, ChildProcess>,
    pub client: Client,
    pub nats: async_nats::Client,
    pub server: NatsServer,
    /// The URL `baton` processes get: the server's, with credentials when
    /// the server requires them.
    url: String,
}

impl System {
    pub async fn start() -> anyhow::Result<Self> {
        let server = tokio::task::spawn_blocking(NatsServer::start).await??;
        let url = server.url().to_owned();
        Self::on(server, url, async_nats::ConnectOptions::new()).await
    }

    /// A server started with `options` (extra flags, such as a monitoring port).
    pub async fn with_options(options: baton_testkit::ServerOptions) -> anyhow::Result<Self> {
        let server = tokio::task::spawn_blocking(move || NatsServer::start_with(options)).await??;
        let url = server.url().to_owned();
        Self::on(server, url, async_nats::ConnectOptions::new()).await
    }

    /// A server with its HTTP monitoring port open, and that port.
    pub async fn monitored() -> anyhow::Result<(Self, u16)> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let options = baton_testkit::ServerOptions::default()
            .arg("-m")
            .arg(port.to_string());
        Ok((Self::with_options(options).await?, port))
    }

    /// A server that runs with the configuration `config` (users and
    /// permissions). The test's own client and every `baton` process
    /// connect as `user`/`password`, given in the URL, unless a process
    /// is started with other credentials.
    pub async fn secured(config: &str, user: &str, password: &str) -> anyhow::Result<Self> {
        let file = tempfile::Builder::new().suffix(".conf").tempfile()?;
        std::fs::write(file.path(), config)?;
        let options = baton_testkit::ServerOptions::default()
            .arg("-c")
            .arg(file.path());
        let server = tokio::task::spawn_blocking(move || NatsServer::start_with(options)).await??;
        let url = server
            .url()
            .replacen("nats://", &format!("nats://{user}:{password}@"), 1);
        let options =
            async_nats::ConnectOptions::with_user_and_password(user.into(), password.into());
        Self::on(server, url, options).await
    }

    async fn on(
        server: NatsServer,
        url: String,
        options: async_nats::ConnectOptions,
    ) -> anyhow::Result<Self> {
        let nats = options.connect(server.url()).await?;
        let client = Client::new(nats.clone(), Subjects::default());
        Ok(Self {
            server,
            processes: HashMap::new(),
            client,
            nats,
            url,
        })
    }

    /// A `baton` command aimed at this system's server.
    pub fn baton(&self, args: &[&str]) -> Command {
        let mut command = Command::new(baton_testkit::baton_binary());
        command.arg("--nats-url").arg(&self.url).args(args);
        command.env("RUST_LOG", "info").env_remove("NATS_URL");
        command
    }

    /// Runs `baton ARGS` to its end and returns its stdout; fails with both
    /// outputs when it exits unsuccessfully.
    pub fn baton_stdout(&self, args: &[&str]) -> anyhow::Result<String> {
        let output = tokio::task::block_in_place(|| self.baton(args).output())?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        anyhow::ensure!(
            output.status.success(),
            "baton {args:?} failed:\n{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(stdout)
    }

    /// Starts `baton ARGS` as process `label` and waits for its start-up log line.
    pub async fn spawn(&mut self, label: &str, args: &[&str], ready: &str) -> anyhow::Result<()> {
        let process = ChildProcess::spawn(self.baton(args), label)?;
        self.processes.insert(label.to_owned(), process);
        self.wait_log(label, ready, Duration::from_secs(30)).await
    }

    /// Starts `baton ARGS` of the previous release (`BATON_PREVIOUS_BIN`,
    /// which `./just compat` builds) as process `label`, and waits until it
    /// logs `ready`.
    pub async fn spawn_previous(
        &mut self,
        label: &str,
        args: &[&str],
        ready: &str,
    ) -> anyhow::Result<()> {
        let Some(previous) = std::env::var_os("BATON_PREVIOUS_BIN") else {
            anyhow::bail!(
                "BATON_PREVIOUS_BIN is not set: run this test through `./just compat`, which builds the previous release"
            );
        };
        // The same arguments as this release's `baton` gets here.
        let command = self.baton(args);
        let mut previous = Command::new(previous);
        previous.args(command.get_args()).env("RUST_LOG", "info");
        previous.env_remove("NATS_URL");
        let process = ChildProcess::spawn(previous, label)?;
        self.processes.insert(label.to_owned(), process);
        self.wait_log(label, ready, Duration::from_secs(30)).await
    }

    /// Starts a relay worker `agent` (instance `label`) with extra flags.
    pub async fn relay(&mut self, label: &str, agent: &str, flags: &[&str]) -> anyhow::Result<()> {
        let mut args = vec!["worker", agent, "--relay", "--instance", label];
        args.extend_from_slice(flags);
        self.spawn(label, &args, "worker started").await
    }

    /// Starts the ingress router.
    pub async fn router(&mut self, flags: &[&str]) -> anyhow::Result<()> {
        let mut args = vec!["router"];
        args.extend_from_slice(flags);
        self.spawn("router", &args, "router started").await
    }

    /// Starts a registry replica `label` with heartbeat interval `HEARTBEAT_MS`
    /// and waits until it serves lookups.
    pub async fn registry(&mut self, label: &str) -> anyhow::Result<()> {
        let interval = HEARTBEAT_MS.to_string();
        self.spawn(
            label,
            &["registry", "--heartbeat-ms", &interval],
            "registry serving lookups",
        )
        .await
    }

    /// Starts a relay worker that advertises capabilities `caps` at `tier` and
    /// heartbeats every `HEARTBEAT_MS`.
    pub async fn agent(
        &mut self,
        label: &str,
        agent: &str,
        caps: &str,
        tier: u32,
        flags: &[&str],
    ) -> anyhow::Result<()> {
        let interval = HEARTBEAT_MS.to_string();
        let tier = tier.to_string();
        let mut args = vec![
            "--capabilities",
            caps,
            "--tier",
            &tier,
            "--heartbeat-ms",
            &interval,
        ];
        args.extend_from_slice(flags);
        self.relay(label, agent, &args).await
    }

    /// One lookup, one request: no retries, so it shows what the registry
    /// replicas answer right now.
    pub async fn lookup_once(
        &self,
        request: &baton_proto::LookupRequest,
    ) -> anyhow::Result<baton_proto::LookupResponse> {
        // A bound, not a speed check: a lookup sent to a dead replica is never
        // answered, and a loaded test machine can take seconds.
        let reply = tokio::time::timeout(
            Duration::from_secs(10),
            self.nats
                .request("baton.registry.lookup", request.to_msgpack()?.into()),
        )
        .await
        .context("lookup timed out")??;
        Ok(baton_proto::LookupResponse::from_msgpack(&reply.payload)?)
    }

    /// Polls lookups until `check` holds for the answer to `request`.
    pub async fn lookup_until(
        &self,
        request: &baton_proto::LookupRequest,
        timeout: Duration,
        check: impl Fn(&baton_proto::LookupResponse) -> bool,
    ) -> anyhow::Result<baton_proto::LookupResponse> {
        let answer = eventually(timeout, || async {
            let answer = self.lookup_once(request).await?;
            anyhow::ensure!(check(&answer), "the answer fails the check: {answer:#?}");
            Ok(answer)
        })
        .await?;
        Ok(answer)
    }

    /// Starts `baton worker --spec FILE` as process `label`, with `flags`.
    pub async fn spec_worker(
        &mut self,
        label: &str,
        spec: &std::path::Path,
        flags: &[&str],
    ) -> anyhow::Result<()> {
        let spec = spec.to_string_lossy().into_owned();
        let interval = HEARTBEAT_MS.to_string();
        let mut args = vec![
            "worker",
            "--spec",
            &spec,
            "--instance",
            label,
            "--heartbeat-ms",
            &interval,
        ];
        args.extend_from_slice(flags);
        self.spawn(label, &args, "worker started").await
    }

    /// The registry, the router (default agent `general_enquiry`), the demo
    /// agents `general_enquiry` and `refund`, and a relay `fragile` (instance
    /// `fragile_label`) with `fragile_flags`.
    pub async fn refund_desk(
        &mut self,
        fragile_label: &str,
        fragile_flags: &[&str],
    ) -> anyhow::Result<()> {
        self.registry("registry").await?;
        self.router(&["--default-agent", "general_enquiry"]).await?;
        for agent in ["general_enquiry", "refund"] {
            self.spawn(agent, &["worker", agent], "worker started")
                .await?;
        }
        self.relay(fragile_label, "fragile", fragile_flags).await
    }

    /// The URL process `label` logged as `url=…`, without a trailing slash.
    pub fn logged_url(&mut self, label: &str) -> anyhow::Result<String> {
        let log = self.process(label).stderr();
        let url = log
            .split("url=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .ok_or_else(|| anyhow::anyhow!("no url in the log of {label}:\n{log}"))?;
        Ok(url.trim_end_matches('/').to_owned())
    }

    /// Starts the example human agent `human_support` (from
    /// `examples/support/human_support.toml`), without the registry.
    pub async fn human_support(&mut self) -> anyhow::Result<()> {
        let spec = example("support/human_support.toml");
        self.spec_worker("human_support", &spec, &["--no-registry"])
            .await
    }

    /// The `waiting` event of `session`, once a human agent has parked it.
    pub async fn waiting(&self, session: Uuid) -> anyhow::Result<Event> {
        self.event_of_kind(session, baton_proto::EventType::Waiting)
            .await
    }

    /// The first stored event of `kind` in `session`, once there is one.
    pub async fn event_of_kind(
        &self,
        session: Uuid,
        kind: baton_proto::EventType,
    ) -> anyhow::Result<Event> {
        let event = eventually(Duration::from_secs(30), || async {
            self.stored_events(session)
                .await?
                .into_iter()
                .find(|e| e.kind == kind)
                .ok_or_else(|| anyhow::anyhow!("no {kind:?} event yet"))
        })
        .await?;
        Ok(event)
    }

    /// The server's URL, without credentials.
    pub fn server_url(&self) -> String {
        self.server.url().to_owned()
    }

    /// Runs the Python client of `proto-schemas/` against this server with `args`.
    pub fn python_client(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("proto-schemas/client/python/send_task.py");
        let output = tokio::task::block_in_place(|| {
            Command::new("python3")
                .arg(&script)
                .args(["--url", self.server.url(), "--timeout", "30"])
                .args(args)
                .output()
        })?;
        Ok(output)
    }

    /// Takes ownership of a process the test spawned itself.
    pub fn adopt(&mut self, label: &str, process: ChildProcess) {
        self.processes.insert(label.to_owned(), process);
    }

    /// Whether the test started a process `label`.
    pub fn has_process(&self, label: &str) -> bool {
        self.processes.contains_key(label)
    }

    pub fn process(&mut self, label: &str) -> &mut ChildProcess {
        self.processes
            .get_mut(label)
            .unwrap_or_else(|| panic!("no process {label}"))
    }

    /// Waits until process `label` has logged `needle` on stderr.
    /// Waits until `BATON_TASKS` holds no message: every task and handoff
    /// has been acked, so no worker can emit another event for them. This
    /// is the positive marker that "nothing more arrives".
    pub async fn settled(&self) -> anyhow::Result<()> {
        let jetstream = async_nats::jetstream::new(self.nats.clone());
        let tasks = self.client.subjects().tasks_stream();
        eventually(Duration::from_secs(60), || async {
            let mut stream = jetstream.get_stream(&tasks).await?;
            let left = stream.info().await?.state.messages;
            anyhow::ensure!(left == 0, "{left} message(s) still in {tasks}");
            Ok(())
        })
        .await?;
        Ok(())
    }

    pub async fn wait_log(
        &mut self,
        label: &str,
        needle: &str,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let process = self.process(label);
        let exited = eventually(timeout, || {
            let seen = if process.stderr().contains(needle) {
                Ok(false)
            } else if !process.is_running() {
                Ok(true)
            } else {
                Err(format!("{label} has not logged {needle:?} yet"))
            };
            std::future::ready(seen)
        })
        .await
        .with_context(|| format!("stderr of {label}:\n{}", process.stderr()))?;
        anyhow::ensure!(
            !exited,
            "{label} exited before logging {needle:?}; stderr:\n{}",
            process.stderr()
        );
        Ok(())
    }

    /// Publishes `task` straight to agent type `agent` and returns the
    /// session's events up to the terminal one. The wait only detects a
    /// session that never ends: it is long, so that a heavy session (a
    /// 2 MB tool result, say) on a loaded machine is not taken for one.
    pub async fn run(&self, agent: &str, task: &Envelope) -> anyhow::Result<Vec<Event>> {
        self.client
            .submit_to(&baton_proto::AgentName::new(agent)?, task)
            .await?;
        self.session_events(task.session, Duration::from_secs(90))
            .await
    }

    /// Every event of `session` until (and including) the terminal one.
    pub async fn session_events(
        &self,
        session: Uuid,
        timeout: Duration,
    ) -> anyhow::Result<Vec<Event>> {
        let mut stream = self.client.events(session).await?;
        let mut events = Vec::new();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let next = tokio::time::timeout_at(deadline, stream.next())
                .await
                .with_context(|| {
                    format!(
                        "session {session} did not end within {timeout:?}; events so far: {:#?}",
                        kinds(&events)
                    )
                })?;
            let event = next.context("event stream ended")??;
            let terminal = event.kind.is_terminal();
            events.push(event);
            if terminal {
                return Ok(events);
            }
        }
    }

    /// The events of each of `sessions` once it ended (within `timeout`),
    /// waited for 16 at a time, in the order they end.
    pub async fn ended_sessions(
        &self,
        sessions: Vec<Uuid>,
        timeout: Duration,
    ) -> anyhow::Result<Vec<(Uuid, Vec<Event>)>> {
        use futures::StreamExt as _;
        futures::stream::iter(sessions)
            .map(|session| async move {
                let events = self.session_events(session, timeout).await?;
                anyhow::Ok((session, events))
            })
            .buffer_unordered(16)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect()
    }

    /// All events stored for `session` right now (does not wait).
    pub async fn stored_events(&self, session: Uuid) -> anyhow::Result<Vec<Event>> {
        // Not `Client::events`: that one also yields what lean workers send
        // live, unstored.
        let mut events = self.all_events().await?;
        events.retain(|event| event.session == session);
        Ok(events)
    }

    /// Every event stored in the events stream right now, in stream order,
    /// with the `accepted` and `started` events folded into others restored.
    pub async fn all_events(&self) -> anyhow::Result<Vec<Event>> {
        use async_nats::jetstream::consumer;
        let js = async_nats::jetstream::new(self.nats.clone());
        let mut stream = js.get_stream("BATON_EVENTS").await?;
        let state = &stream.info().await?.state;
        let (last, stored) = (state.last_sequence, state.messages);
        let mut events = Vec::new();
        // (A stream purged of its last messages keeps their sequence.)
        if last == 0 || stored == 0 {
            return Ok(events);
        }
        let ordered = stream
            .create_consumer(consumer::pull::OrderedConfig {
                deliver_policy: consumer::DeliverPolicy::All,
                ..Default::default()
            })
            .await?;
        let mut messages = ordered.messages().await?;
        while let Some(message) = messages.next().await {
            let message = message?;
            // A folded `accepted` or `started` event counts as the stored event
            // it stands for. (An `accepted` event folded twice, where a refused
            // envelope ended the hop, counts once.)
            let mut unfolded = Event::from_msgpack(&message.payload)?.unfold();
            let event = unfolded.pop().expect("the event itself");
            for folded in unfolded {
                let again = folded.kind == baton_proto::EventType::Accepted
                    && events.iter().any(|e| e.id == folded.id);
                if !again {
                    events.push(folded);
                }
            }
            events.push(event);
            let info = message.info().map_err(|e| anyhow::anyhow!("{e}"))?;
            if info.stream_sequence >= last || info.pending == 0 {
                break;
            }
        }
        Ok(events)
    }

    /// Every stored event, grouped by session.
    pub async fn events_by_session(&self) -> anyhow::Result<HashMap<Uuid, Vec<Event>>> {
        let mut grouped: HashMap<Uuid, Vec<Event>> = HashMap::new();
        for event in self.all_events().await? {
            grouped.entry(event.session).or_default().push(event);
        }
        Ok(grouped)
    }

    /// Publishes raw bytes to `subject` in JetStream and waits for the PubAck.
    pub async fn publish_raw(&self, subject: &str, payload: Vec<u8>) -> anyhow::Result<()> {
        let js = async_nats::jetstream::new(self.nats.clone());
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", Uuid::new_v4().to_string().as_str());
        js.publish_with_headers(subject.to_owned(), headers, payload.into())
            .await?
            .await?;
        Ok(())
    }

    /// Publishes `envelope` to `subject` with its id as `Nats-Msg-Id`.
    pub async fn publish_envelope(&self, subject: &str, envelope: &Envelope) -> anyhow::Result<()> {
        let js = async_nats::jetstream::new(self.nats.clone());
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", envelope.id.to_string().as_str());
        js.publish_with_headers(subject.to_owned(), headers, envelope.to_msgpack()?.into())
            .await?
            .await?;
        Ok(())
    }
}

/// A path under the repository's `examples/`.
pub fn example(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(path)
}

/// Heartbeat interval of the workers and registries of the registry tests, in ms.
pub const HEARTBEAT_MS: u64 = 300;

/// A lookup for agents with every one of `caps`.
pub fn wants(caps: &[&str]) -> baton_proto::LookupRequest {
    baton_proto::LookupRequest {
        requires: caps.iter().map(|c| (*c).to_owned()).collect(),
        ..Default::default()
    }
}

/// The agent types of a lookup answer, best first.
pub fn names(answer: &baton_proto::LookupResponse) -> Vec<String> {
    answer
        .candidates
        .iter()
        .map(|c| c.agent.to_string())
        .collect()
}

/// The event types, as strings, in order.
pub fn kinds(events: &[Event]) -> Vec<String> {
    events.iter().map(|e| e.kind.as_str().to_owned()).collect()
}

/// The agents of a path.
pub fn agents(path: &[baton_proto::Hop]) -> Vec<String> {
    path.iter().map(|h| h.agent.to_string()).collect()
}

/// Reads a map entry of a msgpack value.
pub fn field<'a>(value: &'a rmpv::Value, key: &str) -> Option<&'a rmpv::Value> {
    value
        .as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

/// Runs `tests/e2e/scripts/SCRIPT ARGS` with python3 and reads the one JSON
/// object it prints. A missing Python `module` gets a message that says how
/// to install it.
pub fn python_json(script: &str, module: &str, args: &[&str]) -> anyhow::Result<serde_json::Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/e2e/scripts")
        .join(script);
    let output =
        tokio::task::block_in_place(|| Command::new("python3").arg(path).args(args).output())?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(
        !stderr.contains(&format!("No module named '{module}'")),
        "{script} needs the Python package `{module}`: run the tests with `./just test`, which installs it"
    );
    anyhow::ensure!(
        output.status.success(),
        "{script} {args:?} failed:\n{stderr}"
    );
    Ok(serde_json::from_slice(&output.stdout)?)
}

/// A system with a worker (without the registry, with a metrics endpoint)
/// for each of `specs`: the agent type's name and its spec's text, written
/// to the returned directory.
pub async fn spec_workers(specs: &[(&str, String)]) -> anyhow::Result<(System, tempfile::TempDir)> {
    spec_workers_with(specs, &[]).await
}

/// [`spec_workers`], each worker started with `flags` too.
pub async fn spec_workers_with(
    specs: &[(&str, String)],
    flags: &[&str],
) -> anyhow::Result<(System, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let mut system = System::start().await?;
    for (name, text) in specs {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, text)?;
        let spec = path.to_string_lossy().into_owned();
        let args = [
            "worker",
            "--spec",
            spec.as_str(),
            "--no-registry",
            "--metrics-addr",
            "127.0.0.1:0",
        ];
        let args: Vec<&str> = args.iter().chain(flags).copied().collect();
        system.spawn(name, &args, "worker started").await?;
    }
    Ok((system, dir))
}

/// A stand-in model that answers every request `"<tag> <n>"`, n counting
/// from 1, so a test tells each answer apart.
pub fn counting_model(tag: &'static str) -> anyhow::Result<baton_testkit::FakeLlm> {
    let asked = std::sync::atomic::AtomicUsize::new(0);
    Ok(baton_testkit::FakeLlm::responding(move |_| {
        let n = asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        baton_testkit::Scripted::text(&format!("{tag} {n}"))
    })?)
}

/// An `[llm]` table for the stand-in model `llm`, with `more` lines in it.
pub fn llm_table(llm: &baton_testkit::FakeLlm, more: &str) -> String {
    format!(
        "\n[llm]\nbase_url = \"{}\"\nmodel = \"stand-in\"\nsystem_prompt = \"Be brief.\"\n{more}",
        llm.url()
    )
}

/// The session id `baton send` printed in `stdout`.
pub fn session_in(stdout: &str) -> anyhow::Result<&str> {
    stdout
        .split_whitespace()
        .find(|w| w.len() == 36 && w.parse::<Uuid>().is_ok())
        .ok_or_else(|| anyhow::anyhow!("no session id in {stdout}"))
}
