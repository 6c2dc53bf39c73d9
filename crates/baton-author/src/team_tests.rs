use baton_proto::{AgentName, Envelope, Parent};

use super::*;
use crate::delegate::ChildTask;

/// Answers "alone" on its own; as a coordinator, assigns `b` sync and `c` async.
struct Lead;

impl Agent for Lead {
    async fn handle(&self, task: Task) -> Result<Outcome, AgentError> {
        if task.envelope.context.variables.contains_key("team") {
            let b = ChildTask::new(AgentName::new("b").unwrap(), "draft");
            let c = ChildTask::new(AgentName::new("c").unwrap(), "review").tag("async");
            return Ok(Outcome::delegate(vec![b, c], DelegateMode::Parallel).into());
        }
        Ok(Outcome::complete("alone").into())
    }

    async fn resume(&self, _task: Task, results: Results) -> Result<Outcome, AgentError> {
        if results.all_in() {
            return Ok(Outcome::complete("done").into());
        }
        Ok(Outcome::wait().into())
    }
}

fn task(state: Option<Board>, member: bool) -> Task {
    let mut envelope = Envelope::task("goal");
    if let Some(board) = state {
        envelope
            .context
            .state
            .insert("team".into(), to_value(&board));
    }
    if member {
        envelope.parent = Some(Parent {
            id: uuid::Uuid::new_v4(),
            agent: AgentName::from_static("top"),
            depth: 1,
            index: Some(0),
            assignment: None,
            extra: baton_proto::Map::new(),
        });
    }
    Task {
        envelope: envelope.into(),
        attempt: 1,
        agent: AgentName::new("lead").unwrap(),
        instance: "i".into(),
        progress: crate::Progress::default(),
        registry: None,
    }
}

fn spec(nested: bool, max_depth: u32) -> TeamSpec {
    TeamSpec {
        members: vec!["b".into(), "c".into()],
        nested,
        max_depth,
        ..TeamSpec::default()
    }
}

fn kinds(outcome: &mut Outcome) -> Vec<String> {
    outcome
        .update_mut()
        .messages
        .iter()
        .filter_map(|m| m.coordination.clone())
        .collect()
}

fn outer(depth: u32) -> Option<Board> {
    Some(Board {
        depth,
        coordinator: "top".into(),
        ..Board::default()
    })
}

#[tokio::test]
async fn a_top_team_assigns_on_one_async_join_with_typed_messages() {
    let mut outcome = Team::new(Lead, spec(true, 2))
        .handle(task(None, false))
        .await
        .unwrap();
    assert_eq!(
        kinds(&mut outcome),
        ["team_up", "assign_sync", "assign_async"]
    );
    let Outcome::Delegate(delegation) = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(delegation.mode, DelegateMode::Async);
    let marks: Vec<_> = delegation
        .children
        .iter()
        .map(|c| (c.asynchronous, c.tag.clone()))
        .collect();
    // The async mark moves from the tag to the runtime's flag.
    assert_eq!(marks, [(false, None), (true, None)]);
}

#[tokio::test]
async fn a_member_forms_a_sub_team_only_when_nested_and_within_its_depth() {
    let nested = Team::new(Lead, spec(true, 2))
        .handle(task(outer(1), true))
        .await
        .unwrap();
    assert!(matches!(nested, Outcome::Delegate(_)), "{nested:?}");
    for (spec, depth) in [(spec(false, 2), 1), (spec(true, 2), 2)] {
        let alone = Team::new(Lead, spec)
            .handle(task(outer(depth), true))
            .await
            .unwrap();
        assert!(matches!(alone, Outcome::Complete(_)), "{alone:?}");
    }
}

fn result(index: u32, agent: &str) -> ChildResult {
    ChildResult {
        index,
        agent: Some(agent.into()),
        tag: None,
        status: baton_proto::ResultStatus::Completed,
        output: Value::from(format!("{agent} did it")),
        detail: None,
    }
}

fn results(got: Vec<ChildResult>, latest: u32) -> Results {
    Results {
        mode: DelegateMode::Async,
        results: got,
        total: 2,
        latest: Some(latest),
    }
}

#[tokio::test]
async fn results_join_the_conversation_and_a_wait_pauses_until_the_async_ones_report() {
    let team = Team::new(Lead, spec(true, 2));
    let board = Board {
        depth: 1,
        coordinator: "lead".into(),
        assigned: vec![("b".into(), false), ("c".into(), true)],
        paused: false,
    };
    // The async one first: the discussion still waits for b.
    let mut early = team
        .resume(
            task(Some(board.clone()), false),
            results(vec![result(1, "c")], 1),
        )
        .await
        .unwrap();
    assert!(matches!(early, Outcome::Wait(_)));
    assert_eq!(kinds(&mut early), ["result"]);
    // b's result: lead's turn; it waits, which pauses the team.
    let mut paused = team
        .resume(
            task(Some(board.clone()), false),
            results(vec![result(0, "b")], 0),
        )
        .await
        .unwrap();
    assert_eq!(kinds(&mut paused), ["result", "pause"]);
    let Outcome::Wait(wait) = &paused else {
        panic!()
    };
    let saved: Board =
        serde_json::from_value(serde_json::to_value(&wait.update.state["team"]).unwrap()).unwrap();
    assert!(saved.paused);
    // The last one in: lead concludes.
    let all = vec![result(0, "b"), result(1, "c")];
    let mut done = team
        .resume(task(Some(saved), false), results(all, 1))
        .await
        .unwrap();
    assert!(matches!(done, Outcome::Complete(_)));
    assert_eq!(kinds(&mut done), ["result", "conclude"]);
}

#[test]
fn a_round_cannot_start_while_async_assignments_are_out() {
    let team = Team::new(Lead, spec(true, 2));
    let more = Outcome::delegate(
        vec![ChildTask::new(AgentName::new("b").unwrap(), "more")],
        DelegateMode::Parallel,
    );
    let board = Board {
        depth: 1,
        coordinator: "lead".into(),
        ..Board::default()
    };
    let out = Outstanding {
        sync: 0,
        asynchronous: 1,
    };
    let err = team
        .moved(more.into(), ContextUpdate::default(), board.clone(), &out)
        .unwrap_err();
    assert!(err.to_string().contains("still out: pause"), "{err}");
    let none = Outstanding::default();
    let err = team
        .moved(
            Outcome::wait().into(),
            ContextUpdate::default(),
            board,
            &none,
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("no asynchronous assignment is out"),
        "{err}"
    );
}

#[test]
fn the_agents_own_tags_stay_as_they_are() {
    // An LLM coordinator's children carry tool call ids.
    let team = Team::new(Lead, spec(true, 2));
    let child = ChildTask::new(AgentName::new("b").unwrap(), "draft").tag("call_7");
    let assign = Outcome::delegate(vec![child], DelegateMode::Parallel);
    let board = Board {
        depth: 1,
        coordinator: "lead".into(),
        ..Board::default()
    };
    let moved = team
        .moved(
            assign.into(),
            ContextUpdate::default(),
            board,
            &Outstanding::default(),
        )
        .unwrap();
    let Outcome::Delegate(delegation) = moved else {
        panic!("{moved:?}")
    };
    assert_eq!(delegation.children[0].tag.as_deref(), Some("call_7"));
    assert!(!delegation.children[0].asynchronous);
}

#[tokio::test]
async fn a_member_working_alone_resumes_as_a_plain_agent() {
    // Its envelope carries the board of the team it is a member of.
    let team = Team::new(Lead, spec(false, 2));
    let theirs = Board {
        depth: 1,
        coordinator: "top".into(),
        assigned: vec![("x".into(), false), ("y".into(), true)],
        paused: false,
    };
    let all = vec![result(0, "b"), result(1, "c")];
    let mut outcome = team
        .resume(task(Some(theirs), true), results(all, 1))
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Complete(_)));
    assert!(kinds(&mut outcome).is_empty(), "no team messages");
}
