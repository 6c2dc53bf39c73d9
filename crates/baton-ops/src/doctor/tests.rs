//! The checks over hand-made facts: what each finds, and that a healthy
//! deployment finds nothing to fix. `tests/e2e/operations/doctor.rs` runs them on real
//! servers.

use std::collections::BTreeMap;
use std::time::Duration;

use super::checks::{self, Finding, Level};
use super::facts::{ConsumerFacts, Facts, ServerFacts, StreamFacts, Sync};

fn server(name: &str) -> ServerFacts {
    ServerFacts {
        name: name.to_owned(),
        version: "2.15.1".to_owned(),
        jetstream: true,
        max_payload: 1024 * 1024,
        sync: Sync::Always,
    }
}

fn stream(name: &str, replicas: usize) -> StreamFacts {
    StreamFacts {
        name: name.to_owned(),
        replicas,
        duplicate_window: Duration::from_secs(630),
        deduplicated: true,
        lagging: Vec::new(),
    }
}

fn consumer(agent: &str, last_active: i64) -> ConsumerFacts {
    ConsumerFacts {
        name: format!("agent-{agent}"),
        agent: Some(agent.to_owned()),
        ack_wait: Duration::from_secs(30),
        max_deliver: 21,
        waiting: 1,
        pending: 0,
        last_active,
    }
}

fn healthy() -> Facts {
    Facts {
        servers: vec![server("n1"), server("n2"), server("n3")],
        streams: vec![stream("BATON_TASKS", 3), stream("BATON_EVENTS", 3)],
        tasks_stream: "BATON_TASKS".to_owned(),
        consumers: vec![consumer("triage", 1_000)],
        live: Some(BTreeMap::from([("triage".to_owned(), 2)])),
        stale_after: Duration::from_secs(3600),
        now: 10_000,
        ..Facts::default()
    }
}

/// The findings that need action, as (check, level, subject).
fn problems(facts: &Facts) -> Vec<(&'static str, Level, String)> {
    checks::all(facts)
        .into_iter()
        .filter(|f: &Finding| f.level >= Level::Warn)
        .map(|f| (f.check, f.level, f.subject))
        .collect()
}

#[test]
fn a_healthy_cluster_has_nothing_to_fix() {
    let findings = checks::all(&healthy());
    assert!(
        findings.iter().all(|f| f.level == Level::Ok),
        "{findings:#?}"
    );
    let checks: Vec<_> = findings.iter().map(|f| f.check).collect();
    assert_eq!(
        checks,
        [
            "servers",
            "replicas",
            "dedup",
            "payload",
            "fsync",
            "consumers"
        ]
    );
}

#[test]
fn old_servers_and_servers_without_jetstream_are_errors() {
    let mut facts = healthy();
    facts.servers[0].version = "2.9.25".to_owned();
    facts.servers[1].jetstream = false;
    facts.unreachable = vec!["127.0.0.1:4299".to_owned()];
    let found = problems(&facts);
    assert!(
        found.contains(&("servers", Level::Error, "n1".to_owned())),
        "{found:?}"
    );
    assert!(
        found.contains(&("servers", Level::Error, "n2".to_owned())),
        "{found:?}"
    );
    assert!(
        found.contains(&("servers", Level::Error, "127.0.0.1:4299".to_owned())),
        "{found:?}"
    );
    assert_eq!(checks::major_minor("v2.11.0-RC.1"), Some((2, 11)));
    assert_eq!(checks::major_minor("2.10.0"), Some((2, 10)));
    assert_eq!(checks::major_minor("garbage"), None);
}

#[test]
fn single_replica_streams_on_a_cluster_and_more_replicas_than_nodes() {
    let mut facts = healthy();
    facts.streams[0].replicas = 1;
    facts.streams.push(stream("KV_BATON_JOINS", 5));
    facts.streams[1].lagging = vec!["n3".to_owned()];
    let found = problems(&facts);
    assert_eq!(
        found,
        [
            ("replicas", Level::Warn, "BATON_TASKS".to_owned()),
            ("replicas", Level::Warn, "BATON_EVENTS".to_owned()),
            ("replicas", Level::Error, "KV_BATON_JOINS".to_owned()),
        ]
    );
    let fix = checks::all(&facts)
        .into_iter()
        .find(|f| f.subject == "BATON_TASKS")
        .and_then(|f| f.fix);
    assert!(fix.is_some_and(|fix| fix.contains("--replicas 3")));
    // One replica is right on a single server.
    let mut single = healthy();
    single.servers.truncate(1);
    single.streams = vec![stream("BATON_TASKS", 1)];
    assert!(problems(&single).is_empty(), "{:?}", problems(&single));
}

#[test]
fn a_duplicate_window_shorter_than_the_redeliveries_is_named_with_the_span() {
    let mut facts = healthy();
    facts.streams[1].duplicate_window = Duration::from_secs(120);
    let mut slow = consumer("writer", 9_000);
    slow.ack_wait = Duration::from_secs(60);
    facts.consumers.push(slow);
    facts
        .live
        .as_mut()
        .map(|live| live.insert("writer".to_owned(), 1));
    let findings = checks::all(&facts);
    let flagged: Vec<_> = findings.iter().filter(|f| f.level == Level::Warn).collect();
    // 60 s × 21 = 21 min, longer than both windows.
    assert_eq!(flagged.len(), 2, "{findings:#?}");
    assert!(flagged[0].message.contains("21m") && flagged[0].message.contains("agent-writer"));
    let mut unlimited = healthy();
    unlimited.consumers[0].max_deliver = -1;
    assert_eq!(
        problems(&unlimited),
        [("dedup", Level::Warn, "agent-triage".to_owned())]
    );
}

#[test]
fn claim_threshold_at_or_over_max_payload_and_mixed_max_payloads() {
    let mut facts = healthy();
    facts.claim_threshold = Some(1024 * 1024);
    assert_eq!(problems(&facts), [("payload", Level::Error, String::new())]);
    let mut mixed = healthy();
    mixed.servers[2].max_payload = 8 * 1024 * 1024;
    assert_eq!(problems(&mixed), [("payload", Level::Warn, String::new())]);
}

#[test]
fn fsync_in_the_background_is_a_warning_and_an_unknown_setting_is_said() {
    let mut facts = healthy();
    facts.servers[1].sync = Sync::Every(Duration::from_secs(120));
    facts.servers[2].sync = Sync::Unknown;
    let findings = checks::all(&facts);
    let fsync: Vec<_> = findings.iter().filter(|f| f.check == "fsync").collect();
    assert_eq!(fsync.len(), 2, "{fsync:#?}");
    assert_eq!(
        (fsync[0].level, fsync[0].subject.as_str()),
        (Level::Warn, "n2")
    );
    assert!(
        fsync[0].message.contains("every 2m"),
        "{}",
        fsync[0].message
    );
    assert_eq!(
        (fsync[1].level, fsync[1].subject.as_str()),
        (Level::Info, "n3")
    );
}

#[test]
fn a_consumer_without_a_live_worker_for_long_is_stale() {
    let mut facts = healthy();
    let mut ghost = consumer("ghost", 10_000 - 7_200);
    ghost.waiting = 0;
    facts.consumers.push(ghost.clone());
    let mut fresh = consumer("fresh", 10_000 - 60);
    fresh.waiting = 0;
    facts.consumers.push(fresh);
    assert_eq!(
        problems(&facts),
        [("consumers", Level::Warn, "agent-ghost".to_owned())]
    );
    // With tasks waiting in it, nobody answers them: an error.
    facts.consumers[1].pending = 12;
    let found = checks::all(&facts);
    let stale = found
        .iter()
        .find(|f| f.subject == "agent-ghost")
        .expect("stale consumer");
    assert_eq!(stale.level, Level::Error);
    assert!(
        stale.message.contains("2h") && stale.message.contains("12 task(s)"),
        "{}",
        stale.message
    );
    // A worker the registry knows (or an idle pull) is live.
    facts
        .live
        .as_mut()
        .map(|live| live.insert("ghost".to_owned(), 1));
    assert!(problems(&facts).is_empty());
}

#[test]
fn durations_read_as_people_write_them() {
    assert_eq!(checks::human(Duration::from_secs(630)), "10m30s");
    assert_eq!(checks::human(Duration::from_secs(120)), "2m");
    assert_eq!(checks::human(Duration::from_secs(7_260)), "2h1m");
    assert_eq!(checks::human(Duration::from_secs(45)), "45s");
    assert_eq!(checks::human(Duration::from_millis(250)), "250ms");
}

#[test]
fn subjects_the_operator_role_uses_but_may_not_are_a_warning_with_the_fix() {
    let mut facts = healthy();
    assert!(problems(&facts).is_empty());
    facts.refused = (0..7)
        .map(|n| format!("$JS.API.STREAM.INFO.S{n}"))
        .collect();
    let found = checks::all(&facts);
    let rights = found
        .iter()
        .find(|f| f.check == "rights")
        .expect("a rights finding");
    assert_eq!(rights.level, Level::Warn);
    assert!(
        rights.message.contains("7 subject(s)")
            && rights.message.contains("$JS.API.STREAM.INFO.S0")
            && rights.message.contains("and 2 more"),
        "{}",
        rights.message
    );
    assert!(
        rights
            .fix
            .as_deref()
            .is_some_and(|fix| fix.contains("baton permissions operator"))
    );
}

#[test]
fn each_shared_rate_limit_is_shown_with_where_it_comes_from() {
    let mut facts = healthy();
    facts.limits = vec![
        crate::doctor::LimitFacts {
            endpoint: "https://api.example.com/v1".to_owned(),
            model: "m1".to_owned(),
            rate: 9.7,
            ceiling: 10.0,
            source: "headers".to_owned(),
            refused: 0,
            cut_at: 0,
            window: 8.0,
            in_flight: 2,
            headers: vec!["anthropic-ratelimit".to_owned(), "retry-after".to_owned()],
            ..Default::default()
        },
        crate::doctor::LimitFacts {
            endpoint: "http://local/v1".to_owned(),
            model: "m2".to_owned(),
            rate: 4.25,
            source: "adaptive".to_owned(),
            refused: 3,
            cut_at: 9_990,
            window: 2.0,
            ..Default::default()
        },
        crate::doctor::LimitFacts {
            endpoint: "http://fresh/v1".to_owned(),
            model: "m3".to_owned(),
            source: "adaptive".to_owned(),
            unpaced: true,
            window: 4.0,
            ..Default::default()
        },
    ];
    let lines: Vec<String> = checks::all(&facts)
        .into_iter()
        .filter(|f| f.check == "limits")
        .map(|f| {
            assert_eq!(f.level, Level::Info);
            f.message
        })
        .collect();
    assert_eq!(
        lines,
        [
            "model m1 at https://api.example.com/v1: 9.70 requests/s, under 10.00/s (headers the ceiling from the provider's anthropic-ratelimit, retry-after headers); window 8 in flight (2 now); headers heard: anthropic-ratelimit, retry-after; 0 call(s) refused with 429",
            "model m2 at http://local/v1: 4.25 requests/s (adaptive learned from the provider's 429s); window 2 in flight (0 now); no rate-limit headers heard; 3 call(s) refused with 429, the last 10s ago",
            "model m3 at http://fresh/v1: not paced (adaptive nothing known yet: slow start by the window in flight, no 429 so far); window 4 in flight (0 now); no rate-limit headers heard; 0 call(s) refused with 429",
        ]
    );
}

#[test]
fn a_version_with_pinned_work_and_no_worker_is_an_error_naming_the_version() {
    let mut facts = healthy();
    let mut pinned = consumer("triage@1", 1_000);
    (pinned.waiting, pinned.pending) = (0, 3);
    let mut drained = consumer("triage@0", 1_000);
    drained.waiting = 0;
    facts.consumers.extend([pinned, drained]);
    facts.live = Some(BTreeMap::from([
        ("triage".to_owned(), 2),
        ("triage@2".to_owned(), 2),
    ]));
    let found = checks::all(&facts);
    let pinned = found
        .iter()
        .find(|f| f.subject == "agent-triage@1")
        .expect("a finding");
    assert_eq!(pinned.level, Level::Error);
    assert!(pinned.message.contains("3 task(s) wait"), "{pinned:?}");
    let fix = pinned.fix.as_deref().unwrap_or_default();
    assert!(fix.contains("baton worker triage --version 1"), "{fix}");
    let drained = found
        .iter()
        .find(|f| f.subject == "agent-triage@0")
        .expect("a finding");
    assert_eq!(drained.level, Level::Warn);
    assert!(
        drained
            .fix
            .as_deref()
            .unwrap_or_default()
            .contains("baton versions triage")
    );
    // A version whose workers live is fine.
    let mut live = consumer("triage@2", 1_000);
    live.waiting = 0;
    facts.consumers = vec![live];
    assert_eq!(problems(&facts), []);
}

#[test]
fn a_rollout_left_part_way_for_a_day_is_a_warning_and_a_fresh_one_is_not() {
    let mut facts = healthy();
    facts.now = 200_000;
    let mut rollout = baton_proto::Rollout::first(
        &baton_proto::AgentName::from_static("triage"),
        &baton_proto::Version::from_static("1"),
        0,
    );
    rollout.ramp_to(&baton_proto::Version::from_static("2"), 30, 190_000 * 1000);
    facts.rollouts = vec![rollout.clone()];
    assert_eq!(problems(&facts), []);
    rollout.at = 100;
    facts.rollouts = vec![rollout];
    let found = problems(&facts);
    assert_eq!(found, [("versions", Level::Warn, "triage".to_owned())]);
    let finding = checks::all(&facts)
        .into_iter()
        .find(|f| f.check == "versions")
        .unwrap();
    assert!(finding.message.contains("stayed at 30%"), "{finding:?}");
    assert!(
        finding
            .fix
            .as_deref()
            .unwrap_or_default()
            .contains("baton rollout triage --back")
    );
}

#[test]
fn an_mcp_sign_in_that_ran_out_unrefreshable_is_a_warning_with_the_login_to_run() {
    use super::facts::SignInFacts;
    let mut facts = healthy();
    facts.now = 10_000;
    let signed = |server: &str, refreshable: bool, at: i64| SignInFacts {
        server: server.to_owned(),
        client_id: "baton".to_owned(),
        scopes: vec!["files:read".to_owned()],
        refreshable,
        at: Some(at),
        lasts: Some(3600),
    };
    facts.sign_ins = vec![
        signed("https://fresh.example/mcp", false, 9_000),
        signed("https://stale.example/mcp", true, 1_000),
        signed("https://gone.example/mcp", false, 1_000),
    ];
    assert_eq!(
        problems(&facts),
        [(
            "mcp-login",
            Level::Warn,
            "https://gone.example/mcp".to_owned()
        )]
    );
    let found: Vec<Finding> = (checks::all(&facts).into_iter())
        .filter(|f| f.check == "mcp-login")
        .collect();
    assert_eq!(found.len(), 3);
    assert!(
        found[0].message.contains("lasts 2600s more"),
        "{:?}",
        found[0]
    );
    assert!(
        found[1].message.contains("the workers refresh it"),
        "{:?}",
        found[1]
    );
    assert_eq!(
        found[2].fix.as_deref(),
        Some("sign in again: baton mcp login https://gone.example/mcp")
    );
}

#[test]
fn a_gated_rollout_that_cannot_decide_for_a_day_or_gates_an_unrecorded_metric_is_a_warning() {
    let mut facts = healthy();
    facts.now = 200_000;
    let (one, two) = (
        baton_proto::Version::from_static("1"),
        baton_proto::Version::from_static("2"),
    );
    let mut rollout =
        baton_proto::Rollout::first(&baton_proto::AgentName::from_static("triage"), &one, 0);
    let gated = baton_proto::Gated {
        id: uuid::Uuid::nil(),
        version: two.clone(),
        steps: vec![5, 100],
        step: 0,
        since: 190_000 * 1000,
        interval_ms: 600_000,
        min_sessions: 50,
        gates: vec![
            "success >= -2pt".parse().unwrap(),
            "cost <= 1.2x".parse().unwrap(),
        ],
        escalated_fails: true,
        paused: None,
        resumed: None,
        ended: None,
        last: None,
        extra: baton_proto::Map::new(),
    };
    rollout.start_gated(gated, 190_000 * 1000);
    let side = |version: &baton_proto::Version, sessions, cost| baton_proto::Side {
        version: version.clone(),
        sessions,
        succeeded: sessions,
        cost_micros: cost,
        p50_ms: Some(10),
        p95_ms: Some(20),
    };
    facts.rollouts = vec![rollout.clone()];
    // Fresh, with costs on both sides: nothing to say (not even "part-way").
    facts.gated = BTreeMap::from([(
        "triage".to_owned(),
        (side(&one, 40, Some(5.0)), side(&two, 3, Some(5.0))),
    )]);
    assert_eq!(problems(&facts), []);
    // No cost recorded: the cost gate never holds.
    facts.gated = BTreeMap::from([(
        "triage".to_owned(),
        (side(&one, 40, None), side(&two, 3, None)),
    )]);
    let said: Vec<String> = checks::all(&facts)
        .into_iter()
        .filter(|f| f.level == Level::Warn)
        .map(|f| f.message)
        .collect();
    assert!(
        said.len() == 1 && said[0].contains("`cost <= 1.2x`"),
        "{said:?}"
    );
    // A day at the first step without a decision.
    rollout.gated.as_mut().unwrap().since = 100;
    facts.rollouts = vec![rollout];
    let said: Vec<String> = checks::all(&facts)
        .into_iter()
        .filter(|f| f.level == Level::Warn)
        .map(|f| f.message)
        .collect();
    assert!(
        said.iter()
            .any(|m| m.contains("without a decision: 3 of the 50 sessions")),
        "{said:?}"
    );
}
