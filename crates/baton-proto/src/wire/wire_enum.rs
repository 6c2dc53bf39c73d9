//! A macro for the protocol's lowercase string enums.
//!
//! PROTOCOL.md requires that an unknown value is read as "other", never as a
//! decode error, so each enum carries an `Other(String)` variant that keeps the
//! received text and writes it back unchanged.

macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this version does not know, kept as received.
            Other(String),
        }

        impl $name {
            /// Every value this version knows, in protocol order.
            pub const KNOWN: &'static [&'static str] = &[$($text),+];

            /// The wire text of this value.
            #[must_use]
            pub fn as_str(&self) -> &str {
                match self {
                    $( Self::$variant => $text, )+
                    Self::Other(text) => text,
                }
            }

            /// Reads a wire value; unknown text becomes `Other`.
            #[must_use]
            pub fn parse(text: &str) -> Self {
                match text {
                    $( $text => Self::$variant, )+
                    other => Self::Other(other.to_owned()),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = std::convert::Infallible;
            fn from_str(text: &str) -> Result<Self, Self::Err> {
                Ok(Self::parse(text))
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> Self {
                Self::parse(text)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
                Ok(Self::parse(&text))
            }
        }

        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({
                    "type": "string",
                    "description": concat!(
                        "Lowercase string. Known values are listed in `examples`; ",
                        "readers treat any other value as \"other\", never as an error."
                    ),
                    "examples": Self::KNOWN,
                })
            }
        }
    };
}
