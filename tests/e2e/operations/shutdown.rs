//! Every long-running process stops on time, whatever the server does: on
//! SIGTERM it finishes what it can within its `--shutdown-grace-secs`, with
//! the server gone it leaves what it holds to redelivery and says so, and a
//! second signal ends it at once.

use std::process::ExitStatus;
use std::time::{Duration, Instant};

use baton_proto::{AgentName, Envelope, EventType};

use crate::util::System;

/// What a loaded test machine may add to a stop on time: starting the
/// `kill` command, the process's own exit, the test's polling.
const MARGIN: Duration = Duration::from_secs(3);

/// One long-running process: how it is started, the line it logs once
/// ready, and the grace it is given.
struct Process {
    label: &'static str,
    args: Vec<&'static str>,
    ready: &'static str,
    grace: u64,
}

/// The worker of agent type `slow` (whose tasks take a minute), the router,
/// a registry replica, the console and both gateways, each with a grace of
/// its own so that each is checked against its own.
fn every_process() -> Vec<Process> {
    let process = |label, args: &[&'static str], ready, grace| Process {
        label,
        args: args.to_vec(),
        ready,
        grace,
    };
    vec![
        process(
            "worker",
            &[
                "worker",
                "slow",
                "--relay",
                "--work-ms",
                "60000",
                "--instance",
                "worker",
            ],
            "worker started",
            12,
        ),
        process("router", &["router"], "router started", 9),
        process(
            "registry",
            &["registry", "--heartbeat-ms", "200"],
            "registry serving lookups",
            7,
        ),
        process(
            "console",
            &["console", "--listen", "127.0.0.1:0"],
            "console listening",
            6,
        ),
        process(
            "a2a",
            &["a2a", "serve", "--listen", "127.0.0.1:0"],
            "A2A server listening",
            8,
        ),
        process(
            "mcp",
            &["mcp", "serve", "--http", "127.0.0.1:0"],
            "MCP server listening",
            10,
        ),
    ]
}

/// Starts `processes`, each with its grace on the command line.
async fn start(system: &mut System, processes: &[Process]) -> anyhow::Result<()> {
    for process in processes {
        let grace = process.grace.to_string();
        let mut args = process.args.clone();
        args.extend(["--shutdown-grace-secs", &grace]);
        system.spawn(process.label, &args, process.ready).await?;
    }
    Ok(())
}

/// Sends a task to the `slow` worker and waits until it holds it.
async fn in_flight(system: &System) -> anyhow::Result<()> {
    let task = Envelope::task("take your time");
    system
        .client
        .submit_to(&AgentName::new("slow")?, &task)
        .await?;
    system
        .event_of_kind(task.session, EventType::Accepted)
        .await?;
    Ok(())
}

/// SIGTERM to every one of `processes` at once, then how long each took to
/// exit and its status; fails for one still running past its grace and the
/// margin.
fn terminate_all(
    system: &mut System,
    processes: &[Process],
) -> anyhow::Result<Vec<(Duration, ExitStatus)>> {
    terminate_all_then(system, processes, |_| {})
}

/// [`terminate_all`], doing `then` to the system right after the signals.
fn terminate_all_then(
    system: &mut System,
    processes: &[Process],
    then: impl FnOnce(&mut System),
) -> anyhow::Result<Vec<(Duration, ExitStatus)>> {
    let sent = Instant::now();
    for process in processes {
        system.process(process.label).terminate();
    }
    then(system);
    let mut stopped: Vec<Option<(Duration, ExitStatus)>> = vec![None; processes.len()];
    while stopped.iter().any(Option::is_none) {
        for (process, stop) in processes.iter().zip(&mut stopped) {
            if stop.is_some() {
                continue;
            }
            let child = system.process(process.label);
            let took = sent.elapsed();
            if let Some(status) = child.wait_timeout(Duration::ZERO) {
                eprintln!(
                    "{} exited {took:?} after SIGTERM (grace {}s): {status}",
                    process.label, process.grace
                );
                *stop = Some((took, status));
            } else if took > Duration::from_secs(process.grace) + MARGIN {
                anyhow::bail!(
                    "{} still runs {took:?} after SIGTERM, past its grace of {}s; stderr:\n{}",
                    process.label,
                    process.grace,
                    child.stderr()
                );
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(stopped.into_iter().flatten().collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_server_killed_sigterm_stops_every_process_within_its_grace_saying_what_it_left()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    let processes = every_process();
    start(&mut system, &processes).await?;
    in_flight(&system).await?;
    system.server.kill();
    // As observed: the signal a second after the server went.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stopped = terminate_all(&mut system, &processes)?;
    for (process, (took, status)) in processes.iter().zip(stopped) {
        let stderr = system.process(process.label).stderr();
        assert!(
            took < Duration::from_secs(process.grace) + MARGIN,
            "{} took {took:?}",
            process.label
        );
        assert!(
            status.success(),
            "{}: {status}; stderr:\n{stderr}",
            process.label
        );
        assert!(
            stderr.contains("stopping with NATS unreachable") && stderr.contains("left="),
            "{} does not say what it left; stderr:\n{stderr}",
            process.label
        );
    }
    // The worker counts the task it leaves to redelivery, and does not wait
    // for it: there is no server to take its ack.
    let worker = system.process("worker").stderr();
    assert!(
        worker.contains("left=1 message(s) in flight stay un-acked"),
        "{worker}"
    );
    assert!(
        worker.contains("stopping without waiting for in-flight work")
            && worker.contains("abandoned=1"),
        "{worker}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_then_the_server_killed_stops_every_process_within_its_grace() -> anyhow::Result<()>
{
    let mut system = System::start().await?;
    let processes = every_process();
    start(&mut system, &processes).await?;
    in_flight(&system).await?;
    // The reverse order: the signal first, the server gone while they stop.
    let stopped = terminate_all_then(&mut system, &processes, |system| system.server.kill())?;
    for (process, (took, status)) in processes.iter().zip(stopped) {
        let stderr = system.process(process.label).stderr();
        assert!(
            took < Duration::from_secs(process.grace) + MARGIN,
            "{} took {took:?}",
            process.label
        );
        assert!(
            status.success(),
            "{}: {status}; stderr:\n{stderr}",
            process.label
        );
    }
    // The worker held a task of a minute: it stopped on the lost server,
    // not at its grace, leaving the task to redelivery.
    let worker = system.process("worker").stderr();
    assert!(worker.contains("abandoned=1"), "{worker}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_server_up_sigterm_stops_every_process_cleanly_within_its_grace()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    // Nothing in flight: each has all it holds done at once.
    let processes = every_process();
    start(&mut system, &processes).await?;
    let stopped = terminate_all(&mut system, &processes)?;
    for (process, (took, status)) in processes.iter().zip(stopped) {
        let stderr = system.process(process.label).stderr();
        assert!(
            took < Duration::from_secs(process.grace),
            "{} took {took:?}, its whole grace",
            process.label
        );
        assert!(
            status.success(),
            "{}: {status}; stderr:\n{stderr}",
            process.label
        );
        assert!(
            stderr.contains("stopping: finishing what is in hand within the grace"),
            "{}: {stderr}",
            process.label
        );
        assert!(
            !stderr.contains("grace is over"),
            "{}: {stderr}",
            process.label
        );
    }
    Ok(())
}

/// Starts the `slow` worker alone with `grace`, and gives it a task it holds.
async fn draining_worker(system: &mut System, grace: u64) -> anyhow::Result<Process> {
    let worker = every_process().swap_remove(0);
    let worker = Process { grace, ..worker };
    start(system, std::slice::from_ref(&worker)).await?;
    in_flight(system).await?;
    Ok(worker)
}

/// Sends `worker` its first SIGTERM and waits until it drains its task.
async fn first_signal(system: &mut System, worker: &Process) -> anyhow::Result<()> {
    system.process(worker.label).terminate();
    system
        .wait_log(
            worker.label,
            "finishing in-flight work in_flight=1",
            Duration::from_secs(10),
        )
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_signal_stops_a_draining_worker_at_once() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    let worker = draining_worker(&mut system, 60).await?;
    first_signal(&mut system, &worker).await?;
    // The first signal only began the drain: a task of a minute is in hand.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(system.process(worker.label).is_running());
    let second = Instant::now();
    system.process(worker.label).terminate();
    let child = system.process(worker.label);
    let status = tokio::task::block_in_place(|| child.wait_timeout(MARGIN));
    let took = second.elapsed();
    let stderr = child.stderr();
    eprintln!("the worker exited {took:?} after the second SIGTERM (grace 60s): {status:?}");
    // Ended by the signal, as a shell reports it: 128 + SIGTERM.
    assert_eq!(status.and_then(|s| s.code()), Some(143), "{stderr}");
    assert!(
        stderr.contains("second signal: exiting at once")
            && stderr.contains("left=1 message(s) in flight stay un-acked"),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_killed_while_a_worker_drains_ends_the_drain_at_once() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    let worker = draining_worker(&mut system, 60).await?;
    first_signal(&mut system, &worker).await?;
    let killed = Instant::now();
    system.server.kill();
    let child = system.process(worker.label);
    let status = tokio::task::block_in_place(|| child.wait_timeout(Duration::from_secs(10)));
    let took = killed.elapsed();
    let stderr = child.stderr();
    eprintln!(
        "the worker exited {took:?} after its server was killed mid-drain (grace 60s): {status:?}"
    );
    assert!(status.is_some_and(|s| s.success()), "{status:?}; {stderr}");
    assert!(
        stderr.contains("stopping without waiting for in-flight work")
            && stderr.contains("abandoned=1"),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_whose_task_outlasts_its_grace_exits_at_the_grace_leaving_it() -> anyhow::Result<()>
{
    let mut system = System::start().await?;
    let worker = draining_worker(&mut system, 3).await?;
    let stopped = terminate_all(&mut system, std::slice::from_ref(&worker))?;
    let (took, status) = stopped[0];
    let stderr = system.process(worker.label).stderr();
    assert!(
        took >= Duration::from_secs(worker.grace),
        "{took:?}; {stderr}"
    );
    assert!(status.success(), "{status}; {stderr}");
    // The command's bound and the worker loop's own end the grace at the
    // same moment; whichever is first says what it leaves.
    assert!(
        stderr.contains("left=1 message(s) in flight stay un-acked")
            || stderr.contains("unfinished messages stay un-acked for redelivery abandoned=1"),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_console_with_a_live_page_open_exits_at_its_grace() -> anyhow::Result<()> {
    use std::io::{Read as _, Write as _};
    let mut system = System::start().await?;
    let console = every_process().swap_remove(3);
    start(&mut system, std::slice::from_ref(&console)).await?;
    // A live page's event stream never ends by itself: the HTTP server's
    // graceful stop would wait for it forever.
    let url = system.logged_url(console.label)?;
    let addr = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr)?;
    write!(stream, "GET /live HTTP/1.1\r\nHost: {addr}\r\n\r\n")?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut head = [0; 64];
    let read = stream.read(&mut head)?;
    let head = String::from_utf8_lossy(&head[..read]);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let stopped = terminate_all(&mut system, std::slice::from_ref(&console))?;
    let (took, status) = stopped[0];
    let stderr = system.process(console.label).stderr();
    assert!(
        took >= Duration::from_secs(console.grace),
        "{took:?}; {stderr}"
    );
    assert!(status.success(), "{status}; {stderr}");
    assert!(
        stderr.contains("the shutdown grace is over: exiting now")
            && stderr
                .contains("left=nothing to redeliver: open pages and event streams are closed"),
        "{stderr}"
    );
    drop(stream);
    Ok(())
}
