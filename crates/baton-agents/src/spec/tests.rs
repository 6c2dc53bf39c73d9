use baton_worker::{ContextPolicy, Route, RouteOptions, Target};

use super::*;

fn parse_str(text: &str) -> Result<AgentSpec, crate::Error> {
    parse(Path::new("agents/x.toml"), text)
}

fn problems(text: &str) -> Vec<String> {
    problems_of(Path::new("agents/x.toml"), text)
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect()
}

const EXEC: &str = r#"
name = "executor"
kind = "exec"
capabilities = ["run_code"]
tier = 2
concurrency = 2
timeout_ms = 5000
fallback = "human_support"

[retry]
max_attempts = 5
min_backoff_ms = 10
max_backoff_ms = 100

[exec]
command = ["python3", "agent.py", "executor"]

[[handoffs]]
to = "engineer"
max_visits = 4

[[conditions]]
when = "n_attempts >= max_n_attempts"
to = "terminator"

[[conditions]]
when = "last_run == 'failed'"
to = "engineer"
max_visits = 4
context = { last_n = 2 }

[after_work]
requires = ["control"]
min_tier = 1
"#;

#[test]
fn a_full_exec_spec_parses() {
    let spec = parse_str(EXEC).unwrap();
    assert_eq!(spec.name.as_str(), "executor");
    assert_eq!(spec.profile.tier, 2);
    assert_eq!(spec.concurrency, 2);
    assert_eq!(spec.timeout, Duration::from_secs(5));
    assert_eq!(spec.retry.max_attempts, 5);
    assert_eq!(
        spec.fallback.as_ref().map(AgentName::as_str),
        Some("human_support")
    );
    assert!(matches!(&spec.kind, Kind::Exec(exec) if exec.command[1] == "agent.py"));
    assert_eq!(spec.routing.conditions.len(), 2);
    assert_eq!(
        spec.routing.conditions[1].route.options,
        RouteOptions {
            max_visits: Some(4),
            context: ContextPolicy::LastN(2)
        }
    );
    assert!(matches!(
        &spec.routing.after_work,
        Some(Route { target: Some(Target::Capabilities(need)), .. }) if need.requires == ["control"] && need.min_tier == Some(1)
    ));
    assert_eq!(spec.dir(), Path::new("agents"));
}

#[test]
fn unknown_keys_are_errors_with_the_line() {
    let text = "name = \"a\"\nkind = \"exec\"\ncommnd = 1\n[exec]\ncommand = [\"x\"]\n";
    let errors = problems(text);
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].starts_with("agents/x.toml:3: unknown field `commnd`"),
        "{errors:?}"
    );
    assert!(
        errors[0].contains("remove it, or check its spelling"),
        "{errors:?}"
    );

    let text = "name = \"a\"\nkind = \"exec\"\n[exec]\ncommand = [\"x\"]\n\n[[conditions]]\nwhen = \"x > 1\"\nto = \"b\"\nmax_visit = 2\n";
    let errors = problems(text);
    assert!(
        errors[0].starts_with("agents/x.toml:9: unknown field `max_visit`"),
        "{errors:?}"
    );
}

#[test]
fn semantic_errors_name_the_line_and_the_fix() {
    let text = r#"name = "Bad Name"
kind = "exec"

[exec]
command = []

[[conditions]]
when = "n_attempts >="
to = "terminator"

[[conditions]]
to = "x"

[after_work]
to = "a"
requires = ["b"]
"#;
    let errors = problems(text);
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("agents/x.toml:1: name: invalid agent type name")),
        "{errors:#?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("agents/x.toml:4: [exec] command is empty")),
        "{errors:#?}"
    );
    assert!(
        errors.iter().any(|e| e.starts_with(
            "agents/x.toml:7: [[conditions]] when = \"n_attempts >=\" is not a valid CEL expression"
        )),
        "{errors:#?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("agents/x.toml:11: [[conditions]] needs when")),
        "{errors:#?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("agents/x.toml:14: [after_work] has both `to` and `requires`")),
        "{errors:#?}"
    );
}

#[test]
fn kinds_need_their_table_and_no_other() {
    let errors = problems("name = \"a\"\nkind = \"llm\"\n");
    assert!(
        errors[0].contains("kind = \"llm\" needs an [llm] table"),
        "{errors:?}"
    );
    let errors = problems("name = \"a\"\nkind = \"human\"\n[exec]\ncommand = [\"x\"]\n");
    assert!(
        errors[0].starts_with("agents/x.toml:3: a [exec] table in a spec of kind \"human\""),
        "{errors:?}"
    );
    let errors = problems("name = \"a\"\nkind = \"robot\"\n");
    assert!(errors[0].contains("unknown variant `robot`"), "{errors:?}");
    let errors = problems(
        "name = \"a\"\nkind = \"exec\"\n[exec]\ncommand = [\"x\"]\n[[llm_conditions]]\nwhen = \"asks for refunds\"\nto = \"refund\"\n",
    );
    assert!(
        errors[0].contains("judged by the agent's LLM"),
        "{errors:?}"
    );
    let spec = parse_str("name = \"h\"\nkind = \"human\"\n").unwrap();
    assert_eq!(spec.kind, Kind::Human(HumanSpec {}));
}

#[test]
fn llm_specs_need_one_tool_per_target() {
    let text = r#"name = "chat"
kind = "llm"

[llm]
base_url = "http://127.0.0.1:9/v1"
model = "m"

[[handoffs]]
to = "refund"

[[llm_conditions]]
when = "the user wants money back"
to = "refund"
"#;
    let errors = problems(text);
    assert!(
        errors[0].starts_with("agents/x.toml:11: a second route to \"refund\""),
        "{errors:?}"
    );
}

#[test]
fn chains_and_delegates_parse_and_are_checked() {
    let spec = parse_str(
        "name = \"pipeline\"\nkind = \"chain\"\nmax_delegation_depth = 2\njoin_timeout_ms = 500\n[chain]\nsteps = [\"a\", \"b\"]\nrecover = \"fixer\"\n",
    )
    .unwrap();
    assert!(
        matches!(&spec.kind, Kind::Chain(chain) if chain.steps == ["a", "b"] && chain.recover.as_deref() == Some("fixer"))
    );
    assert_eq!(spec.max_delegation_depth, 2);
    assert_eq!(spec.join_timeout, Some(Duration::from_millis(500)));
    let errors = problems(
        "name = \"p\"\nkind = \"chain\"\n[chain]\nsteps = []\nrecover = \"x\"\nrecover_value = \"y\"\n",
    );
    assert!(
        errors.iter().any(|e| e.contains("[chain] steps is empty")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("both recover and recover_value")),
        "{errors:?}"
    );

    let spec = parse_str(
        "name = \"editor\"\nkind = \"llm\"\n[llm]\nmodel = \"m\"\n[[delegates]]\nagent = \"researcher\"\n[[delegates]]\nrequires = [\"writing\"]\n",
    )
    .unwrap();
    assert_eq!(spec.delegates.len(), 2);
    assert_eq!(spec.delegates[1].target.label(), "writing");
    let errors = problems(
        "name = \"x\"\nkind = \"exec\"\n[exec]\ncommand = [\"y\"]\n[[delegates]]\nagent = \"z\"\n",
    );
    assert!(
        errors[0].contains("offered to an LLM as tools"),
        "{errors:?}"
    );
}

#[test]
fn check_warns_about_routes_to_agents_nobody_defines() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.toml");
    let b = dir.path().join("b.toml");
    std::fs::write(
        &a,
        "name = \"a\"\nkind = \"exec\"\n[exec]\ncommand = [\"x\"]\n[after_work]\nto = \"b\"\n",
    )
    .unwrap();
    std::fs::write(&b, "name = \"b\"\nkind = \"exec\"\nfallback = \"nobody\"\n[exec]\ncommand = [\"x\"]\n[after_work]\nto = \"ghost\"\n").unwrap();
    let report = check(&[a, b]);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.specs.len(), 2);
    assert_eq!(report.warnings.len(), 2, "{:?}", report.warnings);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("routes to agent type ghost"))
    );
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("routes to agent type nobody"))
    );
}

#[test]
fn a_malformed_limits_table_is_an_error_with_its_line() {
    let llm = "name = \"a\"\nkind = \"llm\"\n[llm]\nmodel = \"m\"\n";
    let negative = format!("{llm}[llm.limits]\nrequests_per_minute = -5\n");
    let errors = problems(&negative);
    assert!(errors[0].starts_with("agents/x.toml:6:"), "{errors:?}");
    let misspelt = format!("{llm}[llm.limits]\nrequest_per_minute = 60\n");
    let errors = problems(&misspelt);
    assert!(
        errors[0].starts_with("agents/x.toml:6: unknown field `request_per_minute`"),
        "{errors:?}"
    );
    let empty = format!("{llm}[llm.limits]\n");
    let errors = problems(&empty);
    assert!(
        errors[0].starts_with("agents/x.toml:3:") && errors[0].contains("sets no limit"),
        "{errors:?}"
    );
    let zero = format!("{llm}[llm.limits]\ntokens_per_minute = 0\n");
    let errors = problems(&zero);
    assert!(
        errors[0].contains("a limit of 0 lets no call through"),
        "{errors:?}"
    );
    let fine = format!("{llm}[llm.limits]\nrequests_per_minute = 600\ntokens_per_minute = 90000\n");
    let Kind::Llm(settings) = parse_str(&fine).unwrap().kind else {
        panic!("an llm spec");
    };
    let limits = settings.limits.expect("limits");
    assert_eq!(
        (limits.requests_per_minute, limits.tokens_per_minute),
        (Some(600), Some(90_000))
    );
}

#[test]
fn a_cap_per_hop_of_zero_or_a_bad_price_table_is_an_error_with_its_line() {
    let llm = "name = \"a\"\nkind = \"llm\"\n[llm]\nmodel = \"m\"\n";
    let zero = format!("{llm}hop_budget_tokens = 0\n");
    let errors = problems(&zero);
    assert!(
        errors[0].starts_with("agents/x.toml:3:") && errors[0].contains("hop_budget_tokens = 0"),
        "{errors:?}"
    );
    let negative = format!("{llm}hop_budget_tokens = -10\n");
    assert!(problems(&negative)[0].starts_with("agents/x.toml:5:"));
    let cheap = format!("{llm}[llm.price]\ninput_per_million = -1\noutput_per_million = 2\n");
    let errors = problems(&cheap);
    assert!(errors[0].contains("cannot be negative"), "{errors:?}");
    let half = format!("{llm}[llm.price]\ninput_per_million = 1\n");
    let errors = problems(&half);
    assert!(errors[0].contains("output_per_million"), "{errors:?}");
    let fine = format!(
        "{llm}hop_budget_tokens = 4000\n[llm.price]\ninput_per_million = 2.5\noutput_per_million = 10\n"
    );
    let Kind::Llm(settings) = parse_str(&fine).unwrap().kind else {
        panic!("an llm spec");
    };
    assert_eq!(settings.hop_budget_tokens, Some(4000));
    let price = settings.price.expect("a price");
    // 1000 tokens read and 100 written: 0.0025 + 0.001.
    assert_eq!(price.micros(1000, 100), 3500);
}

#[test]
fn a_history_bound_parses_and_a_bad_one_names_the_fix() {
    let llm = "name = \"a\"\nkind = \"llm\"\n[llm]\nmodel = \"m\"\n[llm.history]\n";
    for (table, says) in [
        ("", "sets no bound"),
        ("max_messages = 1\n", "at least 2"),
        ("max_tokens = 0\n", "max_tokens = 0"),
        (
            "max_messages = 10\nolder = \"drop\"\nsummary_model = \"s\"\n",
            "no use with older = \"drop\"",
        ),
        ("max_messages = 10\nolder = \"forget\"\n", "unknown variant"),
    ] {
        let errors = problems(&format!("{llm}{table}"));
        assert!(errors[0].contains(says), "{table}: {errors:?}");
    }
    let fine = format!("{llm}max_tokens = 8000\nsummary_model = \"small\"\n");
    let Kind::Llm(settings) = parse_str(&fine).unwrap().kind else {
        panic!("an llm spec");
    };
    let history = settings.history.expect("a bound");
    assert_eq!(history.max_tokens, Some(8000));
    assert_eq!(history.summarizer("m"), Some("small"));
    let dropped = format!("{llm}max_messages = 10\nolder = \"drop\"\n");
    let Kind::Llm(settings) = parse_str(&dropped).unwrap().kind else {
        panic!("an llm spec");
    };
    assert_eq!(
        settings
            .history
            .and_then(|h| h.summarizer("m").map(str::to_owned)),
        None
    );
}

const LLM_WITH_TOOLS: &str = r#"
name = "teller"
kind = "llm"

[llm]
base_url = "http://127.0.0.1:1/v1"
model = "m"
"#;

#[test]
fn mcp_client_credentials_parse_and_half_a_sign_in_names_the_fix() {
    let spec = parse_str(&format!(
        "{LLM_WITH_TOOLS}\n[[mcp]]\nurl = \"https://tools.example/mcp\"\nauth = \"client_credentials\"\nclient_id = \"baton\"\nclient_secret_env = \"TOOLS_SECRET\"\nscopes = [\"tools:call\"]\n"
    ))
    .unwrap();
    assert_eq!(
        spec.mcp[0].auth,
        Some(crate::spec::McpAuth::ClientCredentials)
    );
    assert_eq!(spec.mcp[0].scopes, ["tools:call"]);
    for (entry, fix) in [
        (
            "url = \"https://t/mcp\"\nauth = \"client_credentials\"\nclient_id = \"b\"",
            "needs client_id and one of client_secret_env",
        ),
        (
            "url = \"https://t/mcp\"\nauth = \"client_credentials\"\nclient_id = \"b\"\nclient_secret_env = \"S\"\nprivate_key_env = \"K\"",
            "needs client_id and one of client_secret_env",
        ),
        (
            "url = \"https://t/mcp\"\nauth = \"client_credentials\"\nclient_id = \"b\"\nclient_secret_env = \"S\"\nsigning_algorithm = \"ES256\"",
            "signing_algorithm goes with private_key_env",
        ),
        (
            "url = \"https://t/mcp\"\nauth = \"oauth\"\nprivate_key_env = \"K\"",
            "private_key_env goes with auth",
        ),
        (
            "url = \"https://t/mcp\"\nauth = \"client_credentials\"\nclient_id = \"b\"\nprivate_key_env = \"K\"\nsigning_algorithm = \"HS256\"",
            "unknown variant",
        ),
        (
            "url = \"https://t/mcp\"\nauth = \"client_credentials\"\nclient_id = \"b\"\nclient_secret_env = \"S\"\ntoken_env = \"T\"",
            "two ways to sign in",
        ),
        (
            "command = [\"s\"]\nauth = \"client_credentials\"\nclient_id = \"b\"\nclient_secret_env = \"S\"",
            "auth goes with url",
        ),
        ("url = \"https://t/mcp\"\nclient_id = \"b\"", "go with auth"),
        (
            "url = \"https://t/mcp\"\nauth = \"password\"",
            "unknown variant",
        ),
    ] {
        let found = problems(&format!("{LLM_WITH_TOOLS}\n[[mcp]]\n{entry}\n"));
        assert!(found.iter().any(|p| p.contains(fix)), "{entry}: {found:?}");
    }
}

#[test]
fn mcp_tool_classes_and_approvals_parse_and_bad_ones_name_the_fix() {
    let spec = parse_str(&format!(
        "{LLM_WITH_TOOLS}\n[[mcp]]\nurl = \"http://127.0.0.1:2/mcp\"\nidempotent = false\nidempotent_tools = [\"a\"]\nnot_idempotent = [\"b\"]\napprove = \"destructive\"\n\n[[mcp]]\ncommand = [\"s\"]\napprove = [\"c\"]\n"
    ))
    .unwrap();
    assert_eq!(spec.mcp[0].idempotent, Some(false));
    assert_eq!(
        spec.mcp[0].approve,
        Some(Approve::Class("destructive".to_owned()))
    );
    assert_eq!(
        spec.mcp[1].idempotent, None,
        "absent: the annotations decide"
    );
    assert_eq!(
        spec.mcp[1].approve,
        Some(Approve::Tools(vec!["c".to_owned()]))
    );

    let bad = problems(&format!(
        "{LLM_WITH_TOOLS}\n[[mcp]]\ncommand = [\"s\"]\napprove = \"sometimes\"\n"
    ));
    assert!(
        bad[0].contains("approve = \"sometimes\" is not a choice"),
        "{bad:?}"
    );
    let both = problems(&format!(
        "{LLM_WITH_TOOLS}\n[[mcp]]\ncommand = [\"s\"]\nidempotent_tools = [\"x\"]\nnot_idempotent = [\"x\"]\n"
    ));
    assert!(
        both[0].contains("\"x\" is in both idempotent_tools and not_idempotent"),
        "{both:?}"
    );
}

#[test]
fn next_turn_defaults_to_the_holder_and_takes_entry() {
    let exec = "name = \"triage\"\nkind = \"exec\"\n[exec]\ncommand = [\"true\"]\n";
    assert_eq!(parse_str(exec).unwrap().next_turn, NextTurn::Holder);
    let entry = format!("next_turn = \"entry\"\n{exec}");
    assert_eq!(parse_str(&entry).unwrap().next_turn, NextTurn::Entry);
    let wrong = format!("next_turn = \"sometimes\"\n{exec}");
    let found = problems(&wrong);
    assert!(
        found
            .iter()
            .any(|p| p.contains("x.toml:1:") && p.contains("`holder` or `entry`")),
        "{found:?}"
    );
}

#[test]
fn a_spec_names_its_version_or_is_versioned_by_its_bytes() {
    let named = parse_str(&format!("version = \"2026-11-26_a1\"\n{EXEC}")).unwrap();
    assert_eq!(named.version.as_str(), "2026-11-26_a1");

    // Without one: 12 hex digits of the file's SHA-256, the same for the
    // same bytes, and another for any change.
    let hashed = parse_str(EXEC).unwrap().version;
    assert_eq!(hashed.as_str().len(), 12);
    assert!(hashed.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(parse_str(EXEC).unwrap().version, hashed);
    let changed = parse_str(&EXEC.replace("tier = 2", "tier = 3")).unwrap();
    assert_ne!(changed.version, hashed);
    assert_eq!(hashed, Version::of_bytes(EXEC.as_bytes()));

    // A label a subject cannot carry is refused, with its line and the rule.
    let found = problems(&format!("version = \"v1.2\"\n{EXEC}"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("agents/x.toml:1"), "{}", found[0]);
    assert!(
        found[0].contains("invalid version \"v1.2\""),
        "{}",
        found[0]
    );
    assert!(found[0].contains("cannot hold '.'"), "{}", found[0]);
}

#[test]
fn a_spec_says_whether_its_conversations_move_to_a_newer_version() {
    assert_eq!(parse_str(EXEC).unwrap().upgrade, Upgrade::Pinned);
    let moving = parse_str(&format!("upgrade = \"next_turn\"\n{EXEC}")).unwrap();
    assert_eq!(moving.upgrade, Upgrade::NextTurn);
    let found = problems(&format!("upgrade = \"always\"\n{EXEC}"));
    assert!(found[0].contains("agents/x.toml:1"), "{found:?}");
    assert!(
        found[0].contains("pinned") && found[0].contains("next_turn"),
        "{found:?}"
    );
}

#[test]
fn a_rollout_section_is_a_gated_rollout_of_the_specs_version_and_bad_ones_name_the_fix() {
    let base = "name = \"a\"\nkind = \"exec\"\n[exec]\ncommand = [\"x\"]\n";
    let spec = parse_str(&format!(
        "version = \"2\"\n{base}[rollout]\nsteps = [5, 50, 100]\ninterval = \"15s\"\ngates = [\"success >= -1pt\", \"p95 <= 2x\"]\n"
    ))
    .unwrap();
    let plan = spec.rollout.unwrap();
    assert_eq!(
        (
            plan.version.as_str(),
            plan.steps,
            plan.interval_ms,
            plan.min_sessions
        ),
        ("2", vec![5, 50, 100], 15_000, 50)
    );
    assert_eq!(
        plan.gates
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["success >= -1pt", "p95 <= 2x"]
    );
    let cases = [
        ("[rollout]\nsteps = [5, 50]\n", "must end at 100"),
        (
            "[rollout]\nsteps = [100]\ninterval = \"soon\"\n",
            "not a duration",
        ),
        (
            "[rollout]\nsteps = [100]\ngates = [\"tokens <= 2x\"]\n",
            "not recorded",
        ),
        ("[rollout]\nsteps = [100]\nshare = 5\n", "unknown field"),
    ];
    for (section, said) in cases {
        let found = problems(&format!("version = \"2\"\n{base}{section}"));
        assert!(
            found.iter().any(|p| p.contains(said)),
            "{section}: {found:?}"
        );
    }
    let unnamed = problems(&format!("{base}[rollout]\nsteps = [100]\n"));
    assert!(
        unnamed
            .iter()
            .any(|p| p.contains("needs the spec's version")),
        "{unnamed:?}"
    );
}
