use baton_proto::AgentName;

use super::*;
use crate::policy::ContextPolicy;

fn name(agent: &str) -> AgentName {
    AgentName::new(agent).unwrap()
}

fn to(agent: &str) -> Route {
    Route::to(name(agent))
}

fn rules() -> Routing {
    Routing {
        handoffs: vec![Route {
            options: RouteOptions {
                max_visits: Some(4),
                context: ContextPolicy::Full,
            },
            ..to("engineer")
        }],
        conditions: vec![
            Condition::new("n_attempts >= max_n_attempts", to("terminator")).unwrap(),
            Condition::new("status == 'failed'", to("engineer")).unwrap(),
        ],
        llm_conditions: vec![LlmCondition {
            condition: "the user wants a refund".into(),
            route: to("refund"),
        }],
        after_work: Some(to("control")),
    }
}

fn envelope(vars: &[(&str, Value)]) -> Envelope {
    let mut envelope = Envelope::task("x");
    for (k, v) in vars {
        envelope
            .context
            .variables
            .insert((*k).to_owned(), v.clone());
    }
    envelope
}

fn decide(rules: &Routing, envelope: &Envelope, outcome: impl Into<Outcome>) -> Decided {
    Routing::decide(Some(rules), envelope, outcome.into())
}

fn handoff(decided: &Decided) -> Option<(Target, Reason)> {
    match decided {
        Decided::Step(Step::Handoff(handoff)) => {
            Some((handoff.target.clone(), handoff.reason.clone()))
        }
        _ => None,
    }
}

#[test]
fn a_function_driven_handoff_overrides_every_rule() {
    let env = envelope(&[("n_attempts", 3.into()), ("max_n_attempts", 3.into())]);
    let decided = decide(
        &rules(),
        &env,
        Outcome::handoff(name("engineer"), Reason::ToolFailure),
    );
    assert_eq!(
        handoff(&decided),
        Some((Target::Agent(name("engineer")), Reason::ToolFailure))
    );
    // It takes the declared target's options.
    let Decided::Step(Step::Handoff(handoff)) = decided else {
        panic!("not a handoff")
    };
    assert_eq!(handoff.options.max_visits, Some(4));
}

#[test]
fn a_context_condition_overrides_llm_conditions_and_after_work() {
    let env = envelope(&[("n_attempts", 3.into()), ("max_n_attempts", 3.into())]);
    let decided = decide(&rules(), &env, Outcome::answer(Value::Nil).judged(0));
    assert_eq!(
        handoff(&decided),
        Some((Target::Agent(name("terminator")), Reason::ContextCondition))
    );
    // Conditions are tried in order, and see the agent's own updates.
    let env = envelope(&[("n_attempts", 1.into()), ("max_n_attempts", 3.into())]);
    let decided = decide(
        &rules(),
        &env,
        Outcome::answer(Value::Nil).set_var("status", "failed"),
    );
    assert_eq!(
        handoff(&decided),
        Some((Target::Agent(name("engineer")), Reason::ContextCondition))
    );
}

#[test]
fn an_llm_condition_overrides_after_work() {
    let env = envelope(&[("n_attempts", 1.into()), ("max_n_attempts", 3.into())]);
    let decided = decide(&rules(), &env, Outcome::answer(Value::Nil).judged(0));
    assert_eq!(
        handoff(&decided),
        Some((Target::Agent(name("refund")), Reason::LlmCondition))
    );
}

#[test]
fn after_work_overrides_completion_and_nothing_completes() {
    let env = envelope(&[]);
    let decided = decide(&rules(), &env, Outcome::answer("done"));
    assert_eq!(
        handoff(&decided),
        Some((Target::Agent(name("control")), Reason::AfterWork))
    );
    for decided in [
        decide(&Routing::default(), &env, Outcome::answer("done")),
        Routing::decide(None, &env, Outcome::answer("done").into()),
    ] {
        assert!(
            matches!(decided, Decided::Step(Step::Complete(c)) if c.output == Value::from("done"))
        );
    }
    let terminate = Routing {
        after_work: Some(Route::terminate()),
        ..Routing::default()
    };
    let decided = decide(&terminate, &env, Outcome::answer("done"));
    assert!(matches!(decided, Decided::Step(Step::Complete(_))));
}

#[test]
fn an_explicit_completion_ignores_the_rules() {
    let env = envelope(&[("n_attempts", 3.into()), ("max_n_attempts", 3.into())]);
    let decided = decide(&rules(), &env, Outcome::complete("final"));
    assert!(
        matches!(decided, Decided::Step(Step::Complete(c)) if c.output == Value::from("final"))
    );
}

#[test]
fn missing_variables_and_non_booleans_are_false() {
    let condition = Condition::new("feedback_left > 0", to("planner")).unwrap();
    assert!(!condition.holds(&Map::new()));
    let mut vars = Map::new();
    vars.insert("feedback_left".into(), Value::from(2));
    assert!(condition.holds(&vars));
    vars.insert("feedback_left".into(), Value::from(0));
    assert!(!condition.holds(&vars));
    let not_bool = Condition::new("feedback_left + 1", to("planner")).unwrap();
    assert!(!not_bool.holds(&vars));
    let err = Condition::new("feedback_left >", to("planner")).unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::Condition);
    assert!(
        err.to_string()
            .starts_with("invalid condition \"feedback_left >\": "),
        "{err}"
    );
}

#[test]
fn conditions_read_strings_floats_lists_and_maps() {
    let mut vars = Map::new();
    vars.insert("plan".into(), Value::Array(vec!["a".into(), "b".into()]));
    vars.insert("score".into(), Value::F64(0.75));
    vars.insert(
        "user".into(),
        Value::Map(vec![("tier".into(), Value::from("gold"))]),
    );
    for (expression, expected) in [
        ("size(plan) == 2", true),
        ("score > 0.5", true),
        ("user.tier == 'gold'", true),
        ("'c' in plan", false),
    ] {
        let condition = Condition::new(expression, to("x")).unwrap();
        assert_eq!(condition.holds(&vars), expected, "{expression}");
    }
}
