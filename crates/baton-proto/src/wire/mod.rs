//! How values go on the wire: the msgpack codec and its checks, values and maps, the JSON Schemas, uuids as text, hex, time and derived ids, nesting limits, and the `wire_enum!` macro for enums that keep unknown values.

#[macro_use]
pub(crate) mod wire_enum;
pub(crate) mod codec;
pub(crate) mod error;
pub(crate) mod error_type;
pub(crate) mod id;
pub(crate) mod nesting;
pub(crate) mod schema;
pub(crate) mod text;
pub(crate) mod time;
pub(crate) mod uuid_text;
pub(crate) mod value;
