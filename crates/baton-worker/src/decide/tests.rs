use std::time::Duration;

use super::*;
use baton_author::ContextPolicy;
use baton_author::Outcome;
use baton_author::{Decided, Routing};
use baton_proto::{Hop, Message, Role, derive_id};

fn ok(outcome: impl Into<Outcome>) -> Result<Outcome, AgentError> {
    Ok(outcome.into())
}

/// What the worker does with an agent's result: the rules (none here), then the planner.
fn step(envelope: &Envelope, result: Result<Outcome, AgentError>) -> Result<Step, AgentError> {
    result.map(|outcome| match Routing::decide(None, envelope, outcome) {
        Decided::Step(step) => step,
        Decided::Delegate(_) => panic!("delegations are started by the join, not planned"),
    })
}

trait Decide {
    fn decide(
        &self,
        envelope: &Envelope,
        attempt: u32,
        result: Result<Outcome, AgentError>,
    ) -> Plan {
        self.decide_found(envelope, attempt, result, Lookup::NotAsked)
    }

    fn decide_found(
        &self,
        envelope: &Envelope,
        attempt: u32,
        result: Result<Outcome, AgentError>,
        found: Lookup,
    ) -> Plan;

    fn lookup_for(
        &self,
        envelope: &Envelope,
        result: Result<Outcome, AgentError>,
    ) -> Option<LookupRequest>;
}

impl Decide for Planner<'_> {
    fn decide_found(
        &self,
        envelope: &Envelope,
        attempt: u32,
        result: Result<Outcome, AgentError>,
        found: Lookup,
    ) -> Plan {
        self.plan(
            &mut envelope.clone(),
            attempt,
            step(envelope, result),
            found,
        )
    }

    fn lookup_for(
        &self,
        envelope: &Envelope,
        result: Result<Outcome, AgentError>,
    ) -> Option<LookupRequest> {
        self.lookup_request(envelope, &step(envelope, result))
    }
}

fn name(text: &str) -> AgentName {
    AgentName::new(text).unwrap()
}

struct Fixture {
    agent: AgentName,
    fallback: Option<AgentName>,
}

impl Fixture {
    fn new(agent: &str, fallback: Option<&str>) -> Self {
        Self {
            agent: name(agent),
            fallback: fallback.map(name),
        }
    }

    fn planner(&self) -> Planner<'_> {
        Planner {
            agent: &self.agent,
            instance: "i-1",
            version: None,
            fallback: self.fallback.as_ref(),
            retry: RetryPolicy {
                max_attempts: 3,
                min_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(1),
            },
            tier: 1,
            reply_to: "baton.agent.boss",
            hand_back: false,
        }
    }
}

fn events(plan: &Plan) -> Vec<(EventType, Option<String>, Option<Reason>)> {
    plan.outputs
        .iter()
        .filter_map(|output| match output {
            Output::Event(event) => Some((
                event.kind.clone(),
                event.to.as_ref().map(ToString::to_string),
                event.reason.clone(),
            )),
            _ => None,
        })
        .collect()
}

fn envelopes(plan: &Plan) -> Vec<&Envelope> {
    plan.outputs
        .iter()
        .filter_map(|output| match output {
            Output::Envelope { envelope, .. } => Some(envelope.as_ref()),
            _ => None,
        })
        .collect()
}

fn dead_letters(plan: &Plan) -> Vec<&DeadLetter> {
    plan.outputs
        .iter()
        .filter_map(|output| match output {
            Output::DeadLetter(dead) => Some(dead),
            _ => None,
        })
        .collect()
}

fn hop(agent: &str) -> Hop {
    Hop::new(baton_proto::AgentName::unchecked(agent), "x", None)
}

#[test]
fn complete_emits_one_terminal_event_with_the_path() {
    let fixture = Fixture::new("general", None);
    let task = Envelope::task("hi");
    let plan = fixture
        .planner()
        .decide(&task, 1, ok(Outcome::complete("hello")));
    assert_eq!(plan.settle, Settle::Ack);
    assert_eq!(events(&plan), vec![(EventType::Completed, None, None)]);
    let Output::Event(event) = &plan.outputs[0] else {
        panic!()
    };
    assert_eq!(event.output, Some(Value::from("hello")));
    assert_eq!(
        event
            .path
            .iter()
            .map(|h| h.agent.as_str())
            .collect::<Vec<_>>(),
        ["general"]
    );
    assert_eq!(event.id, derive_id(task.id, 0));
    // The terminal event keeps the context the session ended with.
    let context = event.context.as_deref().expect("the ending context");
    assert_eq!(context.initial_query, "hi");
    assert_eq!(context.messages.len(), task.context.messages.len());
}

#[test]
fn a_conversation_turn_ends_naming_its_turn_and_whether_it_hands_back() {
    let fixture = Fixture::new("refunds", None);
    let mut task = Envelope::task("hi");
    task.conversation = Some(baton_proto::TurnOf {
        id: "c-1".to_owned(),
        turn: 2,
        hand_back: false,
        extra: baton_proto::Map::new(),
    });
    let ended = |plan: &Plan| match &plan.outputs[0] {
        Output::Event(event) => event.conversation.clone().expect("the turn"),
        _ => panic!("{plan:?}"),
    };
    // Kept by the agent that answered, unless it hands the turn back.
    let kept = fixture
        .planner()
        .decide(&task, 1, ok(Outcome::complete("done")));
    assert_eq!((ended(&kept).id.as_str(), ended(&kept).turn), ("c-1", 2));
    assert!(!ended(&kept).hand_back);
    let handed = fixture
        .planner()
        .decide(&task, 1, ok(Outcome::complete("done").hand_back()));
    assert!(ended(&handed).hand_back);
    // A spec's `next_turn = "entry"` hands back every turn it takes part in.
    let mut planner = fixture.planner();
    planner.hand_back = true;
    let entry = planner.decide(&task, 1, ok(Outcome::complete("done")));
    assert!(ended(&entry).hand_back);
    // A one-shot task's end names no turn.
    let single = fixture
        .planner()
        .decide(&Envelope::task("hi"), 1, ok(Outcome::complete("done")));
    assert!(matches!(&single.outputs[0], Output::Event(e) if e.conversation.is_none()));
}

#[test]
fn handoff_carries_the_context_and_extends_the_path() {
    let fixture = Fixture::new("general", None);
    let mut task = Envelope::task("refund please").with_variable("order", "ABC-1");
    task.reason = Some(Reason::parse("arrived"));
    let outcome = Outcome::handoff(name("refund"), Reason::KnowledgeGap)
        .say("passing you on")
        .set_var("tier", 1)
        .set_state("checked", true)
        .step("classify", "refund question", "mentions refund")
        .problem("customer wants a refund")
        .next_action("check the window");
    let plan = fixture.planner().decide(&task, 1, ok(outcome));
    assert_eq!(plan.settle, Settle::Ack);
    assert_eq!(
        events(&plan),
        vec![(
            EventType::Handoff,
            Some("refund".into()),
            Some(Reason::KnowledgeGap)
        )]
    );
    let next = envelopes(&plan)[0];
    assert_eq!(next.kind, Kind::Handoff);
    assert_eq!(next.to.as_deref(), Some("refund"));
    assert_eq!(next.from.as_deref(), Some("general"));
    assert_eq!(next.session, task.session);
    assert_eq!(next.id, derive_id(task.id, 1));
    assert_eq!(next.reason, Some(Reason::KnowledgeGap));
    assert_eq!(
        next.suggested_next_action.as_deref(),
        Some("check the window")
    );
    assert_eq!(next.path.len(), 1);
    assert_eq!(next.path[0].agent, "general");
    assert_eq!(next.path[0].reason, Some(Reason::parse("arrived")));
    let context = &next.context;
    assert_eq!(context.messages.len(), 2);
    assert_eq!(context.messages[0].role, Role::User);
    assert_eq!(context.messages[1].name.as_deref(), Some("general"));
    assert_eq!(context.variables.get("order"), Some(&Value::from("ABC-1")));
    assert_eq!(context.variables.get("tier"), Some(&Value::from(1)));
    assert_eq!(context.state.get("checked"), Some(&Value::from(true)));
    assert_eq!(context.trace[0].agent.as_deref(), Some("general"));
    assert_eq!(context.problem, "customer wants a refund");
}

#[test]
fn plans_are_deterministic_for_the_same_delivery() {
    let fixture = Fixture::new("general", None);
    let task = Envelope::task("x");
    let ids = |plan: &Plan| -> Vec<Uuid> {
        plan.outputs
            .iter()
            .map(|output| match output {
                Output::Envelope { envelope, .. } => envelope.id,
                Output::Event(event) => event.id,
                Output::DeadLetter(dead) => dead.id,
            })
            .collect()
    };
    let a = fixture.planner().decide(
        &task,
        1,
        ok(Outcome::handoff(name("refund"), Reason::KnowledgeGap)),
    );
    let b = fixture.planner().decide(
        &task,
        2,
        ok(Outcome::handoff(name("refund"), Reason::KnowledgeGap)),
    );
    assert_eq!(ids(&a), ids(&b));
}

#[test]
fn a_to_b_to_a_is_a_loop_escalated_to_the_fallback() {
    let fixture = Fixture::new("b", Some("human"));
    let mut envelope = Envelope::task("x");
    envelope.path.push(hop("a"));
    let plan = fixture.planner().decide(
        &envelope,
        1,
        ok(Outcome::handoff(name("a"), Reason::OutOfScope)),
    );
    assert_eq!(
        events(&plan),
        vec![
            (
                EventType::LoopDetected,
                Some("a".into()),
                Some(Reason::LoopDetected)
            ),
            (
                EventType::Escalated,
                Some("human".into()),
                Some(Reason::LoopDetected)
            ),
        ]
    );
    let next = envelopes(&plan);
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].to.as_deref(), Some("human"));
    assert_eq!(next[0].reason, Some(Reason::LoopDetected));
    assert!(dead_letters(&plan).is_empty());
    assert_eq!(plan.settle, Settle::Ack);
}

#[test]
fn a_loop_without_a_fallback_fails_and_dead_letters() {
    let fixture = Fixture::new("b", None);
    let mut envelope = Envelope::task("x");
    envelope.path.push(hop("a"));
    let plan = fixture.planner().decide(
        &envelope,
        1,
        ok(Outcome::handoff(name("a"), Reason::OutOfScope)),
    );
    let kinds: Vec<_> = events(&plan).into_iter().map(|e| e.0).collect();
    assert_eq!(
        kinds,
        [
            EventType::LoopDetected,
            EventType::DeadLettered,
            EventType::Failed
        ]
    );
    assert_eq!(events(&plan)[2].2, Some(Reason::LoopDetected));
    assert_eq!(dead_letters(&plan)[0].reason, DeadLetterReason::NoRoute);
    assert!(envelopes(&plan).is_empty());
    assert!(plan.failed);
}

#[test]
fn the_fallback_is_not_asked_twice() {
    let fixture = Fixture::new("b", Some("human"));
    let mut envelope = Envelope::task("x");
    envelope.path.extend([hop("a"), hop("human")]);
    let plan = fixture.planner().decide(
        &envelope,
        1,
        ok(Outcome::handoff(name("a"), Reason::OutOfScope)),
    );
    assert_eq!(events(&plan).last().unwrap().0, EventType::Failed);
    assert!(envelopes(&plan).is_empty());
}

#[test]
fn max_hops_is_enforced() {
    let fixture = Fixture::new("c", None);
    let mut envelope = Envelope::task("x").with_max_hops(3);
    envelope.path.extend([hop("a"), hop("b")]);
    // c makes the third hop; a fourth agent would exceed the budget of 3.
    let plan = fixture.planner().decide(
        &envelope,
        1,
        ok(Outcome::handoff(name("d"), Reason::OutOfScope)),
    );
    assert_eq!(events(&plan)[0].0, EventType::LoopDetected);
    let Output::Event(event) = &plan.outputs[0] else {
        panic!()
    };
    assert!(
        event.detail.as_deref().unwrap().contains("hop budget of 3"),
        "{event:?}"
    );
    // One hop fewer fits.
    envelope.path.pop();
    let plan = fixture.planner().decide(
        &envelope,
        1,
        ok(Outcome::handoff(name("d"), Reason::OutOfScope)),
    );
    assert_eq!(events(&plan)[0].0, EventType::Handoff);
}

#[test]
fn retryable_failures_nak_with_backoff_then_dead_letter() {
    let fixture = Fixture::new("orders", None);
    let envelope = Envelope::task("x");
    let fail = || Err(AgentError::retryable("tool timed out"));
    let first = fixture.planner().decide(&envelope, 1, fail());
    assert_eq!(first.settle, Settle::Nak(Duration::from_millis(100)));
    assert_eq!(events(&first)[0].0, EventType::Retrying);
    let second = fixture.planner().decide(&envelope, 2, fail());
    assert_eq!(second.settle, Settle::Nak(Duration::from_millis(200)));
    let Output::Event(e1) = &first.outputs[0] else {
        panic!()
    };
    let Output::Event(e2) = &second.outputs[0] else {
        panic!()
    };
    assert_ne!(e1.id, e2.id, "each attempt's retrying event is its own");

    let last = fixture.planner().decide(&envelope, 3, fail());
    assert_eq!(last.settle, Settle::Term);
    assert!(last.failed);
    assert_eq!(dead_letters(&last)[0].reason, DeadLetterReason::MaxAttempts);
    assert!(dead_letters(&last)[0].detail.contains("tool timed out"));
    let kinds: Vec<_> = events(&last).into_iter().map(|e| (e.0, e.2)).collect();
    assert_eq!(
        kinds,
        [
            (EventType::DeadLettered, Some(Reason::parse("max_attempts"))),
            (EventType::Failed, Some(Reason::MaxAttempts))
        ]
    );
}

#[test]
fn exhausted_with_a_fallback_dead_letters_and_escalates() {
    let fixture = Fixture::new("orders", Some("human"));
    let plan =
        fixture
            .planner()
            .decide(&Envelope::task("x"), 3, Err(AgentError::retryable("down")));
    let kinds: Vec<_> = events(&plan).into_iter().map(|e| e.0).collect();
    assert_eq!(kinds, [EventType::DeadLettered, EventType::Escalated]);
    assert_eq!(dead_letters(&plan)[0].reason, DeadLetterReason::MaxAttempts);
    assert_eq!(envelopes(&plan)[0].to.as_deref(), Some("human"));
    assert_eq!(plan.settle, Settle::Term);
}

#[test]
fn fatal_dead_letters_at_once() {
    let fixture = Fixture::new("orders", None);
    let plan = fixture.planner().decide(
        &Envelope::task("x"),
        1,
        Err(AgentError::fatal("no such order")),
    );
    assert_eq!(dead_letters(&plan)[0].reason, DeadLetterReason::Fatal);
    assert_eq!(events(&plan).last().unwrap().0, EventType::Failed);
    assert_eq!(plan.settle, Settle::Term);
}

#[test]
fn reject_emits_rejected_then_routes_to_the_fallback() {
    let fixture = Fixture::new("orders", Some("human"));
    let plan = fixture.planner().decide(
        &Envelope::task("x"),
        1,
        Err(AgentError::reject("overloaded")),
    );
    let kinds: Vec<_> = events(&plan).into_iter().map(|e| e.0).collect();
    assert_eq!(kinds, [EventType::Rejected, EventType::Escalated]);
    assert_eq!(envelopes(&plan)[0].reason, Some(Reason::Rejected));
}

#[test]
fn escalate_goes_to_the_fallback_with_the_reason() {
    let fixture = Fixture::new("general", Some("human"));
    let outcome = Outcome::escalate(Reason::UserEscalation).say("getting a person");
    let plan = fixture
        .planner()
        .decide(&Envelope::task("x"), 1, ok(outcome));
    assert_eq!(
        events(&plan),
        vec![(
            EventType::Escalated,
            Some("human".into()),
            Some(Reason::UserEscalation)
        )]
    );
    let next = envelopes(&plan)[0];
    assert_eq!(next.context.messages.last().unwrap(), &{
        let mut m = Message::new(Role::Agent, "getting a person").with_name("general");
        m.at = next.context.messages.last().unwrap().at;
        m
    });
}

#[test]
fn escalate_without_a_fallback_fails_with_no_route() {
    let fixture = Fixture::new("general", None);
    let plan = fixture.planner().decide(
        &Envelope::task("x"),
        1,
        ok(Outcome::escalate(Reason::UserEscalation)),
    );
    assert_eq!(dead_letters(&plan)[0].reason, DeadLetterReason::NoRoute);
    assert_eq!(
        events(&plan).last().unwrap(),
        &(EventType::Failed, None, Some(Reason::UserEscalation))
    );
}

#[test]
fn a_parent_that_is_not_an_agent_type_is_refused_with_a_reason() {
    let fixture = Fixture::new("general", None);
    let mut envelope = Envelope::task("x");
    envelope.kind = Kind::Delegate;
    envelope.parent = Some(baton_proto::Parent {
        id: Uuid::new_v4(),
        agent: baton_proto::AgentName::unchecked("Not Valid"),
        depth: 1,
        index: Some(0),
        assignment: None,
        extra: baton_proto::Map::new(),
    });
    let plan = fixture.planner().refuse(&envelope, 0).unwrap();
    assert_eq!(dead_letters(&plan)[0].reason, DeadLetterReason::Malformed);
    assert!(dead_letters(&plan)[0].detail.contains("Not Valid"));
    // The session ends: a terminal event, not a result nobody can receive.
    assert_eq!(
        events(&plan).last().unwrap(),
        &(
            EventType::Failed,
            None,
            Some(Reason::from(&DeadLetterReason::Malformed))
        )
    );
    assert!(envelopes(&plan).is_empty());
    assert_eq!(plan.settle, Settle::Term);
}

#[test]
fn deadlines_are_checked_before_running() {
    let fixture = Fixture::new("general", None);
    let envelope = Envelope::task("x").with_deadline(1_000);
    assert!(fixture.planner().refuse(&envelope, 1_000).is_none());
    let plan = fixture.planner().refuse(&envelope, 1_500).unwrap();
    assert_eq!(
        dead_letters(&plan)[0].reason,
        DeadLetterReason::DeadlineExceeded
    );
    assert_eq!(
        events(&plan).last().unwrap(),
        &(EventType::Failed, None, Some(Reason::DeadlineExceeded))
    );
    assert_eq!(plan.settle, Settle::Term);
    assert!(
        fixture
            .planner()
            .refuse(&Envelope::task("x"), u64::MAX)
            .is_none()
    );
}

fn found(agent: &str) -> Lookup {
    Lookup::Candidate(name(agent))
}

#[test]
fn lookups_exclude_the_path_and_this_agent() {
    let fixture = Fixture::new("triage", Some("human"));
    let mut envelope = Envelope::task("x");
    envelope.path = vec![hop("entry"), hop("triage"), hop("entry")];
    envelope.requires = vec!["billing".into()];
    let planner = fixture.planner();

    let outcome = ok(Outcome::handoff(
        Need::capabilities(["refunds"])
            .in_domains(["retail"])
            .min_tier(2),
        Reason::KnowledgeGap,
    ));
    let request = planner.lookup_for(&envelope, outcome).unwrap();
    assert_eq!(request.requires, ["refunds"]);
    assert_eq!(request.domains, ["retail"]);
    assert_eq!(request.min_tier, Some(2));
    assert_eq!(request.exclude, ["entry", "triage"]);

    // Escalations ask for at least one tier above this agent's (tier 1 here).
    let escalate = ok(Outcome::escalate(Reason::UserEscalation));
    let request = planner.lookup_for(&envelope, escalate).unwrap();
    assert_eq!(request.min_tier, Some(2));
    assert!(request.requires.is_empty());
    let escalate = ok(Outcome::escalate_to(
        Need::capabilities(["human"]).min_tier(3),
        Reason::UserEscalation,
    ));
    let request = planner.lookup_for(&envelope, escalate).unwrap();
    assert_eq!(
        (request.min_tier, request.requires),
        (Some(3), vec!["human".to_owned()])
    );

    // A rejection looks again for what the task requires.
    let request = planner
        .lookup_for(&envelope, Err(AgentError::reject("busy")))
        .unwrap();
    assert_eq!(request.requires, ["billing"]);

    // Named targets, the fallback, completions and failures need no lookup.
    for result in [
        ok(Outcome::handoff(name("refund"), Reason::OutOfScope)),
        ok(Outcome::fallback(Reason::UserEscalation)),
        ok(Outcome::complete("done")),
        Err(AgentError::retryable("x")),
        Err(AgentError::fatal("x")),
    ] {
        let text = format!("{result:?}");
        assert!(planner.lookup_for(&envelope, result).is_none(), "{text}");
    }
}

#[test]
fn a_capability_target_goes_to_the_agent_the_registry_found() {
    let fixture = Fixture::new("general", Some("human"));
    let outcome = Outcome::handoff(Need::capabilities(["refunds"]), Reason::KnowledgeGap)
        .say("over to refunds");
    let plan =
        fixture
            .planner()
            .decide_found(&Envelope::task("x"), 1, ok(outcome), found("refund"));
    assert_eq!(
        events(&plan),
        vec![(
            EventType::Handoff,
            Some("refund".into()),
            Some(Reason::KnowledgeGap)
        )]
    );
    let next = envelopes(&plan)[0];
    assert_eq!(next.to.as_deref(), Some("refund"));
    assert_eq!(
        next.requires,
        ["refunds"],
        "kept, so a rejection can re-route"
    );
    assert_eq!(
        next.context.messages.last().unwrap().content,
        "over to refunds"
    );
}

#[test]
fn no_candidate_goes_to_the_fallback_with_no_match_or_fails_with_no_route() {
    let outcome = || {
        ok(Outcome::handoff(
            Need::capabilities(["teleport"]),
            Reason::OutOfScope,
        ))
    };
    let none = Lookup::Nobody("no live agent offers capabilities [teleport]".to_owned());

    let with = Fixture::new("general", Some("human"));
    let plan = with
        .planner()
        .decide_found(&Envelope::task("x"), 1, outcome(), none.clone());
    assert_eq!(
        events(&plan),
        vec![(
            EventType::Escalated,
            Some("human".into()),
            Some(Reason::NoMatch)
        )]
    );
    assert_eq!(envelopes(&plan)[0].reason, Some(Reason::NoMatch));
    assert_eq!(plan.settle, Settle::Ack);

    let without = Fixture::new("general", None);
    let plan = without
        .planner()
        .decide_found(&Envelope::task("x"), 1, outcome(), none);
    assert_eq!(dead_letters(&plan)[0].reason, DeadLetterReason::NoRoute);
    let last = events(&plan).pop().unwrap();
    assert_eq!(last, (EventType::Failed, None, Some(Reason::NoRoute)));
    assert!(plan.failed);

    // A worker without a registry cannot resolve a capability target at all.
    let plan = without
        .planner()
        .decide_found(&Envelope::task("x"), 1, outcome(), Lookup::NotAsked);
    let Some(Output::Event(failed)) = plan.outputs.last() else {
        panic!("no failed event")
    };
    assert!(
        failed
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("the worker has no registry"),
        "{:?}",
        failed.detail
    );
}

#[test]
fn a_found_escalation_is_announced_as_escalated_to_that_agent() {
    let fixture = Fixture::new("general", Some("human"));
    let plan = fixture.planner().decide_found(
        &Envelope::task("x"),
        1,
        ok(Outcome::escalate(Reason::UserEscalation)),
        found("expert"),
    );
    assert_eq!(
        events(&plan),
        vec![(
            EventType::Escalated,
            Some("expert".into()),
            Some(Reason::UserEscalation)
        )]
    );
    assert_eq!(envelopes(&plan)[0].to.as_deref(), Some("expert"));

    // Nothing of a higher tier: the fallback, with the original reason.
    let plan = fixture.planner().decide_found(
        &Envelope::task("x"),
        1,
        ok(Outcome::escalate(Reason::UserEscalation)),
        Lookup::Nobody("nothing above tier 1".into()),
    );
    assert_eq!(
        events(&plan),
        vec![(
            EventType::Escalated,
            Some("human".into()),
            Some(Reason::UserEscalation)
        )]
    );
}

#[test]
fn a_rejection_is_rerouted_to_the_agent_the_registry_found() {
    let fixture = Fixture::new("picky", Some("human"));
    let plan = fixture.planner().decide_found(
        &Envelope::task("x"),
        1,
        Err(AgentError::reject("not my kind of work")),
        found("willing"),
    );
    assert_eq!(
        events(&plan),
        vec![
            (EventType::Rejected, None, Some(Reason::Rejected)),
            (
                EventType::Handoff,
                Some("willing".into()),
                Some(Reason::Rejected)
            ),
        ]
    );
    let next = envelopes(&plan)[0];
    assert_eq!(next.to.as_deref(), Some("willing"));
    assert_eq!(next.path.last().unwrap().agent, "picky");
    assert_eq!(plan.settle, Settle::Ack);
}

#[test]
fn a_found_agent_still_counts_against_the_hop_budget() {
    let fixture = Fixture::new("c", Some("human"));
    let mut envelope = Envelope::task("x").with_max_hops(2);
    envelope.path = vec![hop("a"), hop("b")];
    let plan = fixture.planner().decide_found(
        &envelope,
        1,
        ok(Outcome::handoff(
            Need::capabilities(["x"]),
            Reason::OutOfScope,
        )),
        found("d"),
    );
    let kinds: Vec<_> = events(&plan).into_iter().map(|e| e.0).collect();
    assert_eq!(kinds, [EventType::LoopDetected, EventType::Escalated]);
}

#[test]
fn a_declared_visit_budget_allows_a_bounded_cycle_then_the_guard_fires() {
    let fixture = Fixture::new("reviewer", Some("human"));
    let mut envelope = Envelope::task("x");
    // planner -> reviewer -> planner -> reviewer(now): planner has 2 visits.
    envelope.path = vec![hop("planner"), hop("reviewer"), hop("planner")];
    let back = || Outcome::handoff(name("planner"), Reason::parse("feedback"));

    let plan = fixture
        .planner()
        .decide(&envelope, 1, ok(back().max_visits(3)));
    assert_eq!(envelopes(&plan)[0].to.as_deref(), Some("planner"));

    let plan = fixture
        .planner()
        .decide(&envelope, 1, ok(back().max_visits(2)));
    let Output::Event(detected) = &plan.outputs[0] else {
        panic!("no event")
    };
    assert_eq!(detected.kind, EventType::LoopDetected);
    assert!(
        detected
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("already had 2 of its 2 visits"),
        "{:?}",
        detected.detail
    );

    // Without a declaration a revisit is refused as before.
    let plan = fixture.planner().decide(&envelope, 1, ok(back()));
    assert_eq!(events(&plan)[0].0, EventType::LoopDetected);
}

#[test]
fn a_context_policy_trims_messages_and_records_what_it_removed() {
    let fixture = Fixture::new("triage", None);
    let mut envelope = Envelope::task("first question");
    for n in 0..4 {
        envelope
            .context
            .messages
            .push(Message::new(Role::User, format!("message {n}")));
    }
    let outcome = |policy| {
        ok(Outcome::handoff(name("next"), Reason::OutOfScope)
            .say("handing over")
            .context_policy(policy))
    };
    let plan = fixture
        .planner()
        .decide(&envelope, 1, outcome(ContextPolicy::LastN(2)));
    let next = envelopes(&plan)[0];
    let contents: Vec<_> = next
        .context
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(contents, ["message 3", "handing over"]);
    let step = next.context.trace.last().unwrap();
    assert_eq!(step.action, "context_trimmed");
    assert_eq!(step.agent.as_deref(), Some("triage"));
    let details = step.details.as_map().unwrap();
    let get = |key: &str| {
        details
            .iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .unwrap()
            .1
            .clone()
    };
    assert_eq!(get("removed"), Value::from(4));
    assert_eq!(get("kept"), Value::from(2));
    let digest = get("digest");
    assert!(digest.as_str().unwrap().starts_with("sha256:"));
    assert_eq!(digest.as_str().unwrap().len(), "sha256:".len() + 64);

    // The same removal gives the same digest; different messages another.
    let again = fixture
        .planner()
        .decide(&envelope, 1, outcome(ContextPolicy::LastN(2)));
    let again_step = envelopes(&again)[0].context.trace.last().unwrap().clone();
    assert_eq!(again_step.details, step.details);

    let plan = fixture
        .planner()
        .decide(&envelope, 1, outcome(ContextPolicy::None));
    let next = envelopes(&plan)[0];
    assert!(next.context.messages.is_empty());
    let none_step = next.context.trace.last().unwrap();
    assert_ne!(none_step.details, step.details);

    let plan = fixture
        .planner()
        .decide(&envelope, 1, outcome(ContextPolicy::Full));
    let next = envelopes(&plan)[0];
    assert_eq!(next.context.messages.len(), 6);
    assert!(
        next.context
            .trace
            .iter()
            .all(|s| s.action != "context_trimmed")
    );
}

#[test]
fn waiting_acks_with_a_waiting_event_and_no_terminal_event() {
    let fixture = Fixture::new("human", None);
    let mut envelope = Envelope::task("x");
    envelope.reason = Some(Reason::UserEscalation);
    let plan = fixture.planner().decide(&envelope, 1, ok(Outcome::wait()));
    assert_eq!(plan.settle, Settle::Ack);
    assert_eq!(
        events(&plan),
        vec![(EventType::Waiting, None, Some(Reason::UserEscalation))]
    );
    assert!(!plan.failed);
}

#[test]
fn retry_after_waits_at_least_as_long_as_asked() {
    let fixture = Fixture::new("llm", None);
    let envelope = Envelope::task("x");
    let plan = fixture.planner().decide(
        &envelope,
        1,
        Err(AgentError::retry_after(
            "rate limited",
            Duration::from_secs(7),
        )),
    );
    assert_eq!(plan.settle, Settle::Nak(Duration::from_secs(7)));
    // A shorter request than the backoff does not shorten it.
    let plan = fixture.planner().decide(
        &envelope,
        2,
        Err(AgentError::retry_after(
            "rate limited",
            Duration::from_millis(1),
        )),
    );
    assert_eq!(plan.settle, Settle::Nak(Duration::from_millis(200)));
    // Exhausted, it is dead-lettered like any retryable failure.
    let plan = fixture.planner().decide(
        &envelope,
        3,
        Err(AgentError::retry_after(
            "rate limited",
            Duration::from_secs(7),
        )),
    );
    assert_eq!(dead_letters(&plan)[0].reason, DeadLetterReason::MaxAttempts);
}

#[test]
fn a_handoff_to_an_agent_type_nobody_serves_escalates_or_fails_with_no_route() {
    let outcome = || ok(Outcome::handoff(name("refnud"), Reason::KnowledgeGap));
    let unserved = Lookup::Nobody(baton_nats::nats::served::unserved(&name("refnud")));

    let with = Fixture::new("general", Some("human"));
    let plan = with
        .planner()
        .decide_found(&Envelope::task("x"), 1, outcome(), unserved.clone());
    assert_eq!(
        events(&plan),
        vec![(
            EventType::Escalated,
            Some("human".into()),
            Some(Reason::NoRoute)
        )]
    );
    assert_eq!(envelopes(&plan)[0].to.as_deref(), Some("human"));

    let without = Fixture::new("general", None);
    let plan = without
        .planner()
        .decide_found(&Envelope::task("x"), 1, outcome(), unserved);
    assert!(envelopes(&plan).is_empty(), "nothing goes to refnud");
    let dead = &dead_letters(&plan)[0];
    assert_eq!(dead.reason, DeadLetterReason::NoRoute);
    assert!(dead.detail.contains("\"refnud\""), "{}", dead.detail);
    assert_eq!(
        events(&plan).pop().unwrap(),
        (EventType::Failed, None, Some(Reason::NoRoute))
    );
}
