use baton_proto::{Parent, Usage, derive_id_labelled};

use baton_author::ContextUpdate;

use super::*;

const NOW: u64 = 1_000_000;

fn name(agent: &str) -> AgentName {
    AgentName::new(agent).unwrap()
}

fn join(mode: DelegateMode, agents: &[&str], deadline: Option<u64>) -> JoinState {
    let children = agents
        .iter()
        .map(|agent| {
            JoinChild::new(
                name(agent),
                format!("do {agent}"),
                None,
                ContextPolicy::Full,
            )
        })
        .collect();
    JoinState::new(Envelope::task("parent"), mode, children, deadline, 1)
}

/// A `result` from child `index` (`None`: the deadline timer).
fn result(index: Option<u32>, status: ResultStatus, output: &str) -> Envelope {
    let mut envelope = Envelope::task("child");
    envelope.id = derive_id_labelled(Uuid::nil(), "test", index.unwrap_or(999));
    envelope.parent = Some(Parent {
        id: Uuid::nil(),
        agent: baton_proto::AgentName::from_static("boss"),
        depth: 1,
        index,
        assignment: None,
        extra: baton_proto::Map::new(),
    });
    envelope.status = Some(status);
    envelope.output = Some(Value::from(output));
    envelope.from = Some(baton_proto::AgentName::unchecked(format!(
        "child{}",
        index.unwrap_or(0)
    )));
    envelope
}

fn ok(index: u32, output: &str) -> Envelope {
    result(Some(index), ResultStatus::Completed, output)
}

fn failed(index: u32, why: &str) -> Envelope {
    result(Some(index), ResultStatus::Failed, why)
}

fn outputs(state: &JoinState) -> Vec<Value> {
    match state.results(None).outputs() {
        Value::Array(items) => items,
        other => panic!("not a list: {other}"),
    }
}

#[test]
fn parallel_fires_once_on_the_last_result() {
    let mut state = join(DelegateMode::Parallel, &["a", "b", "c"], None);
    assert_eq!(state.unanswered_first_wave().collect::<Vec<_>>(), [0, 1, 2]);
    let (r0, r2, r1) = (ok(0, "A"), ok(2, "C"), ok(1, "B"));
    assert_eq!(
        state.receive(&r0, r0.id, NOW),
        Receipt::Changed(Some("recorded"))
    );
    assert_eq!(state.follow_up(r0.id, false), FollowUp::Nothing);
    state.receive(&r2, r2.id, NOW);
    assert!(!state.all_in());
    assert_eq!(
        state.receive(&r1, r1.id, NOW),
        Receipt::Changed(Some("recorded"))
    );
    assert_eq!(state.fired_by, Some(r1.id));
    assert_eq!(state.follow_up(r1.id, false), FollowUp::Fire);
    assert_eq!(outputs(&state), [Value::from("A"), "B".into(), "C".into()]);
    // The same message again (a redelivery after a crash) runs it again.
    assert_eq!(state.receive(&r1, r1.id, NOW), Receipt::Refire);
}

#[test]
fn duplicates_and_strangers_are_dropped_with_a_reason() {
    let mut state = join(DelegateMode::Parallel, &["a", "b"], None);
    let first = ok(0, "A");
    state.receive(&first, first.id, NOW);
    // A redelivery of the same message acts on the stored state.
    assert_eq!(state.receive(&first, first.id, NOW), Receipt::Recorded);
    // Another message for the same child is a duplicate.
    let mut copy = ok(0, "A again");
    copy.id = Uuid::new_v4();
    assert_eq!(
        state.receive(&copy, copy.id, NOW),
        Receipt::Drop(Some("dropped: a duplicate of a recorded result".into()))
    );
    let stranger = ok(7, "?");
    assert_eq!(
        state.receive(&stranger, stranger.id, NOW),
        Receipt::Drop(Some("dropped: the join has no child 7".into()))
    );
    let last = ok(1, "B");
    state.receive(&last, last.id, NOW);
    let late = failed(1, "after the end");
    let mut late = late;
    late.id = Uuid::new_v4();
    assert_eq!(
        state.receive(&late, late.id, NOW),
        Receipt::Drop(Some("dropped: the join is already complete".into()))
    );
}

#[test]
fn serial_sends_one_child_at_a_time() {
    let mut state = join(DelegateMode::Serial, &["a", "b"], None);
    assert_eq!(state.unanswered_first_wave().collect::<Vec<_>>(), [0]);
    let first = ok(0, "A");
    state.receive(&first, first.id, NOW);
    assert_eq!(state.started, 2);
    assert_eq!(state.follow_up(first.id, false), FollowUp::Send(1));
    assert_eq!(
        state.earlier_outputs(),
        Some(Value::Array(vec!["A".into()]))
    );
    // Serial children keep their own input.
    assert_eq!(state.children[1].input, "do b");
    let second = ok(1, "B");
    state.receive(&second, second.id, NOW);
    assert_eq!(state.follow_up(second.id, false), FollowUp::Fire);
}

#[test]
fn a_chain_feeds_each_output_to_the_next_and_halts_on_failure() {
    let mut state = join(
        DelegateMode::Chain { recover: None },
        &["a", "b", "c"],
        None,
    );
    let first = ok(0, "draft");
    state.receive(&first, first.id, NOW);
    assert_eq!(state.children[1].input, "draft");
    assert_eq!(state.follow_up(first.id, false), FollowUp::Send(1));
    let second = failed(1, "b broke");
    state.receive(&second, second.id, NOW);
    assert_eq!(
        state.fired_by,
        Some(second.id),
        "a failure without recover halts"
    );
    let results = state.results(None);
    assert_eq!(results.results.len(), 2);
    assert_eq!(results.results[1].detail.as_deref(), Some("b broke"));
}

#[test]
fn a_chain_recovers_with_an_agent_whose_output_stands_in() {
    let recover = Some(Recover::Agent(name("fixer")));
    let mut state = join(DelegateMode::Chain { recover }, &["a", "b"], None);
    let first = failed(0, "a broke");
    state.receive(&first, first.id, NOW);
    assert_eq!(state.children.len(), 3);
    assert_eq!(state.children[2].agent, name("fixer"));
    assert_eq!(state.children[2].input, "a broke");
    assert_eq!(state.follow_up(first.id, false), FollowUp::Send(2));
    let fixed = ok(2, "patched");
    state.receive(&fixed, fixed.id, NOW);
    assert_eq!(state.fired_by, None);
    assert_eq!(state.children[1].input, "patched");
    assert_eq!(state.follow_up(fixed.id, false), FollowUp::Send(1));
    let last = ok(1, "done");
    state.receive(&last, last.id, NOW);
    assert_eq!(state.follow_up(last.id, false), FollowUp::Fire);
    assert_eq!(outputs(&state), [Value::from("patched"), "done".into()]);
    assert_eq!(
        state.results(None).total,
        2,
        "the recovery step is not a step of its own"
    );
}

#[test]
fn a_failed_recovery_halts_the_chain() {
    let recover = Some(Recover::Agent(name("fixer")));
    let mut state = join(DelegateMode::Chain { recover }, &["a", "b"], None);
    let first = failed(0, "a broke");
    state.receive(&first, first.id, NOW);
    let fix = failed(2, "fixer broke too");
    state.receive(&fix, fix.id, NOW);
    assert_eq!(state.fired_by, Some(fix.id));
}

#[test]
fn a_chain_recovers_with_a_value() {
    let recover = Some(Recover::Value(Value::from("fallback text")));
    let mut state = join(DelegateMode::Chain { recover }, &["a", "b"], None);
    let first = failed(0, "a broke");
    state.receive(&first, first.id, NOW);
    assert_eq!(state.children[1].input, "fallback text");
    assert_eq!(state.follow_up(first.id, false), FollowUp::Send(1));
}

#[test]
fn async_reports_each_result_and_a_claim_ends_it_once() {
    let mut state = join(DelegateMode::Async, &["a", "b"], None);
    let first = ok(0, "A");
    state.receive(&first, first.id, NOW);
    assert_eq!(state.follow_up(first.id, false), FollowUp::Report);
    assert_eq!(
        state.follow_up(first.id, true),
        FollowUp::Nothing,
        "no second report on redelivery"
    );
    assert_eq!(state.claim(first.id), Claim::Changed);
    assert_eq!(state.reports, 1);
    assert_eq!(state.claim(first.id), Claim::Held(true));
    assert_eq!(state.claim(Uuid::new_v4()), Claim::Held(false));
}

#[test]
fn the_deadline_timer_waits_then_fails_the_missing_children() {
    let deadline = NOW + 5_000;
    let mut state = join(DelegateMode::Parallel, &["a", "b"], Some(deadline));
    let first = ok(0, "A");
    state.receive(&first, first.id, NOW);
    let timer = result(None, ResultStatus::Failed, "");
    assert_eq!(
        state.receive(&timer, timer.id, NOW),
        Receipt::Later(Duration::from_millis(5_000))
    );
    assert_eq!(
        state.receive(&timer, timer.id, deadline + 1),
        Receipt::Changed(None)
    );
    assert_eq!(state.follow_up(timer.id, false), FollowUp::Fire);
    let results = state.results(None);
    assert!(results.results[0].completed());
    assert_eq!(
        results.results[1].detail.as_deref(),
        Some("deadline_exceeded: no result before the join's deadline")
    );
    // A result after the deadline is noted and dropped; a timer after the end says nothing.
    let late = ok(1, "too late");
    assert_eq!(
        state.receive(&late, late.id, deadline + 2),
        Receipt::Drop(Some("dropped: the join is already complete".into()))
    );
    let mut again = result(None, ResultStatus::Failed, "");
    again.id = Uuid::new_v4();
    assert_eq!(
        state.receive(&again, again.id, deadline + 3),
        Receipt::Drop(None)
    );
}

#[test]
fn a_result_after_the_deadline_completes_the_join_as_failed() {
    let deadline = NOW;
    let mut state = join(DelegateMode::Parallel, &["a", "b"], Some(deadline));
    let late = ok(0, "late");
    assert_eq!(
        state.receive(&late, late.id, deadline + 10),
        Receipt::Changed(Some("dropped: it arrived after the join's deadline"))
    );
    assert_eq!(state.fired_by, Some(late.id));
    assert!(state.results(None).results.iter().all(|r| !r.completed()));
}

#[test]
fn a_timer_for_a_join_without_deadline_is_dropped_not_retried_forever() {
    let mut state = join(DelegateMode::Parallel, &["a"], None);
    let timer = result(None, ResultStatus::Failed, "");
    assert!(matches!(
        state.receive(&timer, timer.id, NOW),
        Receipt::Drop(Some(_))
    ));
}

#[test]
fn the_state_survives_its_encoding() {
    let mut state = join(
        DelegateMode::Chain {
            recover: Some(Recover::Agent(name("fixer"))),
        },
        &["a", "b"],
        Some(NOW),
    );
    let first = failed(0, "broke");
    state.receive(&first, first.id, NOW);
    let bytes = rmp_serde::to_vec_named(&state).unwrap();
    let back: JoinState = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(back, state);
}

fn spent(total: u64) -> Option<Usage> {
    Some(Usage {
        input_tokens: total,
        output_tokens: 0,
        estimated: false,
        cost_micros: 0,
    })
}

fn costing(mut result: Envelope, total: u64) -> Envelope {
    result.usage = spent(total);
    result
}

#[test]
fn parallel_children_add_what_they_spent_beyond_the_parent() {
    let mut state = join(DelegateMode::Parallel, &["a", "b"], None);
    state.envelope.usage = spent(100);
    assert_eq!(state.usage_from(1), spent(100));
    let (r0, r1) = (costing(ok(0, "A"), 150), costing(ok(1, "B"), 130));
    state.receive(&r0, r0.id, NOW);
    // A redelivery of the same result is not charged twice.
    state.receive(&r0, r0.id, NOW);
    state.receive(&r1, r1.id, NOW);
    assert_eq!(state.usage(), spent(180));
}

#[test]
fn a_serial_step_starts_from_its_siblings_spending_and_is_charged_beyond_it() {
    let mut state = join(DelegateMode::Serial, &["a", "b"], None);
    state.envelope.usage = spent(100);
    let r0 = costing(ok(0, "A"), 150);
    state.receive(&r0, r0.id, NOW);
    assert_eq!(state.follow_up(r0.id, false), FollowUp::Send(1));
    assert_eq!(state.usage_from(1), spent(150));
    let r1 = costing(ok(1, "B"), 170);
    state.receive(&r1, r1.id, NOW);
    assert_eq!(state.usage(), spent(170));
}

#[test]
fn a_join_without_usage_stays_without() {
    let mut state = join(DelegateMode::Parallel, &["a"], None);
    let r0 = ok(0, "A");
    state.receive(&r0, r0.id, NOW);
    assert_eq!(state.usage(), None);
}

#[test]
fn an_async_report_that_keeps_waiting_is_charged_once() {
    let mut state = join(DelegateMode::Async, &["a", "b"], None);
    state.envelope.usage = spent(100);
    let r0 = costing(ok(0, "A"), 130);
    state.receive(&r0, r0.id, NOW);
    // The report r0 ran spent 40 and kept waiting; its redelivery spent
    // the same again, which is not counted twice.
    let none = ContextUpdate::default();
    assert!(state.note_wait(r0.id, spent(40).unwrap(), &none));
    assert!(!state.note_wait(r0.id, spent(40).unwrap(), &none));
    assert!(!state.note_wait(Uuid::new_v4(), Usage::default(), &none));
    assert_eq!(state.usage(), spent(170));
    let r1 = costing(ok(1, "B"), 110);
    state.receive(&r1, r1.id, NOW);
    assert_eq!(state.usage(), spent(180));
}

#[test]
fn a_report_that_keeps_waiting_adds_to_the_conversation_once() {
    let mut state = join(DelegateMode::Async, &["a", "b"], None);
    let r0 = ok(0, "A");
    state.receive(&r0, r0.id, NOW);
    let mut update = ContextUpdate::default();
    update.messages.push(baton_proto::Message::new(
        baton_proto::Role::Agent,
        "A is in",
    ));
    let before = state.envelope.context.messages.len();
    assert!(state.note_wait(r0.id, Usage::default(), &update));
    assert!(
        !state.note_wait(r0.id, Usage::default(), &update),
        "a redelivery adds nothing"
    );
    assert_eq!(state.envelope.context.messages.len(), before + 1);
}

#[test]
fn progress_joins_the_conversation_once_and_fills_no_slot() {
    let mut state = join(DelegateMode::Async, &["a", "b"], None);
    let mut progress = ok(1, "B took it");
    progress.status = Some(ResultStatus::Progress);
    let before = state.envelope.context.messages.len();
    assert_eq!(state.receive(&progress, progress.id, NOW), Receipt::Noted);
    assert!(matches!(
        state.receive(&progress, progress.id, NOW),
        Receipt::Drop(None)
    ));
    let added = &state.envelope.context.messages[before..];
    assert_eq!(added.len(), 1);
    assert_eq!(added[0].coordination.as_deref(), Some("progress"));
    assert_eq!(added[0].content, "B took it");
    assert!(state.slots.iter().all(Option::is_none), "no result yet");
}
