//! The OAuth sign-ins to MCP servers (`baton mcp login`): read from their
//! bucket, never with their tokens, and checked.

use baton_proto::Subjects;

use super::facts::{Facts, SignInFacts};
use super::finding::{Finding, Level};
use crate::{Error, ErrorKind};

/// Every sign-in kept; none when no one signed in (the bucket is not
/// created here).
///
/// # Errors
///
/// [`ErrorKind::Read`] when the bucket cannot be read.
pub async fn gather(
    client: &async_nats::Client,
    subjects: &Subjects,
) -> Result<Vec<SignInFacts>, Error> {
    let failed = |err: baton_mcp_client::Error| {
        Error::with_source(ErrorKind::Read, "cannot read the MCP sign-ins", err)
    };
    let Some(tokens) = baton_mcp_client::Tokens::existing(client, subjects)
        .await
        .map_err(failed)?
    else {
        return Ok(Vec::new());
    };
    let seconds = |value: Option<u64>| value.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
    Ok(tokens
        .all()
        .await
        .map_err(failed)?
        .into_iter()
        .map(|(server, signed)| SignInFacts {
            server,
            client_id: signed.client_id,
            scopes: signed.scopes,
            refreshable: signed.refreshable,
            at: seconds(signed.at),
            lasts: seconds(signed.lasts),
        })
        .collect())
}

/// Each sign-in: whom it signed in as and until when; a warning for one
/// that has run out and cannot be refreshed.
pub(super) fn check(facts: &Facts) -> Vec<Finding> {
    facts
        .sign_ins
        .iter()
        .map(|signed| {
            let scopes = if signed.scopes.is_empty() {
                "no scope named".to_owned()
            } else {
                signed.scopes.join(" ")
            };
            let ends = signed
                .at
                .zip(signed.lasts)
                .map(|(at, lasts)| at.saturating_add(lasts));
            let left = ends.map(|ends| ends - facts.now);
            let state = match (left, signed.refreshable) {
                (Some(left), _) if left > 0 => format!("its token lasts {left}s more"),
                (Some(_), true) => "its token ran out; the workers refresh it".to_owned(),
                (Some(_), false) => "its token ran out, and cannot be refreshed".to_owned(),
                (None, _) => "its token names no end".to_owned(),
            };
            let message = format!(
                "signed in to {} as client {} ({scopes}): {state}{}",
                signed.server,
                signed.client_id,
                if signed.refreshable {
                    ", refreshable"
                } else {
                    ""
                }
            );
            let finding = Finding::new("mcp-login", Level::Info, &signed.server, message);
            match (left, signed.refreshable) {
                (Some(left), false) if left <= 0 => Finding {
                    level: Level::Warn,
                    ..finding
                }
                .fix(format!("sign in again: baton mcp login {}", signed.server)),
                _ => finding,
            }
        })
        .collect()
}
