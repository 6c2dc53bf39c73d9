//! The protocol's checked names: an agent type's name and a version. Each
//! is a string on the wire, read as written (a reader that addresses a
//! subject with one checks it); made in code, each is checked.

use crate::wire::error::{Error, ErrorKind};
use std::fmt;
use std::str::FromStr;

/// A name that breaks the protocol's naming rule: `what` it names, and
/// the rule.
pub(super) fn broken(what: &str, name: &str, rule: &str) -> Error {
    Error::new(ErrorKind::Name, format!("invalid {what} {name:?}: {rule}"))
}

pub(super) const NAME_RULE: &str =
    "use 1 to 64 characters of a-z, 0-9, '_' or '-', starting with a letter or digit";

/// What a checked name shares with the text it holds: it is written and
/// read on the wire as that text, transparently (so the wire does not
/// change, and a message naming an invalid one is still read: the reader
/// that addresses a subject with it checks it, as the router does a
/// task's `to`, and says so), described as a string in the schemas, and
/// reads as a `&str` (compared, borrowed as a map key, printed).
macro_rules! name_traits {
    ($name:ident) => {
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                String::deserialize(deserializer).map(Self)
            }
        }

        impl schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> std::borrow::Cow<'static, str> {
                String::schema_name()
            }

            fn schema_id() -> std::borrow::Cow<'static, str> {
                String::schema_id()
            }

            fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
                String::json_schema(generator)
            }
        }

        impl $name {
            /// A name written in the code, checked once: like `new`, but
            /// panics on a name that breaks the rule (as `http`'s
            /// `HeaderName::from_static` does), so a literal reads as one.
            ///
            /// # Panics
            ///
            /// When `text` breaks the rule.
            #[must_use]
            #[track_caller]
            pub fn from_static(text: &'static str) -> Self {
                match Self::new(text) {
                    Ok(name) => name,
                    Err(err) => panic!("{err}"),
                }
            }

            /// Reads a name and checks it, for a field that names a
            /// subject once read back from a store
            /// (`#[serde(deserialize_with = "...::deserialize_checked")]`).
            ///
            /// # Errors
            ///
            /// When the value is not a string, or breaks the rule.
            pub fn deserialize_checked<'de, D: serde::Deserializer<'de>>(
                deserializer: D,
            ) -> Result<Self, D::Error> {
                let text = <String as serde::Deserialize>::deserialize(deserializer)?;
                Self::new(text).map_err(serde::de::Error::custom)
            }

            /// A name taken as written, unchecked, as the wire reads one:
            /// for a tool or a test that sends what a foreign sender might.
            #[doc(hidden)]
            #[must_use]
            pub fn unchecked(text: impl Into<String>) -> Self {
                Self(text.into())
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl From<$name> for String {
            fn from(name: $name) -> Self {
                name.0
            }
        }
    };
}

pub(super) fn is_valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 64
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-')
}

/// An agent type name: matches `[a-z0-9][a-z0-9_-]{0,63}`.
///
/// # Examples
///
/// ```
/// use baton_proto::AgentName;
///
/// assert!("order_management".parse::<AgentName>().is_ok());
/// assert!("Order.Management".parse::<AgentName>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AgentName(String);

impl AgentName {
    /// Validates `name`.
    ///
    /// # Errors
    ///
    /// When `name` breaks the naming rule; the error says the rule.
    pub fn new(name: impl Into<String>) -> Result<Self, Error> {
        let name = name.into();
        if is_valid_name(&name) {
            Ok(Self(name))
        } else {
            Err(broken("agent type name", &name, NAME_RULE))
        }
    }

    /// The name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for AgentName {
    type Err = Error;
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::new(name)
    }
}

impl fmt::Display for AgentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

const VERSION_RULE: &str = "use 1 to 64 characters of A-Z, a-z, 0-9, '_' or '-' (a version becomes part of a NATS subject and a consumer name, which cannot hold '.', '*', '>' or spaces)";

/// A version of an agent type: an operator's label (`"2"`, a git sha, a
/// date) or a short hash of a spec file's bytes. It matches
/// `[A-Za-z0-9_-]{1,64}`, so that it can name a subject token and a
/// durable consumer.
///
/// # Examples
///
/// ```
/// use baton_proto::Version;
///
/// assert!("2026-11-26".parse::<Version>().is_ok());
/// assert!("v1.2".parse::<Version>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Version(String);

impl Version {
    /// Validates `label`.
    ///
    /// # Errors
    ///
    /// When `label` is empty, longer than 64 characters, or holds a
    /// character a subject token cannot; the error says the rule.
    pub fn new(label: impl Into<String>) -> Result<Self, Error> {
        let label = label.into();
        let valid = !label.is_empty()
            && label.len() <= 64
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if valid {
            Ok(Self(label))
        } else {
            Err(broken("version", &label, VERSION_RULE))
        }
    }

    /// The version of a spec file without a `version`: the first 12 hex
    /// digits of the SHA-256 of its bytes, so the same file is the same
    /// version on every machine.
    #[must_use]
    pub fn of_bytes(bytes: &[u8]) -> Self {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(bytes);
        let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
        Self(hex)
    }

    /// The label.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for Version {
    type Err = Error;
    fn from_str(label: &str) -> Result<Self, Self::Err> {
        Self::new(label)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

name_traits!(AgentName);
name_traits!(Version);
