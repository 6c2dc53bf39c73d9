use super::*;

fn name(text: &str) -> AgentName {
    AgentName::new(text).unwrap()
}

#[test]
fn builders_fill_the_update() {
    let handoff = Outcome::handoff(name("refund"), Reason::KnowledgeGap)
        .say("over to refunds")
        .set_var("order", "ABC-123")
        .set_state("checked", true)
        .step("lookup", "found", "order exists")
        .next_action("check the refund window")
        .max_visits(2);
    assert_eq!(handoff.target, Target::Agent(name("refund")));
    assert_eq!(
        handoff.suggested_next_action.as_deref(),
        Some("check the refund window")
    );
    assert_eq!(handoff.options.max_visits, Some(2));
    let update = &handoff.update;
    assert_eq!(update.messages.len(), 1);
    assert_eq!(update.variables.get("order"), Some(&Value::from("ABC-123")));
    assert_eq!(update.state.get("checked"), Some(&Value::from(true)));
    assert_eq!(update.trace[0].action, "lookup");
}

#[test]
fn wait_keeps_what_it_says() {
    let mut outcome: Outcome = Outcome::wait().say("a person will answer").into();
    assert_eq!(
        outcome.update_mut().messages[0].content,
        "a person will answer"
    );
}

#[test]
fn a_chain_recovers_only_as_a_chain() {
    let Outcome::Delegate(delegation) = Outcome::chain([name("a"), name("b")], "go")
        .recover(Recover::Agent(name("fix")))
        .into()
    else {
        panic!("a chain is a delegation")
    };
    assert_eq!(delegation.children.len(), 2);
    assert_eq!(delegation.children[0].input, "go");
    assert_eq!(delegation.children[1].input, "");
    assert_eq!(
        delegation.mode,
        DelegateMode::Chain {
            recover: Some(Recover::Agent(name("fix")))
        }
    );
}

#[test]
fn errors_classify_with_question_mark() {
    let bad: Result<(), AgentError> = AgentName::new("Bad.Name").map(drop).map_err(Into::into);
    assert!(matches!(bad, Err(AgentError::Fatal(text)) if text.contains("Bad.Name")));
    let io: Result<(), std::io::Error> = Err(std::io::Error::other("busy"));
    assert_eq!(io.retryable(), Err(AgentError::retryable("busy")));
}
