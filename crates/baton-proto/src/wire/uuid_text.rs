//! Uuids travel as canonical lowercase text, whatever the format's human-readable flag says.

use serde::{Deserialize, Deserializer, Serializer};
use uuid::Uuid;

pub(crate) fn serialize<S: Serializer>(id: &Uuid, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(id.hyphenated().encode_lower(&mut Uuid::encode_buffer()))
}

pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Uuid, D::Error> {
    let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
    Uuid::parse_str(&text)
        .map_err(|err| serde::de::Error::custom(format!("invalid uuid {text:?}: {err}")))
}

pub(crate) mod option {
    use serde::{Deserialize, Deserializer, Serializer};
    use uuid::Uuid;

    pub(crate) fn serialize<S: Serializer>(
        id: &Option<Uuid>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match id {
            Some(id) => super::serialize(id, serializer),
            None => serializer.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Uuid>, D::Error> {
        let text = Option::<std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.map(|text| {
            Uuid::parse_str(&text)
                .map_err(|err| serde::de::Error::custom(format!("invalid uuid {text:?}: {err}")))
        })
        .transpose()
    }
}
