//! The types of free-form fields.

use std::collections::BTreeMap;

/// Any MessagePack value: the type of free-form fields (`variables`, `state`, `output`, ...).
pub type Value = rmpv::Value;

/// A string-keyed map of free-form values.
pub type Map = BTreeMap<String, Value>;
