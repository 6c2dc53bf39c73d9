//! The claim-check: a payload too large for one NATS message keeps its large
//! parts in an object store and carries references to them (`claims`).
//!
//! Both directions are pure functions over msgpack bytes, so every process
//! and every language can implement them the same way:
//!
//! - [`check_out`] replaces large parts with empty placeholders of the same
//!   type and lists each as a [`Claim`]: a JSON Pointer (RFC 6901) to the
//!   part, and the name of an object holding the part's msgpack encoding.
//! - [`restore`] puts the objects back, in reverse order, and drops `claims`.
//!
//! Objects are named by the SHA-256 of their bytes, so a part that does not
//! change from hop to hop (the history of a conversation) is one object.

use crate::wire::error::{Error, ErrorKind};
use std::collections::HashMap;

use rmpv::Value as Mp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The top-level field that lists a payload's claims.
pub const CLAIMS_FIELD: &str = "claims";

/// A part of a payload kept in the claim-check object store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Claim {
    /// Where the part goes: a JSON Pointer (RFC 6901) from the payload's root,
    /// e.g. `/context/messages/3/content`.
    pub path: String,
    /// The object's name in the bucket: `sha256-` and the lowercase hex
    /// SHA-256 of its bytes, which are the part's msgpack encoding.
    pub object: String,
    /// The object's size in bytes.
    pub size: u64,
}

/// What [`check_out`] made of a payload.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedOut {
    /// The payload to publish.
    pub payload: Vec<u8>,
    /// The objects it refers to, by name (each once).
    pub objects: Vec<(String, Vec<u8>)>,
}

/// The name of the object holding `bytes`.
#[must_use]
pub fn object_name(bytes: &[u8]) -> String {
    format!("sha256-{}", crate::hex(&Sha256::digest(bytes)))
}

/// Moves the large parts of `payload` (a msgpack map) into objects when the
/// payload is over `threshold` bytes; returns it unchanged otherwise.
///
/// First every string or binary of at least `min_part` bytes goes (the same
/// text is the same object on every hop). If the payload is still over the
/// threshold, whole arrays go, largest first. The result may still be over
/// the threshold when neither helps; the caller checks the size it can send.
///
/// # Errors
///
/// When `payload` is not a msgpack map.
pub fn check_out(payload: Vec<u8>, threshold: usize, min_part: usize) -> Result<CheckedOut, Error> {
    if payload.len() <= threshold {
        return Ok(CheckedOut {
            payload,
            objects: Vec::new(),
        });
    }
    let mut root = read(&payload)?;
    let mut claims = take_claims(&mut root)?;
    let mut objects: Vec<(String, Vec<u8>)> = Vec::new();
    let mut offload = |root: &mut Mp, path: &str, claims: &mut Vec<Claim>| {
        let Some(part) = pointer_mut(root, path) else {
            return;
        };
        let placeholder = match part {
            Mp::String(_) => Mp::from(""),
            Mp::Binary(_) => Mp::Binary(Vec::new()),
            _ => Mp::Array(Vec::new()),
        };
        let bytes = write(&std::mem::replace(part, placeholder));
        let object = object_name(&bytes);
        claims.push(Claim {
            path: path.to_owned(),
            object: object.clone(),
            size: bytes.len() as u64,
        });
        if !objects.iter().any(|(name, _)| *name == object) {
            objects.push((object, bytes));
        }
    };
    let mut leaves = Vec::new();
    walk(&root, &mut String::new(), &mut |path, value, size| {
        if matches!(value, Mp::String(_) | Mp::Binary(_)) && size >= min_part {
            leaves.push(path.to_owned());
        }
    });
    for path in &leaves {
        offload(&mut root, path, &mut claims);
    }
    let mut size = encoded_len(&root, &claims);
    if size > threshold {
        let mut arrays = Vec::new();
        walk(&root, &mut String::new(), &mut |path, value, size| {
            if matches!(value, Mp::Array(items) if !items.is_empty()) && size >= min_part {
                arrays.push((size, path.to_owned()));
            }
        });
        arrays.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let mut taken: Vec<String> = Vec::new();
        for (_, path) in arrays {
            if size <= threshold {
                break;
            }
            if taken.iter().any(|outer| within(&path, outer)) {
                continue;
            }
            offload(&mut root, &path, &mut claims);
            taken.push(path);
            size = encoded_len(&root, &claims);
        }
    }
    put_claims(&mut root, &claims)?;
    Ok(CheckedOut {
        payload: write(&root),
        objects,
    })
}

/// The claims of a payload: its `claims` field, empty when absent.
///
/// # Errors
///
/// When `payload` is not a msgpack map, or `claims` is not a list of claims.
pub fn claims(payload: &[u8]) -> Result<Vec<Claim>, Error> {
    take_claims(&mut read(payload)?)
}

/// `payload` with every claim's object back in place and no `claims` field.
/// `objects` maps object names to their bytes; each is checked against its
/// name.
///
/// # Errors
///
/// When an object is missing, does not match its name, is not msgpack, or
/// its path does not lead into the payload.
pub fn restore(payload: &[u8], objects: &HashMap<String, Vec<u8>>) -> Result<Vec<u8>, Error> {
    let mut root = read(payload)?;
    let claims = take_claims(&mut root)?;
    for claim in claims.iter().rev() {
        let bytes = objects
            .get(&claim.object)
            .ok_or_else(|| claim_error(format!("object {} is missing", claim.object)))?;
        if object_name(bytes) != claim.object {
            return Err(claim_error(format!(
                "object {} does not match its name",
                claim.object
            )));
        }
        let value = read(bytes)?;
        let slot = pointer_mut(&mut root, &claim.path)
            .ok_or_else(|| claim_error(format!("path {:?} is not in the payload", claim.path)))?;
        *slot = value;
    }
    Ok(write(&root))
}

fn read(bytes: &[u8]) -> Result<Mp, Error> {
    if crate::nests_deeper_than(bytes, crate::MAX_NESTING) {
        return Err(claim_error(format!(
            "nested deeper than {} levels",
            crate::MAX_NESTING
        )));
    }
    let mut reader = bytes;
    let value = rmpv::decode::read_value(&mut reader)
        .map_err(|err| claim_error(format!("not msgpack: {err}")))?;
    if !reader.is_empty() {
        return Err(claim_error("trailing bytes after the payload".to_owned()));
    }
    Ok(value)
}

fn write(value: &Mp) -> Vec<u8> {
    let mut bytes = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = rmpv::encode::write_value(&mut bytes, value);
    bytes
}

fn encoded_len(root: &Mp, claims: &[Claim]) -> usize {
    // The claims list adds roughly its own encoding to the payload.
    let list: usize = claims
        .iter()
        .map(|claim| claim.path.len() + claim.object.len() + 32)
        .sum();
    write(root).len() + list
}

fn take_claims(root: &mut Mp) -> Result<Vec<Claim>, Error> {
    let Mp::Map(entries) = root else {
        return Err(claim_error("the payload is not a map".to_owned()));
    };
    let Some(index) = entries
        .iter()
        .position(|(key, _)| key.as_str() == Some(CLAIMS_FIELD))
    else {
        return Ok(Vec::new());
    };
    let (_, value) = entries.remove(index);
    rmpv::ext::from_value(value).map_err(|err| claim_error(format!("invalid claims: {err}")))
}

fn put_claims(root: &mut Mp, claims: &[Claim]) -> Result<(), Error> {
    if claims.is_empty() {
        return Ok(());
    }
    let Mp::Map(entries) = root else {
        return Err(claim_error("the payload is not a map".to_owned()));
    };
    // Named maps, as every payload of the protocol (not serde's tuple form).
    let bytes = rmp_serde::to_vec_named(claims).map_err(|err| claim_error(err.to_string()))?;
    let value = read(&bytes)?;
    entries.push((Mp::from(CLAIMS_FIELD), value));
    Ok(())
}

/// Calls `visit(pointer, value, encoded size)` for every node below the root.
fn walk(value: &Mp, path: &mut String, visit: &mut impl FnMut(&str, &Mp, usize)) {
    let children: Vec<(String, &Mp)> = match value {
        Mp::Map(entries) => entries
            .iter()
            .filter_map(|(key, child)| key.as_str().map(|key| (escape(key), child)))
            .collect(),
        Mp::Array(items) => items
            .iter()
            .enumerate()
            .map(|(index, child)| (index.to_string(), child))
            .collect(),
        _ => return,
    };
    for (segment, child) in children {
        let len = path.len();
        path.push('/');
        path.push_str(&segment);
        visit(path, child, write(child).len());
        walk(child, path, visit);
        path.truncate(len);
    }
}

/// Whether `path` is `outer` or below it.
fn within(path: &str, outer: &str) -> bool {
    path == outer
        || path
            .strip_prefix(outer)
            .is_some_and(|rest| rest.starts_with('/'))
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn unescape(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

/// The node a JSON Pointer leads to.
fn pointer_mut<'a>(root: &'a mut Mp, path: &str) -> Option<&'a mut Mp> {
    let rest = path.strip_prefix('/')?;
    rest.split('/').try_fold(root, |node, segment| match node {
        Mp::Map(entries) => {
            let key = unescape(segment);
            entries
                .iter_mut()
                .find(|(k, _)| k.as_str() == Some(key.as_str()))
                .map(|(_, child)| child)
        }
        Mp::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
        _ => None,
    })
}

#[cfg(test)]
mod tests;

/// A claim-check failure saying `detail`.
fn claim_error(detail: impl Into<String>) -> Error {
    Error::new(ErrorKind::Claim, detail)
}
