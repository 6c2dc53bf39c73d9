//! `baton bench --learning`: does the registry learn which agent type
//! resolves a kind of work?
//!
//! Three agent types, `solver_a`, `solver_b` and `solver_c`, share the
//! capability `solve`, are alike in every other way, and complete every
//! task they get: a front agent finds one through the registry, it hands
//! its answer to a checker. The checker sends the answer to a person (the
//! session waits in a human agent's inbox) at a hidden rate per solver:
//! 0.7, 0.4 and 0.1. The registry sees only the outcomes.
//!
//! The same run measures, each with a registry of its own and fresh streams:
//!
//! 1. **today's ranking** (`--no-learning`), `--sessions` sessions;
//! 2. **learned routing**: the same sessions and as many again; then
//!    `solver_c` degrades (its rate becomes 0.8, so `solver_b` is now the
//!    best), and as many more run.
//!
//! Sessions run 4 at a time. The regret is against an oracle that always
//! picks the solver with the lowest rate: the expected escalations of the
//! choices made, less the oracle's. It reports; it asserts nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_client::Client;
use baton_proto::{AgentName, Envelope, Reason, Subjects};
use baton_registry::{LearningConfig, Registry, RegistryConfig};
use baton_worker::{Agent, AgentError, Need, Outcome, Profile, Task, Worker, WorkerConfig};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const SOLVERS: [&str; 3] = ["solver_a", "solver_b", "solver_c"];
const RATES: [f64; 3] = [0.7, 0.4, 0.1];
/// `solver_c`'s rate once it degrades.
const DEGRADED: f64 = 0.8;
const IN_FLIGHT: usize = 4;
const HEARTBEAT: Duration = Duration::from_millis(200);

/// Escalation rates by solver, changed mid-run.
type Rates = Arc<Mutex<HashMap<String, f64>>>;

/// What the checker saw of one session: the solver, whether it escalated.
type Verdict = (String, bool);

/// Hands every task to an agent with capability `solve`.
struct Front;

impl Agent for Front {
    async fn handle(&self, _task: Task) -> Result<Outcome, AgentError> {
        Ok(Outcome::handoff(Need::capabilities(["solve"]), Reason::OutOfScope).into())
    }
}

/// Completes its part and hands the answer to the checker.
struct Solver;

impl Agent for Solver {
    async fn handle(&self, _task: Task) -> Result<Outcome, AgentError> {
        let checker = AgentName::new("checker").map_err(|e| AgentError::fatal(e.to_string()))?;
        Ok(Outcome::handoff(checker, Reason::Other("answered".into()))
            .say("here is my answer")
            .into())
    }

    fn concurrency(&self) -> usize {
        IN_FLIGHT
    }
}

/// Escalates a solver's answer at that solver's hidden rate.
struct Checker {
    rates: Rates,
    rng: Mutex<fastrand::Rng>,
    verdicts: mpsc::UnboundedSender<Verdict>,
}

impl Agent for Checker {
    async fn handle(&self, task: Task) -> Result<Outcome, AgentError> {
        let solver = task
            .envelope
            .path
            .iter()
            .rev()
            .find(|hop| hop.agent.starts_with("solver_"))
            .map(|hop| hop.agent.to_string())
            .unwrap_or_default();
        let rate = self
            .rates
            .lock()
            .map_or(0.0, |r| r.get(&solver).copied().unwrap_or(0.0));
        let roll = self.rng.lock().map_or(1.0, |mut rng| rng.f64());
        let escalate = roll < rate;
        let _ = self.verdicts.send((solver, escalate));
        if escalate {
            let person = AgentName::new("person").map_err(|e| AgentError::fatal(e.to_string()))?;
            return Ok(Outcome::handoff(person, Reason::UserEscalation).into());
        }
        Ok(Outcome::complete("checked").into())
    }

    fn concurrency(&self) -> usize {
        IN_FLIGHT
    }
}

/// The person: the session waits in the inbox.
struct Person;

impl Agent for Person {
    async fn handle(&self, _task: Task) -> Result<Outcome, AgentError> {
        Ok(Outcome::wait().into())
    }
}

/// One registry and the agents, on streams of their own under `prefix`.
struct Round {
    client: Client,
    front: AgentName,
    rates: Rates,
    verdicts: mpsc::UnboundedReceiver<Verdict>,
    stop: CancellationToken,
}

impl Round {
    async fn start(
        nats: &async_nats::Client,
        prefix: &str,
        learning: bool,
    ) -> anyhow::Result<Self> {
        let subjects = Subjects::new(prefix)?;
        let stop = CancellationToken::new();
        let rates: Rates = Arc::new(Mutex::new(
            SOLVERS.iter().map(|s| (*s).to_owned()).zip(RATES).collect(),
        ));
        let (tx, verdicts) = mpsc::unbounded_channel();
        let worker = |name: &str, capabilities: &[&str]| -> anyhow::Result<WorkerConfig> {
            Ok(WorkerConfig::new(AgentName::new(name)?)
                .with_subjects(subjects.clone())
                .with_heartbeat_interval(HEARTBEAT)
                .with_profile(Profile {
                    capabilities: capabilities.iter().map(|c| (*c).to_owned()).collect(),
                    tier: 1,
                    ..Profile::default()
                }))
        };
        let cancelled = || stop.clone().cancelled_owned();
        tokio::spawn(
            Worker::new(nats.clone(), worker("front", &["front"])?, Front).run(cancelled()),
        );
        for solver in SOLVERS {
            tokio::spawn(
                Worker::new(nats.clone(), worker(solver, &["solve"])?, Solver).run(cancelled()),
            );
        }
        let checker = Checker {
            rates: rates.clone(),
            rng: Mutex::new(fastrand::Rng::with_seed(31)),
            verdicts: tx,
        };
        tokio::spawn(
            Worker::new(nats.clone(), worker("checker", &["check"])?, checker).run(cancelled()),
        );
        tokio::spawn(
            Worker::new(nats.clone(), worker("person", &["people"])?, Person).run(cancelled()),
        );
        let config = RegistryConfig::default()
            .with_subjects(subjects.clone())
            .with_heartbeat_interval(HEARTBEAT)
            .with_learning(LearningConfig {
                enabled: learning,
                ..LearningConfig::default()
            });
        tokio::spawn(Registry::new(nats.clone(), config).run(cancelled()));
        let client = Client::new(nats.clone(), subjects);
        let front = AgentName::new("front")?;
        let started = Instant::now();
        for name in [
            "front", "solver_a", "solver_b", "solver_c", "checker", "person",
        ] {
            while client.check_served(&AgentName::new(name)?).await.is_err() {
                anyhow::ensure!(
                    started.elapsed() < Duration::from_secs(30),
                    "{name} did not start"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        // Every solver heartbeating, and the registry answering.
        tokio::time::sleep(HEARTBEAT * 6).await;
        Ok(Self {
            client,
            front,
            rates,
            verdicts,
            stop,
        })
    }

    /// Runs `sessions` sessions, `IN_FLIGHT` at a time; the solver each went to.
    async fn run(&mut self, sessions: usize) -> anyhow::Result<Vec<String>> {
        let mut chosen = Vec::with_capacity(sessions);
        let mut sent = 0;
        while sent < sessions.min(IN_FLIGHT) {
            self.send(sent).await?;
            sent += 1;
        }
        while chosen.len() < sessions {
            let verdict = tokio::time::timeout(Duration::from_secs(30), self.verdicts.recv())
                .await
                .map_err(|_| anyhow::anyhow!("no session reached the checker for 30 s"))?
                .ok_or_else(|| anyhow::anyhow!("the checker stopped"))?;
            chosen.push(verdict.0);
            if sent < sessions {
                self.send(sent).await?;
                sent += 1;
            }
        }
        Ok(chosen)
    }

    async fn send(&self, n: usize) -> anyhow::Result<()> {
        let task = Envelope::task(format!("problem {n}: solve for x in {n}x + 3 = {}", n + 7));
        self.client.submit_to(&self.front, &task).await?;
        Ok(())
    }

    fn degrade(&self) {
        if let Ok(mut rates) = self.rates.lock() {
            rates.insert("solver_c".into(), DEGRADED);
        }
    }
}

impl Drop for Round {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The share of `chosen` that is `solver`.
fn share(chosen: &[String], solver: &str) -> f64 {
    chosen.iter().filter(|c| *c == solver).count() as f64 / chosen.len().max(1) as f64
}

/// Expected escalations above the oracle's, per session.
fn regret(chosen: &[String], rates: &[f64; 3]) -> f64 {
    let best = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let total: f64 = chosen
        .iter()
        .map(|c| {
            SOLVERS
                .iter()
                .position(|s| s == c)
                .map_or(0.0, |i| rates[i] - best)
        })
        .sum();
    total / chosen.len().max(1) as f64
}

fn row(label: &str, chosen: &[String], rates: &[f64; 3]) {
    println!(
        "{label:<36} {:>8} {:>9.1} {:>9.1} {:>9.1} {:>13.3}",
        chosen.len(),
        100.0 * share(chosen, "solver_a"),
        100.0 * share(chosen, "solver_b"),
        100.0 * share(chosen, "solver_c"),
        regret(chosen, rates)
    );
}

/// Runs today's ranking, then learned routing with the degradation, and prints both.
pub(super) async fn run(nats: &async_nats::Client, sessions: usize) -> anyhow::Result<()> {
    anyhow::ensure!(sessions >= 20, "--tasks must be at least 20 for --learning");
    let stamp = std::process::id();
    println!(
        "learning bench: solver_a, solver_b and solver_c share capability `solve` and complete every task; a checker escalates their answers to a person at hidden rates 0.7, 0.4 and 0.1; {IN_FLIGHT} sessions at a time"
    );
    println!();
    println!(
        "{:<36} {:>8} {:>9} {:>9} {:>9} {:>13}",
        "", "sessions", "a %", "b %", "c %", "regret/session"
    );
    let today = {
        let mut round = Round::start(nats, &format!("learnoff{stamp}"), false).await?;
        round.run(sessions).await?
    };
    row("today's ranking", &today, &RATES);
    let mut round = Round::start(nats, &format!("learnon{stamp}"), true).await?;
    let learning = round.run(sessions).await?;
    let after = round.run(sessions).await?;
    round.degrade();
    let degraded = round.run(sessions).await?;
    drop(round);
    let half = sessions / 2;
    row(
        &format!("learned, sessions 1-{half}"),
        &learning[..half],
        &RATES,
    );
    row(
        &format!("learned, sessions {}-{sessions}", half + 1),
        &learning[half..],
        &RATES,
    );
    row(
        &format!("learned, sessions {}-{}", sessions + 1, 2 * sessions),
        &after,
        &RATES,
    );
    let worse = [RATES[0], RATES[1], DEGRADED];
    row("after solver_c degrades (0.8), all", &degraded, &worse);
    let hundred = degraded.len().min(100);
    row(
        &format!("  its first {hundred}"),
        &degraded[..hundred],
        &worse,
    );
    row(
        &format!("  after those {hundred}"),
        &degraded[hundred..],
        &worse,
    );
    let moved = moved_after(&degraded, "solver_b", 20);
    println!();
    println!(
        "after {sessions} learned sessions, {:.1} % of lookups chose the best agent type (target >= 85 %); today's ranking: {:.1} %",
        100.0 * share(&after, "solver_c"),
        100.0 * share(&today, "solver_c"),
    );
    match moved {
        Some(n) => println!(
            "after solver_c degraded, solver_b first had the majority of the last 20 sessions at session {n} (target: within 100)"
        ),
        None => println!("after solver_c degraded, solver_b never had the majority of 20 sessions"),
    }
    let blocks: Vec<String> = degraded
        .chunks(50)
        .map(|block| format!("{:.0} %", 100.0 * share(block, "solver_b")))
        .collect();
    println!(
        "solver_b's share after the degradation, by 50 sessions: {}",
        blocks.join(", ")
    );
    println!(
        "regret: expected escalations above an oracle that always picks the lowest rate, per session; over the whole learned run {:.3}, today's ranking {:.3}",
        (regret(&learning, &RATES) + regret(&after, &RATES) + regret(&degraded, &worse)) / 3.0,
        regret(&today, &RATES),
    );
    Ok(())
}

/// The first session at which `solver` had the majority of the `window`
/// sessions up to it, counting from 1.
fn moved_after(chosen: &[String], solver: &str, window: usize) -> Option<usize> {
    (window..=chosen.len()).find(|&end| share(&chosen[end - window..end], solver) > 0.5)
}
