//! The registry: a NATS micro service fed by heartbeats, its high
//! availability, `baton agents`, and routing by capability through it.

use std::time::Duration;

use baton_proto::{Envelope, EventType};
use baton_testkit::ChildProcess;

use crate::util::{HEARTBEAT_MS, System, agents, kinds, names, wants};

const INTERVAL: Duration = Duration::from_millis(HEARTBEAT_MS);

#[tokio::test(flavor = "multi_thread")]
async fn the_registry_is_a_micro_service_that_speaks_msgpack_json_and_clear_errors()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.registry("r1").await?;
    system
        .agent("w1", "refund", "refunds", 2, &["--domains", "billing"])
        .await?;
    system
        .lookup_until(&wants(&["refunds"]), Duration::from_secs(5), |a| {
            names(a) == ["refund"]
        })
        .await?;

    // Generic NATS tooling discovers it.
    let ping = system
        .nats
        .request("$SRV.PING.baton-registry", "".into())
        .await?;
    let ping: serde_json::Value = serde_json::from_slice(&ping.payload)?;
    assert_eq!(ping["name"], "baton-registry");
    let info = system
        .nats
        .request("$SRV.INFO.baton-registry", "".into())
        .await?;
    let info: serde_json::Value = serde_json::from_slice(&info.payload)?;
    let endpoint = |name: &str| {
        info["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == name)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(endpoint("lookup")["subject"], "baton.registry.lookup");
    assert_eq!(endpoint("lookup")["queue_group"], "q");
    assert_eq!(endpoint("feedback")["subject"], "baton.registry.feedback");
    assert_eq!(endpoint("notebook")["subject"], "baton.registry.notebook");
    // The service counts a request after it has answered it: look until it has.
    baton_testkit::eventually(Duration::from_secs(5), || async {
        let stats = system
            .nats
            .request("$SRV.STATS.baton-registry", "".into())
            .await?;
        let stats: serde_json::Value = serde_json::from_slice(&stats.payload)?;
        let lookup = stats["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == "lookup")
            .cloned()
            .unwrap_or_default();
        let counted = lookup["num_requests"].as_u64().unwrap_or(0);
        anyhow::ensure!(counted >= 1, "{stats}");
        Ok(())
    })
    .await?;

    // JSON in, JSON out.
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Content-Type", "application/json");
    let reply = system
        .nats
        .request_with_headers(
            "baton.registry.lookup",
            headers.clone(),
            r#"{"requires":["refunds"],"domains":["billing"],"min_tier":2}"#.into(),
        )
        .await?;
    let answer: serde_json::Value = serde_json::from_slice(&reply.payload)?;
    assert_eq!(answer["candidates"][0]["agent"], "refund");
    assert_eq!(answer["candidates"][0]["tier"], 2);
    assert_eq!(answer["candidates"][0]["instances"], 1);
    assert_eq!(
        reply
            .headers
            .as_ref()
            .and_then(|h| h.get("Content-Type"))
            .map(|v| v.as_str().to_owned()),
        Some("application/json".to_owned())
    );

    // Malformed requests get an error reply, not a timeout.
    for (headers, payload) in [
        (
            async_nats::HeaderMap::new(),
            &b"\xc1 definitely not msgpack"[..],
        ),
        (headers, &br#"{"requires": "refunds"}"#[..]),
    ] {
        let reply = system
            .nats
            .request_with_headers("baton.registry.lookup", headers, payload.to_vec().into())
            .await?;
        let error = reply
            .headers
            .as_ref()
            .and_then(|h| h.get("Nats-Service-Error"))
            .map(|v| v.as_str().to_owned())
            .unwrap_or_default();
        assert!(error.starts_with("bad lookup request: "), "{error:?}");
        assert_eq!(
            reply
                .headers
                .as_ref()
                .and_then(|h| h.get("Nats-Service-Error-Code"))
                .map(|v| v.as_str().to_owned()),
            Some("400".to_owned())
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn baton_agents_shows_instances_tier_load_backlog_and_success() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.registry("r1").await?;
    // One slow instance that takes one task at a time: the rest wait in its consumer.
    system
        .agent(
            "slow1",
            "slow",
            "orders,returns",
            2,
            &[
                "--domains",
                "retail",
                "--concurrency",
                "1",
                "--work-ms",
                "20000",
            ],
        )
        .await?;
    // Two versions of fast run side by side: each instance says which it runs.
    system
        .agent("fast1", "fast", "orders", 1, &["--version", "2"])
        .await?;
    system
        .agent("fast2", "fast", "orders", 1, &["--version", "1"])
        .await?;
    let slow = baton_proto::AgentName::new("slow")?;
    let events = system.run("fast", &Envelope::task("one")).await?;
    // Every event a worker writes names the version its instance runs.
    let mut by_instance = std::collections::BTreeMap::new();
    for event in &events {
        let version = event.version.clone().expect("an event without a version");
        assert!(version == "1" || version == "2", "{version}");
        let instance = event
            .instance
            .clone()
            .expect("an event without an instance");
        let first = by_instance
            .entry(instance)
            .or_insert_with(|| version.clone());
        assert_eq!(*first, version);
    }
    assert!(!by_instance.is_empty());
    for n in 0..4 {
        system
            .client
            .submit_to(&slow, &Envelope::task(format!("slow {n}")))
            .await?;
    }
    system
        .lookup_until(&wants(&[]), Duration::from_secs(10), |answer| {
            let slow = answer
                .candidates
                .iter()
                .any(|c| c.agent == "slow" && c.in_flight == Some(1) && c.backlog == Some(4));
            let fast = answer
                .candidates
                .iter()
                .any(|c| c.agent == "fast" && c.success_ratio == Some(1.0));
            slow && fast
        })
        .await?;

    let output = system.baton(&["agents", "--json"]).output()?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let listed: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let listed = listed.as_array().expect("a JSON array");
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0]["agent"], "fast");
    assert_eq!(listed[0]["instances"], 2);
    assert_eq!(listed[0]["capacity"], 16);
    assert_eq!(listed[0]["success_ratio"], 1.0);
    assert_eq!(
        listed[0]["versions"],
        serde_json::json!({"1": 1, "2": 1}),
        "{}",
        listed[0]
    );
    assert_eq!(listed[1].get("versions"), None);
    assert_eq!(listed[1]["agent"], "slow");
    assert_eq!(listed[1]["tier"], 2);
    assert_eq!(
        listed[1]["capabilities"],
        serde_json::json!(["orders", "returns"])
    );
    assert_eq!(listed[1]["domains"], serde_json::json!(["retail"]));
    assert_eq!(listed[1]["in_flight"], 1);
    assert_eq!(listed[1]["capacity"], 1);
    // 3 waiting + 1 delivered and not yet acked.
    assert_eq!(listed[1]["backlog"], 4);

    let output = system.baton(&["agents"]).output()?;
    assert!(output.status.success());
    let table = String::from_utf8(output.stdout)?;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        [
            "AGENT",
            "INSTANCES",
            "TIER",
            "CAPABILITIES",
            "DOMAINS",
            "IN-FLIGHT",
            "BACKLOG",
            "SUCCESS",
            "VERSIONS"
        ]
    );
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        [
            "fast", "2", "1", "orders", "0/16", "0", "100%", "1", "(1),", "2", "(1)"
        ]
    );
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        [
            "slow",
            "1",
            "2",
            "orders,returns",
            "retail",
            "1/1",
            "4",
            "-",
            "-"
        ]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn baton_agents_without_a_registry_says_how_to_start_one() -> anyhow::Result<()> {
    let system = System::start().await?;
    let output = system.baton(&["agents", "--timeout-ms", "300"]).output()?;
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr)?;
    assert!(
        stderr.contains("start a registry with `baton registry`"),
        "{stderr}"
    );
    assert!(stderr.contains("did not answer"), "{stderr}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn lookups_survive_a_dead_replica_and_a_restarted_one_is_whole_at_once() -> anyhow::Result<()>
{
    let (mut system, monitor) = System::monitored().await?;
    system.registry("r1").await?;
    system.registry("r2").await?;
    system.agent("w1", "orders", "orders", 1, &[]).await?;
    system.agent("w2", "refund", "refunds", 2, &[]).await?;
    let everyone = |answer: &baton_proto::LookupResponse| names(answer).len() == 2;
    system
        .lookup_until(&wants(&[]), Duration::from_secs(5), everyone)
        .await?;

    system.process("r1").kill9();
    // Once the server has seen r1's connection close (a request routed to
    // it before then goes unanswered), every single lookup is answered by
    // the survivor, and none times out.
    one_replica_subscribed(monitor).await?;
    let refund = |answer: &baton_proto::LookupResponse| names(answer) == ["refund"];
    for _ in 0..20 {
        let answer = system.lookup_once(&wants(&["refunds"])).await?;
        assert!(refund(&answer), "{answer:#?}");
    }

    // Restarted, r1 listens for one interval before it joins: its first
    // answer comes from a whole table, never a half-filled one.
    let process = ChildProcess::spawn(
        system.baton(&["registry", "--heartbeat-ms", &HEARTBEAT_MS.to_string()]),
        "r1-again",
    )?;
    system.adopt("r1-again", process);
    system
        .wait_log(
            "r1-again",
            "registry serving lookups",
            Duration::from_secs(10),
        )
        .await?;
    system.process("r2").kill9();
    one_replica_subscribed(monitor).await?;
    let answer = system.lookup_once(&wants(&[])).await?;
    assert_eq!(names(&answer).len(), 2, "{answer:#?}");
    assert!(
        system
            .process("r1-again")
            .stderr()
            .contains("agent_types=2"),
        "the restarted replica started serving with both agent types known"
    );
    Ok(())
}

/// Waits until the server (monitoring port `monitor`) has dropped a killed
/// replica's connection: one connection left subscribed to lookups.
async fn one_replica_subscribed(monitor: u16) -> anyhow::Result<()> {
    let url = format!("http://127.0.0.1:{monitor}/connz?subs=1");
    baton_testkit::eventually(Duration::from_secs(20), || async {
        let connz = crate::operations::metrics::get_json(&url).await?;
        let subscribed = connz["connections"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|connection| {
                connection["subscriptions_list"]
                    .as_array()
                    .is_some_and(|subs| subs.iter().any(|s| s == "baton.registry.lookup"))
            })
            .count();
        anyhow::ensure!(
            subscribed == 1,
            "{subscribed} replicas subscribed to lookups"
        );
        Ok(())
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_worker_leaves_lookups_within_three_intervals() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.registry("r1").await?;
    system.agent("w1", "orders", "orders", 1, &[]).await?;
    system.agent("w2", "orders", "orders", 1, &[]).await?;
    let request = wants(&["orders"]);
    system
        .lookup_until(&request, Duration::from_secs(5), |a| {
            a.candidates.first().is_some_and(|c| c.instances == 2)
        })
        .await?;
    system.process("w1").kill9();
    // Three intervals, plus the registry's sweep and the polling step.
    system
        .lookup_until(&request, 4 * INTERVAL, |a| {
            a.candidates.first().is_some_and(|c| c.instances == 1)
        })
        .await?;
    system.process("w2").kill9();
    system
        .lookup_until(&request, 4 * INTERVAL, |a| a.candidates.is_empty())
        .await?;
    Ok(())
}

/// The demo's agents, a router and a registry, as separate processes.
pub(crate) async fn demo_system() -> anyhow::Result<System> {
    let mut system = System::start().await?;
    system.registry("registry").await?;
    let interval = HEARTBEAT_MS.to_string();
    for agent in [
        "general_enquiry",
        "order_management",
        "advanced_order",
        "refund",
        "human_support",
    ] {
        system
            .spawn(
                agent,
                &["worker", agent, "--heartbeat-ms", &interval],
                "worker started",
            )
            .await?;
    }
    system
        .router(&[
            "--default-agent",
            "general_enquiry",
            "--fallback",
            "human_support",
        ])
        .await?;
    system
        .lookup_until(&wants(&[]), Duration::from_secs(5), |a| {
            a.candidates.len() == 5
        })
        .await?;
    Ok(system)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_lecture_cases_route_by_capability_and_tier() -> anyhow::Result<()> {
    let system = demo_system().await?;
    let system = &system;
    let ask = |text: &str| {
        let task = Envelope::task(text);
        async move {
            system.client.submit(&task).await?;
            system
                .session_events(task.session, Duration::from_secs(30))
                .await
        }
    };

    // A knowledge gap about the refund policy: the refund agent.
    let events = ask("What is your refund policy? I want my money back.").await?;
    let handoff = events
        .iter()
        .find(|e| e.kind == EventType::Handoff)
        .expect("a handoff");
    assert_eq!(handoff.to.as_deref(), Some("refund"));
    assert_eq!(
        handoff.reason.as_ref().map(|r| r.as_str()),
        Some("knowledge_gap")
    );
    let done = events.last().unwrap();
    assert_eq!(done.kind, EventType::Completed);
    assert_eq!(agents(&done.path), ["general_enquiry", "refund"]);

    // A tool failure on a special order: the tier-2 agent with special orders.
    let events = ask("Where is my special order SPC-777?").await?;
    let done = events.last().unwrap();
    assert_eq!(
        agents(&done.path),
        ["general_enquiry", "order_management", "advanced_order"]
    );
    assert_eq!(
        done.path[2].reason.as_ref().map(|r| r.as_str()),
        Some("tool_failure")
    );

    // A user escalation: a tier above the escalating agent's.
    let events = ask("Let me speak to a human!").await?;
    let escalated = events
        .iter()
        .find(|e| e.kind == EventType::Escalated)
        .expect("an escalation");
    assert_eq!(escalated.to.as_deref(), Some("human_support"));
    assert_eq!(
        escalated.reason.as_ref().map(|r| r.as_str()),
        Some("user_escalation")
    );
    let tier_of_receiver = system.lookup_once(&wants(&["human"])).await?.candidates[0].tier;
    assert!(tier_of_receiver >= 2);

    // Nothing offers what the task requires: the human fallback, `no_match`.
    let mut task = Envelope::task("Teleport my parcel");
    task.requires = vec!["teleportation".into()];
    let session = task.session;
    system.client.submit(&task).await?;
    let events = system
        .session_events(session, Duration::from_secs(30))
        .await?;
    assert_eq!(kinds(&events), ["escalated", "accepted", "completed"]);
    assert_eq!(events[0].agent.as_deref(), Some("ingress"));
    assert_eq!(events[0].to.as_deref(), Some("human_support"));
    assert_eq!(
        events[0].reason.as_ref().map(|r| r.as_str()),
        Some("no_match")
    );
    assert_eq!(agents(&events[2].path), ["human_support"]);
    assert_eq!(
        events[2].path[0].reason.as_ref().map(|r| r.as_str()),
        Some("no_match")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_with_requires_goes_to_the_best_agent_and_without_a_fallback_fails()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.registry("r1").await?;
    system
        .agent("g1", "generalist", "refunds,orders,shipping", 1, &[])
        .await?;
    system.agent("s1", "specialist", "refunds", 1, &[]).await?;
    system.router(&[]).await?;
    system
        .lookup_until(&wants(&[]), Duration::from_secs(5), |a| {
            a.candidates.len() == 2
        })
        .await?;

    let mut task = Envelope::task("refund please");
    task.requires = vec!["refunds".into()];
    system.client.submit(&task).await?;
    let events = system
        .session_events(task.session, Duration::from_secs(30))
        .await?;
    assert_eq!(agents(&events.last().unwrap().path), ["specialist"]);

    // No match and no fallback on the router: `no_route`, dead-lettered.
    let mut task = Envelope::task("teleport");
    task.requires = vec!["teleportation".into()];
    system.client.submit(&task).await?;
    let events = system
        .session_events(task.session, Duration::from_secs(30))
        .await?;
    assert_eq!(kinds(&events), ["dead_lettered", "failed"]);
    assert_eq!(
        events[1].reason.as_ref().map(|r| r.as_str()),
        Some("no_route")
    );
    let detail = events[1].detail.clone().unwrap_or_default();
    assert!(
        detail.contains("no live agent offers capabilities [teleportation]"),
        "{detail}"
    );
    assert!(detail.contains("--fallback"), "{detail}");
    let dead = system.client.dead_letters().await?;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason.as_str(), "no_route");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_escalation_goes_up_one_tier_at_least_and_prefers_the_nearest() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.registry("r1").await?;
    let fallback = ["--fallback", "boss"];
    system
        .agent(
            "f1",
            "frontline",
            "support",
            1,
            &[&["--escalate"], &fallback[..]].concat(),
        )
        .await?;
    system.agent("p1", "peer", "support", 1, &fallback).await?;
    system
        .agent("e1", "expert", "support", 2, &fallback)
        .await?;
    system.agent("b1", "boss", "support", 3, &[]).await?;
    system
        .lookup_until(&wants(&[]), Duration::from_secs(5), |a| {
            a.candidates.len() == 4
        })
        .await?;
    let events = system
        .run("frontline", &Envelope::task("this is beyond me"))
        .await?;
    assert_eq!(
        kinds(&events),
        ["accepted", "escalated", "accepted", "completed"]
    );
    assert_eq!(
        events[1].to.as_deref(),
        Some("expert"),
        "tier 2 is the nearest above tier 1"
    );
    assert_eq!(
        events[1].reason.as_ref().map(|r| r.as_str()),
        Some("user_escalation")
    );
    assert_eq!(agents(&events[3].path), ["frontline", "expert"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn path_exclusion_never_sends_work_back_and_no_match_goes_to_the_human() -> anyhow::Result<()>
{
    let mut system = System::start().await?;
    system.registry("r1").await?;
    // Both offer `triage` and both hand off to "whoever offers triage".
    let flags = ["--next-requires", "triage", "--fallback", "human"];
    system.agent("a1", "alpha", "triage", 1, &flags).await?;
    system.agent("b1", "beta", "triage", 1, &flags).await?;
    system.agent("h1", "human", "people", 3, &[]).await?;
    system
        .lookup_until(&wants(&[]), Duration::from_secs(5), |a| {
            a.candidates.len() == 3
        })
        .await?;
    let events = system
        .run("alpha", &Envelope::task("who takes this?"))
        .await?;
    assert_eq!(
        kinds(&events),
        [
            "accepted",
            "handoff",
            "accepted",
            "escalated",
            "accepted",
            "completed"
        ]
    );
    // alpha fits its own request but is excluded: beta. Then both are on the path.
    assert_eq!(events[1].to.as_deref(), Some("beta"));
    assert_eq!(events[3].to.as_deref(), Some("human"));
    assert_eq!(
        events[3].reason.as_ref().map(|r| r.as_str()),
        Some("no_match")
    );
    let detail = events[3].detail.clone().unwrap_or_default();
    assert!(
        detail.contains("outside the path [alpha, beta]"),
        "{detail}"
    );
    assert_eq!(agents(&events[5].path), ["alpha", "beta", "human"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn between_two_equal_agents_the_more_loaded_one_loses() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.registry("r1").await?;
    let flags = ["--concurrency", "2", "--work-ms", "15000"];
    // Equal in all but load; `calc_a` would win the tie on its name.
    system.agent("a1", "calc_a", "math", 1, &flags).await?;
    system.agent("b1", "calc_b", "math", 1, &flags).await?;
    system
        .agent("e1", "entry", "entry", 1, &["--next-requires", "math"])
        .await?;
    system
        .lookup_until(&wants(&[]), Duration::from_secs(5), |a| {
            a.candidates.len() == 3
        })
        .await?;
    let idle = system.lookup_once(&wants(&["math"])).await?;
    assert_eq!(names(&idle), ["calc_a", "calc_b"], "tie broken by name");

    let calc_a = baton_proto::AgentName::new("calc_a")?;
    for n in 0..2 {
        system
            .client
            .submit_to(&calc_a, &Envelope::task(format!("busy {n}")))
            .await?;
    }
    system
        .lookup_until(&wants(&["math"]), Duration::from_secs(10), |a| {
            a.candidates
                .iter()
                .any(|c| c.agent == "calc_a" && c.in_flight == Some(2))
        })
        .await?;
    let task = Envelope::task("add these up");
    let entry = baton_proto::AgentName::new("entry")?;
    system.client.submit_to(&entry, &task).await?;
    let mut stream = system.client.events(task.session).await?;
    let handoff = loop {
        let event = tokio::time::timeout(
            Duration::from_secs(10),
            futures::StreamExt::next(&mut stream),
        )
        .await?
        .expect("events")?;
        if event.kind == EventType::Handoff {
            break event;
        }
    };
    assert_eq!(handoff.to.as_deref(), Some("calc_b"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_task_is_rerouted_without_the_agent_that_declined() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.registry("r1").await?;
    system
        .agent(
            "p1",
            "picky",
            "billing",
            1,
            &["--reject", "--fallback", "human"],
        )
        .await?;
    system
        .agent(
            "w1",
            "willing",
            "billing,extra",
            1,
            &["--fallback", "human"],
        )
        .await?;
    system.agent("h1", "human", "people", 3, &[]).await?;
    system
        .lookup_until(&wants(&[]), Duration::from_secs(5), |a| {
            a.candidates.len() == 3
        })
        .await?;
    let mut task = Envelope::task("an invoice question");
    task.requires = vec!["billing".into()];
    let events = system.run("picky", &task).await?;
    assert_eq!(
        kinds(&events),
        ["accepted", "rejected", "handoff", "accepted", "completed"]
    );
    assert_eq!(events[1].agent.as_deref(), Some("picky"));
    assert_eq!(events[2].to.as_deref(), Some("willing"));
    assert_eq!(
        events[2].reason.as_ref().map(|r| r.as_str()),
        Some("rejected")
    );
    assert_eq!(agents(&events[4].path), ["picky", "willing"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_registry_takes_the_fallback_path_without_hanging() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    // No registry at all.
    system
        .agent(
            "a1",
            "asker",
            "triage",
            1,
            &[
                "--next-requires",
                "refunds",
                "--fallback",
                "human",
                "--lookup-budget-ms",
                "800",
            ],
        )
        .await?;
    system.agent("h1", "human", "people", 3, &[]).await?;
    let events = system.run("asker", &Envelope::task("refund?")).await?;
    assert_eq!(
        kinds(&events),
        ["accepted", "escalated", "accepted", "completed"]
    );
    assert_eq!(events[1].to.as_deref(), Some("human"));
    assert_eq!(
        events[1].reason.as_ref().map(|r| r.as_str()),
        Some("no_match")
    );
    let detail = events[1].detail.clone().unwrap_or_default();
    // "No responders" comes back at once; the worker retried for its whole budget.
    assert!(
        detail.contains("the registry did not answer") && detail.contains("within 800ms"),
        "{detail}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registry_outage_routes_from_memory_or_falls_back_and_ends_every_session()
-> anyhow::Result<()> {
    const BEFORE: usize = 100;
    const DURING: usize = 100;
    let mut system = System::start().await?;
    system.registry("r1").await?;
    system.registry("r2").await?;
    system.agent("rf", "refund", "refunds", 2, &[]).await?;
    system.agent("h1", "desk", "people", 3, &[]).await?;
    // Two front agents route by capability: one remembers the registry's
    // answers for 60 s, the other remembers none.
    for (label, agent, memory) in [("f1", "front", "60"), ("f2", "forgetful", "0")] {
        let flags = [
            "--next-requires",
            "refunds",
            "--fallback",
            "desk",
            "--lookup-budget-ms",
            "1000",
            "--registry-memory-secs",
            memory,
            "--concurrency",
            "16",
        ];
        system.agent(label, agent, "triage", 1, &flags).await?;
    }
    let refunds = |answer: &baton_proto::LookupResponse| names(answer) == ["refund"];
    system
        .lookup_until(&wants(&["refunds"]), Duration::from_secs(10), refunds)
        .await?;
    let front = baton_proto::AgentName::new("front")?;
    let forgetful = baton_proto::AgentName::new("forgetful")?;
    let mut sessions = Vec::new();
    for n in 0..BEFORE {
        let to = if n % 2 == 0 { &front } else { &forgetful };
        let task = Envelope::task(format!("before {n}"));
        system.client.submit_to(to, &task).await?;
        sessions.push((task.session, to.clone(), false));
    }
    for (session, _, _) in &sessions {
        system
            .session_events(*session, Duration::from_secs(60))
            .await?;
    }
    // Every registry replica dies.
    system.process("r1").kill9();
    system.process("r2").kill9();
    let outage = std::time::Instant::now();
    for n in 0..DURING {
        let to = if n % 2 == 0 { &front } else { &forgetful };
        let task = Envelope::task(format!("during {n}"));
        system.client.submit_to(to, &task).await?;
        sessions.push((task.session, to.clone(), true));
    }
    let (mut remembered, mut fell_back, mut lost) = (0, 0, 0);
    for (session, to, during) in &sessions {
        let events = system
            .session_events(*session, Duration::from_secs(60))
            .await?;
        let end = events.last().unwrap();
        if end.kind != EventType::Completed {
            lost += 1;
            continue;
        }
        let path = agents(&end.path);
        let expected: &[&str] = match (to.as_str(), during) {
            (_, false) | ("front", true) => &[to.as_str(), "refund"],
            _ => &[to.as_str(), "desk"],
        };
        assert_eq!(path, expected, "{session}: {:?}", kinds(&events));
        if *during && to.as_str() == "front" {
            remembered += 1;
        }
        if *during && to.as_str() == "forgetful" {
            fell_back += 1;
            let escalated = events
                .iter()
                .find(|e| e.kind == EventType::Escalated)
                .unwrap();
            assert_eq!(
                escalated.reason.as_ref().map(|r| r.as_str()),
                Some("no_match")
            );
        }
    }
    println!(
        "registry outage: {} sessions, {lost} lost; during the outage {remembered} routed from memory, \
         {fell_back} took the fallback; all ended {:?} after the replicas died",
        sessions.len(),
        outage.elapsed()
    );
    assert_eq!((lost, remembered, fell_back), (0, DURING / 2, DURING / 2));
    Ok(())
}
