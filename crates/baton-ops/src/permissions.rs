//! `baton permissions`: a role's footprint as a NATS `permissions` block,
//! as tight as the calls its components declare allow. Every role replies
//! through its own inbox prefix, and the block grants only that prefix.

use std::fmt::Write as _;

use baton_proto::Subjects;
use baton_proto::footprint::Footprint;

use crate::roles::{Grants, Role};

/// The permissions block of `role`, replying on `inbox` (its default
/// prefix when `None`), as NATS config text.
#[must_use]
pub fn render(role: &Role, subjects: &Subjects, inbox: Option<&str>, grants: &Grants) -> String {
    let inbox = inbox.map_or_else(|| role.default_inbox_prefix(), str::to_owned);
    let footprint = role.footprint(subjects, &inbox, grants);
    block(role, &inbox, &footprint)
}

/// `footprint` as the block of `role`.
fn block(role: &Role, inbox: &str, footprint: &Footprint) -> String {
    let mut text = format!(
        "# {} replies on {inbox}.> (the role's default inbox prefix; --inbox-prefix or \
         BATON_INBOX_PREFIX changes it, and then this block must be generated with the same)\n",
        role.connection_name()
    );
    for note in &footprint.notes {
        let _ = writeln!(text, "# open: {note}");
    }
    text.push_str("permissions {\n  publish {\n    allow: [\n");
    for subject in &footprint.publish {
        let _ = writeln!(text, "      \"{subject}\"");
    }
    text.push_str("    ]\n  }\n  subscribe {\n    allow: [\n");
    for subject in &footprint.subscribe {
        let _ = writeln!(text, "      \"{subject}\"");
    }
    text.push_str("    ]\n  }\n");
    if footprint.relays {
        let _ = writeln!(
            text,
            "  allow_responses: {{ max: {}, expires: \"{}\" }}",
            baton_proto::footprint::RELAY_REPLIES,
            baton_proto::footprint::RELAY_EXPIRES
        );
    } else if footprint.responds {
        text.push_str("  allow_responses: true\n");
    }
    text.push_str("}\n");
    text
}

#[cfg(test)]
mod tests {
    use baton_proto::AgentName;

    use super::*;
    use crate::roles::RoleKind;

    fn subjects() -> Subjects {
        Subjects::new("baton").unwrap()
    }

    #[test]
    fn a_worker_without_to_may_publish_to_every_agent_type_and_says_so() {
        let agent = AgentName::new("triage").unwrap();
        let text = render(&Role::worker(&agent), &subjects(), None, &Grants::default());
        assert!(text.contains("\"baton.agent.*\""), "{text}");
        assert!(
            text.contains("# open: publish to every agent type"),
            "{text}"
        );
        assert!(text.contains("\"_INBOX_worker_triage.>\""), "{text}");
    }

    #[test]
    fn a_worker_of_a_version_may_pull_from_its_versions_consumer() {
        let agent = AgentName::new("triage").unwrap();
        let plain = render(&Role::worker(&agent), &subjects(), None, &Grants::default());
        assert!(!plain.contains("agent-triage@"), "{plain}");
        let grants = Grants {
            version: Some(baton_proto::Version::new("2").unwrap()),
            ..Grants::default()
        };
        let text = render(&Role::worker(&agent), &subjects(), None, &grants);
        assert!(
            text.contains("\"$JS.API.CONSUMER.MSG.NEXT.BATON_TASKS.agent-triage@2\""),
            "{text}"
        );
        // Its handoffs may go to any version of the types it names.
        assert!(text.contains("\"baton.agent.*.*\""), "{text}");
    }

    #[test]
    fn a_worker_with_to_may_publish_only_there() {
        let agent = AgentName::new("triage").unwrap();
        let grants = Grants {
            to: vec![AgentName::new("billing").unwrap()],
            human: false,
            version: None,
            mcp_logins: Vec::new(),
        };
        let text = render(&Role::worker(&agent), &subjects(), None, &grants);
        assert!(text.contains("\"baton.agent.billing\""), "{text}");
        assert!(!text.contains("baton.agent.*"), "{text}");
        let inbox = format!("KV_{}", subjects().inbox_bucket());
        assert!(!text.contains(&inbox), "no inbox without --human: {text}");
    }

    #[test]
    fn a_worker_reads_the_sign_ins_of_its_mcp_servers_and_no_other() {
        let agent = AgentName::new("researcher").unwrap();
        let bucket = subjects().mcp_auth_bucket();
        let mine = "https://tools.example/mcp".to_owned();
        let grants = Grants {
            mcp_logins: vec![mine.clone()],
            ..Grants::default()
        };
        let text = render(&Role::worker(&agent), &subjects(), None, &grants);
        let signed = baton_mcp_client::footprint(&subjects(), std::slice::from_ref(&mine));
        let other = "https://other.example/mcp".to_owned();
        let not_mine = baton_mcp_client::footprint(&subjects(), &[other]);
        assert!(signed.allows_publish(&format!("$KV.{bucket}.{}", key_of(&signed, &bucket))));
        let theirs = key_of(&not_mine, &bucket);
        assert!(!text.contains(&theirs), "another server's sign-in: {text}");
        assert!(text.contains(&key_of(&signed, &bucket)), "{text}");
        // The whole bucket is the operator's, who signs in.
        let none = render(&Role::worker(&agent), &subjects(), None, &Grants::default());
        assert!(!none.contains(&bucket), "{none}");
        let operator = render(
            &Role::of(RoleKind::Operator),
            &subjects(),
            None,
            &Grants::default(),
        );
        assert!(
            operator.contains(&format!("\"$KV.{bucket}.>\"")),
            "{operator}"
        );
    }

    /// The key a footprint grants in `bucket`.
    fn key_of(footprint: &baton_proto::footprint::Footprint, bucket: &str) -> String {
        let text = format!("{footprint:?}");
        let start = text.find(&format!("$KV.{bucket}.")).expect("a key") + bucket.len() + 5;
        text[start..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect()
    }

    #[test]
    fn a_client_reads_no_stream_and_the_registry_answers_requests() {
        let client = render(
            &Role::of(RoleKind::Client),
            &subjects(),
            None,
            &Grants::default(),
        );
        assert!(!client.contains("CONSUMER.MSG.NEXT"), "{client}");
        assert!(!client.contains("allow_responses"), "{client}");
        let registry = render(
            &Role::of(RoleKind::Registry),
            &subjects(),
            None,
            &Grants::default(),
        );
        assert!(registry.contains("allow_responses: true"), "{registry}");
        assert!(!registry.contains("$JS.API.INFO"), "{registry}");
        // The router relays a session's live events: many replies to one request.
        let router = render(
            &Role::of(RoleKind::Router),
            &subjects(),
            None,
            &Grants::default(),
        );
        assert!(
            router.contains("allow_responses: { max: 100000, expires: \"1m\" }"),
            "{router}"
        );
    }
}
