//! What the command line gives the session commands: variables, session
//! ids and amounts.

use anyhow::Context as _;
use baton_proto::Value;
use uuid::Uuid;

/// A variable given as `KEY=VALUE` to `flag`: VALUE read as JSON, else as
/// a string.
pub fn variable(flag: &str, pair: &str) -> anyhow::Result<(String, Value)> {
    let (key, value) = pair.split_once('=').with_context(|| {
        format!("invalid {flag} {pair:?}: write KEY=VALUE, e.g. {flag} order_id=ABC-123")
    })?;
    anyhow::ensure!(
        !key.is_empty(),
        "invalid {flag} {pair:?}: the variable's name is missing before ="
    );
    let json =
        serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.to_owned()));
    let value =
        rmpv::ext::to_value(json).with_context(|| format!("cannot convert {flag} value"))?;
    Ok((key.to_owned(), value))
}

/// A session id given on the command line.
pub fn session_id(text: &str) -> anyhow::Result<Uuid> {
    Uuid::parse_str(text).with_context(|| {
        format!("invalid session id {text:?}: pass the uuid printed by `baton send`")
    })
}

/// A budget's amount (`0.50`), in millionths: more than zero, at most six
/// decimal places.
pub fn amount(text: &str) -> Result<u64, String> {
    match baton_proto::micros(text) {
        Some(0) => Err("a budget of 0 lets no model call through: give more than 0".to_owned()),
        Some(micros) => Ok(micros),
        None => Err(format!(
            "{text:?} is not an amount: give a decimal like 0.50 (at most six places)"
        )),
    }
}
