use baton_proto::{Outcome, OutcomeHop, OutcomeKind, features};
use rand::SeedableRng;
use uuid::Uuid;

use super::*;

fn hop(agent: &str, requires: &[&str]) -> OutcomeHop {
    OutcomeHop {
        agent: baton_proto::AgentName::unchecked(agent),
        requires: requires.iter().map(|c| (*c).to_owned()).collect(),
        domains: Vec::new(),
    }
}

fn end(session: Uuid, kind: OutcomeKind, path: &[OutcomeHop], query: &str) -> Outcome {
    let mut outcome = Outcome::new(Uuid::new_v4(), session, kind);
    outcome.path = path.to_vec();
    outcome.features = features(query);
    outcome
}

fn rng() -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(7)
}

#[test]
fn the_estimate_follows_the_recent_outcomes_and_keeps_its_uncertainty() {
    let mut learner = Learner::new(LearningConfig::default());
    let path = [
        hop("front", &[]),
        hop("solver", &["solve"]),
        hop("checker", &[]),
    ];
    let (learned, _) = learner.estimate(
        "solve",
        &baton_proto::AgentName::from_static("solver"),
        &[],
        &mut rng(),
    );
    assert_eq!(learned.observations, 0);
    assert!(
        (learned.mean - 0.5).abs() < 1e-9,
        "nothing known: Beta(1, 1)"
    );
    for n in 0..10 {
        let kind = if n < 8 {
            OutcomeKind::Completed
        } else {
            OutcomeKind::Escalated
        };
        learner.apply(&end(Uuid::new_v4(), kind, &path, "q"));
    }
    let (learned, _) = learner.estimate(
        "solve",
        &baton_proto::AgentName::from_static("solver"),
        &[],
        &mut rng(),
    );
    assert_eq!(learned.observations, 10);
    // 8 resolved (instant and free: reward 1) + 1 over 10 + 2.
    assert!((learned.mean - 0.75).abs() < 1e-9, "{learned:?}");
    assert!(learned.sd > 0.1 && learned.sd < 0.15, "{learned:?}");
    // 40 more failures: only the last 30 (the window) count.
    for _ in 0..40 {
        learner.apply(&end(Uuid::new_v4(), OutcomeKind::Failed, &path, "q"));
    }
    let (learned, _) = learner.estimate(
        "solve",
        &baton_proto::AgentName::from_static("solver"),
        &[],
        &mut rng(),
    );
    assert_eq!(learned.observations, 30);
    assert!((learned.mean - 1.0 / 32.0).abs() < 1e-9, "{learned:?}");
    // Credited under the kind of work it was chosen for, not under others.
    let (other, _) = learner.estimate(
        "",
        &baton_proto::AgentName::from_static("solver"),
        &[],
        &mut rng(),
    );
    assert_eq!(other.observations, 0);
}

#[test]
fn feedback_and_reopening_replace_what_a_session_was_credited() {
    let mut learner = Learner::new(LearningConfig::default());
    let session = Uuid::new_v4();
    let path = [hop("front", &[]), hop("solver", &["solve"])];
    learner.apply(&end(session, OutcomeKind::Completed, &path, "q"));
    let book = learner.notebook(&baton_proto::AgentName::from_static("front"));
    assert_eq!(book.sessions, 1);
    assert_eq!(book.collaborators[0].agent, "solver");
    assert_eq!(book.collaborators[0].resolved, 1);

    let mut feedback = Outcome::new(Uuid::new_v4(), session, OutcomeKind::Feedback);
    feedback.score = Some(0.2);
    feedback.note = Some("wrong refund amount".into());
    learner.apply(&feedback);
    let (learned, _) = learner.estimate(
        "solve",
        &baton_proto::AgentName::from_static("solver"),
        &[],
        &mut rng(),
    );
    assert_eq!(learned.observations, 1, "replaced, not added");
    let entry = &learner
        .notebook(&baton_proto::AgentName::from_static("solver"))
        .collaborators[0];
    assert_eq!(
        (entry.agent.as_str(), entry.sessions, entry.feedback),
        ("front", 1, 1)
    );
    assert_eq!(entry.feedback_score, Some(0.2));
    assert!((entry.reward - 0.2).abs() < 1e-9, "{entry:?}");
    // Marked wrong, it is no longer resolved (baton_proto::succeeded).
    assert_eq!(entry.resolved, 0, "{entry:?}");

    learner.apply(&Outcome::new(
        Uuid::new_v4(),
        session,
        OutcomeKind::Reopened,
    ));
    let entry = &learner
        .notebook(&baton_proto::AgentName::from_static("solver"))
        .collaborators[0];
    assert_eq!((entry.sessions, entry.reopened), (1, 1));

    // Feedback read before its session's end counts once the end is read.
    let late = Uuid::new_v4();
    let mut early = Outcome::new(Uuid::new_v4(), late, OutcomeKind::Feedback);
    early.score = Some(0.5);
    learner.apply(&early);
    assert_eq!(
        learner
            .notebook(&baton_proto::AgentName::from_static("solver"))
            .sessions,
        1,
        "nothing to credit yet"
    );
    learner.apply(&end(late, OutcomeKind::Completed, &path, "q"));
    let entry = &learner
        .notebook(&baton_proto::AgentName::from_static("solver"))
        .collaborators[0];
    assert_eq!((entry.sessions, entry.feedback), (2, 2));
    assert!(!learner.knows_agent("nobody"));
}

#[test]
fn similar_past_sessions_vote_for_the_agent_that_resolved_them() {
    let mut learner = Learner::new(LearningConfig::default());
    for n in 0..6 {
        let refunds = end(
            Uuid::new_v4(),
            OutcomeKind::Completed,
            &[hop("general", &["help"])],
            &format!("please refund my order {n}"),
        );
        learner.apply(&refunds);
        let weather = end(
            Uuid::new_v4(),
            OutcomeKind::Failed,
            &[hop("general", &["help"])],
            &format!("what is the weather in town {n}"),
        );
        learner.apply(&weather);
    }
    let asked = features("refund my order 9 please");
    let near = learner.neighbours("help", &asked);
    let (learned, similar) = learner.estimate(
        "help",
        &baton_proto::AgentName::from_static("general"),
        &near,
        &mut rng(),
    );
    assert_eq!(similar.len(), 5, "{similar:?}");
    assert!(similar.iter().all(|s| s.reward > 0.9), "{similar:?}");
    assert!(learned.votes > 1.0, "{learned:?}");
    let near = learner.neighbours("help", &features("weather in town 9"));
    let (weather, _) = learner.estimate(
        "help",
        &baton_proto::AgentName::from_static("general"),
        &near,
        &mut rng(),
    );
    assert!(learned.mean > weather.mean + 0.2, "{learned:?} {weather:?}");
}

#[test]
fn learning_ranks_only_once_the_candidates_have_enough_outcomes() {
    use crate::{AgentSummary, MIN_EVIDENCE, rank_learned};
    let summary = |name: &str| AgentSummary {
        agent: baton_proto::AgentName::unchecked(name),
        tier: 1,
        capabilities: vec!["solve".into()],
        instances: 1,
        capacity: 4,
        ..AgentSummary::new(baton_proto::AgentName::from_static("unnamed"))
    };
    let agents = [summary("alpha"), summary("beta")];
    let request = baton_proto::LookupRequest {
        requires: vec!["solve".into()],
        ..baton_proto::LookupRequest::default()
    };
    let mut learner = Learner::new(LearningConfig::default());
    let path = [hop("alpha", &["solve"])];
    for n in 0..MIN_EVIDENCE {
        let ranked = rank_learned(&agents, &request, &learner, &mut rng());
        assert_eq!(ranked[0].agent, "alpha", "ties go to the name until then");
        assert!(
            ranked[0].why.as_ref().unwrap().learned.is_none(),
            "after {n}"
        );
        learner.apply(&end(Uuid::new_v4(), OutcomeKind::Escalated, &path, "q"));
    }
    // alpha escalated five times: beta, untried, is drawn above it nearly always.
    let mut beta = 0;
    let mut rng = rng();
    for _ in 0..100 {
        let ranked = rank_learned(&agents, &request, &learner, &mut rng);
        assert!(ranked[0].why.as_ref().unwrap().learned.is_some());
        beta += usize::from(ranked[0].agent == "beta");
    }
    assert!(beta >= 75, "beta first in {beta} of 100");
    // Off: today's ranking whatever was learned.
    let mut off = Learner::new(LearningConfig {
        enabled: false,
        ..LearningConfig::default()
    });
    for _ in 0..MIN_EVIDENCE {
        off.apply(&end(Uuid::new_v4(), OutcomeKind::Escalated, &path, "q"));
    }
    for _ in 0..20 {
        assert_eq!(
            rank_learned(&agents, &request, &off, &mut rng)[0].agent,
            "alpha"
        );
    }
}

#[test]
fn features_a_client_sends_unsorted_vote_as_the_text_would() {
    use crate::{AgentSummary, rank_learned};
    let agent = AgentSummary {
        agent: baton_proto::AgentName::from_static("general"),
        tier: 1,
        capabilities: vec!["help".into()],
        instances: 1,
        capacity: 4,
        ..AgentSummary::new(baton_proto::AgentName::from_static("unnamed"))
    };
    let mut learner = Learner::new(LearningConfig::default());
    for n in 0..6 {
        let path = [hop("general", &["help"])];
        learner.apply(&end(
            Uuid::new_v4(),
            OutcomeKind::Completed,
            &path,
            &format!("refund order {n}"),
        ));
    }
    let mut reversed = features("refund order 9");
    reversed.reverse();
    reversed.push(reversed[0]);
    let by_text = baton_proto::LookupRequest {
        requires: vec!["help".into()],
        query: Some("refund order 9".into()),
        ..baton_proto::LookupRequest::default()
    };
    let by_features = baton_proto::LookupRequest {
        query: None,
        features: reversed,
        ..by_text.clone()
    };
    let similar = |request| {
        let ranked = rank_learned([&agent], &request, &learner, &mut rng());
        ranked[0].why.clone().unwrap().similar
    };
    let (a, b) = (similar(by_text), similar(by_features));
    assert_eq!(a.len(), 5);
    assert_eq!(a, b);
}
