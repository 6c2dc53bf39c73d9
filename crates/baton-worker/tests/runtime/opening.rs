//! A root task's ended-session check rides on its first write: no read of
//! the session's events before it runs, and a task for a session that has
//! ended writes nothing into it and hands nothing on.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use baton_client::Client;
use baton_proto::{Envelope, Event, EventType, Subjects, Wire};
use baton_testkit::NatsServer;
use baton_worker::{
    Agent, AgentError, AgentName, EventLevel, Outcome, Reason, Task, Worker, WorkerConfig,
};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

/// Hands tasks that start with "hand" on to `second`, completes the rest;
/// counts its runs.
struct First(Arc<AtomicUsize>);

impl Agent for First {
    async fn handle(&self, task: Task) -> Result<Outcome, AgentError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        if task.query().starts_with("hand") {
            let second = AgentName::new("second")?;
            return Ok(Outcome::handoff(second, Reason::OutOfScope).into());
        }
        Ok(Outcome::complete("first's answer").into())
    }
}

/// Completes; counts its runs.
struct Second(Arc<AtomicUsize>);

impl Agent for Second {
    async fn handle(&self, _task: Task) -> Result<Outcome, AgentError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(Outcome::complete("second's answer").into())
    }
}

/// A deployment of `first` and `second` at one event level, the workers on
/// a connection of their own, and a count of the reads of session events
/// the workers ask the server for.
struct Chain {
    _server: NatsServer,
    client: Client,
    nats: async_nats::Client,
    subjects: Subjects,
    first: Arc<AtomicUsize>,
    second: Arc<AtomicUsize>,
    reads: Arc<AtomicUsize>,
    stop: CancellationToken,
    workers: Vec<tokio::task::JoinHandle<Result<(), baton_nats::Error>>>,
}

impl Chain {
    async fn start(level: EventLevel) -> anyhow::Result<Self> {
        let server = tokio::task::spawn_blocking(NatsServer::start).await??;
        let nats = async_nats::connect(server.url()).await?;
        let subjects = Subjects::default();
        let client = Client::new(nats.clone(), subjects.clone());
        client.ensure_streams().await?;
        // Every message read from the events stream is asked for on these
        // subjects; the workers' questions come back to their own inboxes.
        let reads = Arc::new(AtomicUsize::new(0));
        let stream = subjects.events_stream();
        for spied in [
            format!("$JS.API.STREAM.MSG.GET.{stream}"),
            format!("$JS.API.DIRECT.GET.{stream}"),
            format!("$JS.API.DIRECT.GET.{stream}.>"),
        ] {
            let mut spy = nats.subscribe(spied).await?;
            let reads = reads.clone();
            tokio::spawn(async move {
                while let Some(request) = spy.next().await {
                    let by_worker = request
                        .reply
                        .as_ref()
                        .is_some_and(|reply| reply.starts_with("_INBOX_workers"));
                    if by_worker {
                        reads.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
        nats.flush().await?;
        let workers_nats = async_nats::ConnectOptions::new()
            .custom_inbox_prefix("_INBOX_workers")
            .connect(server.url())
            .await?;
        let (first, second) = (Arc::default(), Arc::default());
        let stop = CancellationToken::new();
        let config = |agent: &str| -> anyhow::Result<WorkerConfig> {
            Ok(WorkerConfig::new(AgentName::new(agent)?)
                .with_subjects(subjects.clone())
                .with_registry(false)
                .with_events(level))
        };
        let workers = vec![
            tokio::spawn(
                Worker::new(
                    workers_nats.clone(),
                    config("first")?,
                    First(Arc::clone(&first)),
                )
                .run(stop.clone().cancelled_owned()),
            ),
            tokio::spawn(
                Worker::new(workers_nats, config("second")?, Second(Arc::clone(&second)))
                    .run(stop.clone().cancelled_owned()),
            ),
        ];
        for agent in ["first", "second"] {
            let agent = AgentName::new(agent)?;
            baton_testkit::eventually(Duration::from_secs(10), || client.check_served(&agent))
                .await?;
        }
        Ok(Self {
            _server: server,
            client,
            nats,
            subjects,
            first,
            second,
            reads,
            stop,
            workers,
        })
    }

    /// Sends `task` to `first` and waits for its session's end.
    async fn run(&self, task: &Envelope) -> anyhow::Result<Event> {
        self.client
            .submit_to(&AgentName::new("first")?, task)
            .await?;
        Ok(self
            .client
            .wait(task.session, Duration::from_secs(20))
            .await?)
    }

    /// The kinds of the events stored for `session`.
    async fn stored(&self, session: uuid::Uuid) -> anyhow::Result<Vec<EventType>> {
        let history = self.client.history(session).await?;
        Ok(history.into_iter().map(|event| event.kind).collect())
    }

    fn runs(&self) -> (usize, usize) {
        (
            self.first.load(Ordering::SeqCst),
            self.second.load(Ordering::SeqCst),
        )
    }

    fn reads(&self) -> usize {
        self.reads.load(Ordering::SeqCst)
    }

    /// Waits for `count` dead letters and returns their (reason, envelope).
    async fn dead_letters(
        &self,
        count: usize,
    ) -> anyhow::Result<Vec<(String, Option<uuid::Uuid>)>> {
        let dead = baton_testkit::eventually(Duration::from_secs(20), || async {
            let dead = self.client.dead_letters().await?;
            anyhow::ensure!(dead.len() >= count, "{} dead letters", dead.len());
            Ok(dead)
        })
        .await?;
        Ok(dead
            .into_iter()
            .map(|d| (d.reason.as_str().to_owned(), d.envelope))
            .collect())
    }

    async fn stop(self) -> anyhow::Result<()> {
        self.stop.cancel();
        for worker in self.workers {
            worker.await??;
        }
        Ok(())
    }
}

/// A task of `session` (a new one when `None`) asking `query`.
fn task(query: &str, session: Option<uuid::Uuid>) -> Envelope {
    let mut task = Envelope::task(query);
    if let Some(session) = session {
        task.session = session;
    }
    task
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_full_a_root_task_reads_nothing_and_a_task_for_an_ended_session_writes_nothing()
-> anyhow::Result<()> {
    let chain = Chain::start(EventLevel::Full).await?;
    let mut ended = Vec::new();
    for n in 0..4 {
        let query = if n % 2 == 0 { "hand on" } else { "answer" };
        let first = task(query, None);
        assert_eq!(chain.run(&first).await?.kind, EventType::Completed);
        ended.push(first.session);
    }
    assert_eq!(chain.runs(), (4, 2));
    // Four root tasks, and not one read of their sessions' events.
    assert_eq!(chain.reads(), 0, "reads of session events");

    // A second root task for each ended session: nothing is handed on and
    // nothing written; each is dead-lettered as `session_ended`.
    let before: Vec<_> =
        futures::future::try_join_all(ended.iter().map(|s| chain.stored(*s))).await?;
    let mut again = Vec::new();
    for (n, session) in ended.iter().enumerate() {
        let query = if n % 2 == 0 {
            "hand on again"
        } else {
            "answer again"
        };
        let second = task(query, Some(*session));
        chain
            .client
            .submit_to(&AgentName::new("first")?, &second)
            .await?;
        again.push(second.id);
    }
    let mut dead = chain.dead_letters(4).await?;
    dead.sort();
    let mut expected: Vec<_> = (again.iter())
        .map(|id| ("session_ended".to_owned(), Some(*id)))
        .collect();
    expected.sort();
    assert_eq!(dead, expected);
    // The agent ran (its outcome is dropped at the write); the agent it
    // would have handed on to did not.
    assert_eq!(chain.runs(), (8, 2));
    let after: Vec<_> =
        futures::future::try_join_all(ended.iter().map(|s| chain.stored(*s))).await?;
    assert_eq!(after, before, "no new event in an ended session");
    // One read for each refused first write, to tell why it was refused.
    assert_eq!(chain.reads(), 4);
    chain.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_task_whose_session_has_events_but_no_end_runs_as_before() -> anyhow::Result<()> {
    let chain = Chain::start(EventLevel::Full).await?;
    // An event written first by someone else (the router's `escalated`,
    // a replayed dead letter's `reopened`).
    let first = task("hand on", None);
    let mut reopened = Event::new(uuid::Uuid::new_v4(), first.session, EventType::Reopened);
    reopened.detail = Some("written first".to_owned());
    let js = async_nats::jetstream::new(chain.nats.clone());
    js.publish(
        chain.subjects.events(first.session),
        reopened.to_msgpack()?.into(),
    )
    .await?
    .await?;
    assert_eq!(chain.run(&first).await?.kind, EventType::Completed);
    assert_eq!(chain.runs(), (1, 1));
    let stored = chain.stored(first.session).await?;
    let completed = stored
        .iter()
        .filter(|k| **k == EventType::Completed)
        .count();
    assert_eq!(completed, 1, "{stored:?}");
    assert_eq!(stored.first(), Some(&EventType::Reopened));
    // The refused first write, and the one read that says why.
    assert_eq!(chain.reads(), 1);
    assert!(chain.client.dead_letters().await?.is_empty());
    chain.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_lean_a_root_handoff_reads_its_session_and_a_root_completion_does_not()
-> anyhow::Result<()> {
    let chain = Chain::start(EventLevel::Lean).await?;
    let answered = task("answer", None);
    assert_eq!(chain.run(&answered).await?.kind, EventType::Completed);
    // Its `completed` is its first stored event: it carries the check.
    assert_eq!(chain.reads(), 0);
    let handed = task("hand on", None);
    assert_eq!(chain.run(&handed).await?.kind, EventType::Completed);
    // A handoff stores no event at `lean`: the session is read instead.
    assert_eq!(chain.reads(), 1);
    assert_eq!(chain.runs(), (2, 1));

    let before = chain.stored(handed.session).await?;
    let again = task("hand on again", Some(handed.session));
    chain
        .client
        .submit_to(&AgentName::new("first")?, &again)
        .await?;
    let dead = chain.dead_letters(1).await?;
    assert_eq!(dead, [("session_ended".to_owned(), Some(again.id))]);
    assert_eq!(chain.runs(), (3, 1), "not handed on");
    let stored = chain.stored(handed.session).await?;
    assert_eq!(stored, before, "no new event in an ended session");
    chain.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_refuses_a_repeated_first_write_before_it_sees_a_duplicate() -> anyhow::Result<()>
{
    // Why a refused first write reads the session rather than ending the
    // task: a root task delivered again (its ack lost with a server) writes
    // its first event again under the same id, and the server checks the
    // expectation before the duplicate.
    let server = tokio::task::spawn_blocking(NatsServer::start).await??;
    let nats = async_nats::connect(server.url()).await?;
    let js = async_nats::jetstream::new(nats);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "FIRST".to_owned(),
        subjects: vec!["first.>".to_owned()],
        ..Default::default()
    })
    .await?;
    let first = |id: &str| {
        async_nats::jetstream::message::PublishMessage::build()
            .payload("x".into())
            .message_id(id)
            .expected_last_subject_sequence(0)
    };
    let written = js.send_publish("first.s", first("a")).await?.await?;
    assert!(!written.duplicate);
    let again = js.send_publish("first.s", first("a")).await?.await;
    let err = again.expect_err("refused, not a duplicate");
    assert_eq!(
        err.kind(),
        async_nats::jetstream::context::PublishErrorKind::WrongLastSequence
    );
    let other = js.send_publish("first.s", first("b")).await?.await;
    let err = other.expect_err("the subject has a message");
    assert_eq!(
        err.kind(),
        async_nats::jetstream::context::PublishErrorKind::WrongLastSequence
    );
    Ok(())
}
