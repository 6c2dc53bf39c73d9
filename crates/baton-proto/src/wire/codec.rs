use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::wire::error::{Error, ErrorKind};
use crate::{Envelope, Event, Heartbeat, LookupRequest, LookupResponse, PROTOCOL_VERSION};

/// The default size limit of a payload: NATS's default `max_payload`, 1 MiB.
pub const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;

/// A protocol payload with one encode and one decode path.
///
/// Encoding writes msgpack maps with string keys. Decoding checks the size
/// limit, then the version (for versioned payloads), and keeps unknown fields.
pub trait Wire: Serialize + DeserializeOwned {
    /// Whether the payload carries a `v` field that must equal [`PROTOCOL_VERSION`].
    const VERSIONED: bool;

    /// The newest `v` this reader reads of the payload: it reads every
    /// version from 1 to it.
    const NEWEST: u64 = PROTOCOL_VERSION;

    /// The decoded `v` of a versioned payload, checked after a successful
    /// decode (so the bytes are not read twice); `None` for the others.
    /// Required, with no default: a versioned type that forgot it would
    /// skip the check.
    fn version(&self) -> Option<u64>;

    /// What a decoded payload is once the references within it are put
    /// back ([`Event::resolve_refs`]); the payload itself for the others.
    #[must_use]
    fn resolved(self) -> Self {
        self
    }

    /// Encodes as msgpack with named fields.
    ///
    /// # Errors
    ///
    /// Fails only when a free-form value cannot be written as msgpack.
    fn to_msgpack(&self) -> Result<Vec<u8>, Error> {
        rmp_serde::to_vec_named(self)
            .map_err(|err| Error::with_source(ErrorKind::Encode, err.to_string(), err))
    }

    /// Decodes with the default size limit ([`DEFAULT_MAX_PAYLOAD`]).
    ///
    /// # Errors
    ///
    /// See [`Wire::from_msgpack_limited`].
    fn from_msgpack(bytes: &[u8]) -> Result<Self, Error> {
        Self::from_msgpack_limited(bytes, DEFAULT_MAX_PAYLOAD)
    }

    /// Decodes bytes no larger than `limit`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::TooLarge`] past the limit,
    /// [`ErrorKind::UnsupportedVersion`] when `v` is not 1, and
    /// [`ErrorKind::Malformed`] for anything else that is not this payload.
    fn from_msgpack_limited(bytes: &[u8], limit: usize) -> Result<Self, Error> {
        precheck(bytes, limit)?;
        match rmp_serde::from_slice::<Self>(bytes) {
            Ok(value) => {
                check_version(value.version().map(rmpv::Value::from), Self::NEWEST)?;
                Ok(value.resolved())
            }
            Err(err) => {
                // A newer version may have changed the shape: report the version, not the shape.
                if Self::VERSIONED {
                    check_version(probe_version(bytes), Self::NEWEST)?;
                }
                Err(Error::new(ErrorKind::Malformed, err.to_string()))
            }
        }
    }
}

/// The `v` of a payload, if it is a map that has one.
/// The checks before any decode: `bytes` are no larger than `limit`, and
/// nest no deeper than [`crate::MAX_NESTING`].
pub(crate) fn precheck(bytes: &[u8], limit: usize) -> Result<(), Error> {
    if bytes.len() > limit {
        return Err(Error::new(
            ErrorKind::TooLarge,
            format!("{} bytes exceeds the limit of {limit} bytes", bytes.len()),
        ));
    }
    if crate::nests_deeper_than(bytes, crate::MAX_NESTING) {
        return Err(Error::new(
            ErrorKind::Malformed,
            format!(
                "maps and arrays nested deeper than {} levels",
                crate::MAX_NESTING
            ),
        ));
    }
    Ok(())
}

pub(crate) fn probe_version(bytes: &[u8]) -> Option<rmpv::Value> {
    #[derive(serde::Deserialize)]
    struct Probe {
        v: Option<rmpv::Value>,
    }
    rmp_serde::from_slice::<Probe>(bytes)
        .ok()
        .and_then(|probe| probe.v)
}

pub(crate) fn check_version(v: Option<rmpv::Value>, newest: u64) -> Result<(), Error> {
    match v {
        None => Ok(()),
        Some(v)
            if v.as_u64()
                .is_some_and(|v| (PROTOCOL_VERSION..=newest).contains(&v)) =>
        {
            Ok(())
        }
        Some(v) => {
            let speaks = if newest == PROTOCOL_VERSION {
                format!("v{PROTOCOL_VERSION}")
            } else {
                format!("v{PROTOCOL_VERSION} to v{newest}")
            };
            Err(Error::new(
                ErrorKind::UnsupportedVersion,
                format!("protocol version {v} is not supported; this reader speaks {speaks}"),
            ))
        }
    }
}

impl Wire for Envelope {
    const VERSIONED: bool = true;

    fn version(&self) -> Option<u64> {
        Some(self.v)
    }
}

impl Wire for Event {
    const VERSIONED: bool = true;
    const NEWEST: u64 = crate::EVENT_VERSION_REFERRING;

    fn version(&self) -> Option<u64> {
        Some(self.v)
    }

    fn resolved(mut self) -> Self {
        self.resolve_refs();
        self
    }
}

impl Wire for crate::DeadlineTimer {
    const VERSIONED: bool = true;

    fn version(&self) -> Option<u64> {
        Some(self.v)
    }
}

/// Payloads without a `v` field.
macro_rules! unversioned {
    ($($payload:ty),* $(,)?) => {
        $(
            impl Wire for $payload {
                const VERSIONED: bool = false;

                fn version(&self) -> Option<u64> {
                    None
                }
            }
        )*
    };
}

unversioned!(
    Heartbeat,
    LookupRequest,
    LookupResponse,
    crate::ReadRequest,
    crate::ReadReply,
    crate::CancelRequest,
    crate::CancelReply,
    crate::NotebookRequest,
    crate::Notebook,
    crate::FeedbackRequest,
    crate::FeedbackReply,
);

impl Wire for crate::Outcome {
    const VERSIONED: bool = true;

    fn version(&self) -> Option<u64> {
        Some(self.v)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rmpv::Value;

    use super::*;
    use crate::{EventType, Kind, Reason, Role};

    fn roundtrip(envelope: &Envelope) -> Envelope {
        Envelope::from_msgpack(&envelope.to_msgpack().unwrap()).unwrap()
    }

    /// The kind of error decoding `value` after encoding it gives, if any.
    fn decode_error<T: Wire>(value: &T) -> Option<ErrorKind> {
        T::from_msgpack(&value.to_msgpack().unwrap())
            .err()
            .map(|err| err.kind())
    }

    #[test]
    fn every_versioned_payload_refuses_a_newer_version_that_otherwise_decodes() {
        let session = uuid::Uuid::new_v4();
        let mut envelope = Envelope::task("hi");
        let mut event = Event::new(uuid::Uuid::new_v4(), session, EventType::Completed);
        let mut timer = crate::DeadlineTimer::new(session, 1);
        assert_eq!(
            (
                decode_error(&envelope),
                decode_error(&event),
                decode_error(&timer)
            ),
            (None, None, None)
        );
        // Events read version 2 (those that refer), and refuse 3.
        (envelope.v, event.v, timer.v) = (2, 3, 2);
        let refused = Some(ErrorKind::UnsupportedVersion);
        assert_eq!(
            (
                decode_error(&envelope),
                decode_error(&event),
                decode_error(&timer)
            ),
            (refused, refused, refused)
        );
    }

    #[test]
    fn encodes_named_maps_with_string_keys() {
        let bytes = Envelope::task("hi").to_msgpack().unwrap();
        let value = rmpv::decode::read_value(&mut &bytes[..]).unwrap();
        let map = value.as_map().expect("top level is a map");
        let keys: Vec<_> = map
            .iter()
            .map(|(k, _)| k.as_str().unwrap().to_owned())
            .collect();
        assert!(
            keys.contains(&"v".to_owned()) && keys.contains(&"context".to_owned()),
            "{keys:?}"
        );
        let id = map
            .iter()
            .find(|(k, _)| k.as_str() == Some("id"))
            .unwrap()
            .1
            .clone();
        assert!(id.is_str(), "ids are uuid strings, got {id:?}");
    }

    #[test]
    fn unknown_fields_survive_a_roundtrip_at_every_level() {
        let mut envelope = Envelope::task("hi");
        envelope
            .context
            .variables
            .insert("n".into(), Value::from(3));
        let mut value = rmpv::ext::to_value(&envelope).unwrap();
        // Add unknown fields as a newer writer would.
        fn push(map: &mut Value, key: &str, val: Value) {
            if let Value::Map(entries) = map {
                entries.push((Value::from(key), val));
            }
        }
        push(&mut value, "future_top", Value::from("x"));
        if let Value::Map(entries) = &mut value {
            for (key, val) in entries.iter_mut() {
                if key.as_str() == Some("context") {
                    push(val, "future_ctx", Value::Binary(vec![1, 2, 3]));
                }
            }
        }
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, &value).unwrap();
        let decoded = Envelope::from_msgpack(&bytes).unwrap();
        assert_eq!(decoded.extra.get("future_top"), Some(&Value::from("x")));
        assert_eq!(
            decoded.context.extra.get("future_ctx"),
            Some(&Value::Binary(vec![1, 2, 3]))
        );
        let again = roundtrip(&decoded);
        assert_eq!(again.extra.get("future_top"), Some(&Value::from("x")));
        assert_eq!(
            again.context.extra.get("future_ctx"),
            Some(&Value::Binary(vec![1, 2, 3]))
        );
        assert_eq!(again.context.variables.get("n"), Some(&Value::from(3)));
    }

    #[test]
    fn unknown_enum_values_read_as_other_and_are_kept() {
        let mut envelope = Envelope::task("hi");
        envelope.kind = Kind::parse("broadcast");
        envelope.reason = Some(Reason::parse("customer asked nicely"));
        envelope.context.messages[0].role = Role::parse("narrator");
        let back = roundtrip(&envelope);
        assert_eq!(back.kind, Kind::Other("broadcast".into()));
        assert_eq!(
            back.reason,
            Some(Reason::Other("customer asked nicely".into()))
        );
        assert_eq!(
            back.context.messages[0].role,
            Role::Other("narrator".into())
        );
        assert_eq!(Reason::parse("loop_detected"), Reason::LoopDetected);
        assert_eq!(EventType::parse("teleported").as_str(), "teleported");
    }

    #[test]
    fn decode_errors_are_classified() {
        let err = Envelope::from_msgpack(b"\xc1 not msgpack").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Malformed);
        assert_eq!(err.reason(), crate::DeadLetterReason::Malformed);

        // A map that is not an envelope.
        let bytes = rmp_serde::to_vec_named(&BTreeMap::from([("hello", 1)])).unwrap();
        assert_eq!(
            Envelope::from_msgpack(&bytes).unwrap_err().kind(),
            ErrorKind::Malformed
        );

        // A valid envelope of version 2.
        let mut envelope = Envelope::task("hi");
        envelope.v = 2;
        let err = Envelope::from_msgpack(&envelope.to_msgpack().unwrap()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnsupportedVersion);
        assert!(err.to_string().starts_with("unsupported_version"), "{err}");

        // Version 2 with a different shape is still reported as a version problem.
        let bytes = rmp_serde::to_vec_named(&BTreeMap::from([("v", 2)])).unwrap();
        assert_eq!(
            Envelope::from_msgpack(&bytes).unwrap_err().kind(),
            ErrorKind::UnsupportedVersion
        );

        let bytes = Envelope::task("x".repeat(2000)).to_msgpack().unwrap();
        let err = Envelope::from_msgpack_limited(&bytes, 1000).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::TooLarge);
        assert!(Envelope::from_msgpack_limited(&bytes, bytes.len()).is_ok());
    }

    #[test]
    fn an_event_that_refers_is_version_2_and_read_whole() {
        let answer = "The parcel is refunded in full; the money reaches your card within days.";
        let mut context = Envelope::task(
            "Please refund order ABC-123: the parcel came broken and I want my money.",
        )
        .context;
        context
            .messages
            .push(crate::Message::new(Role::Agent, answer));
        let mut event = Event::new(
            uuid::Uuid::new_v4(),
            uuid::Uuid::new_v4(),
            EventType::Completed,
        );
        event.output = Some(crate::Value::from(answer));
        event.context = Some(Box::new(context));
        let whole = event.to_msgpack().unwrap();
        event.refer();
        assert_eq!((event.v, event.refs.len()), (2, 2));
        let bytes = event.to_msgpack().unwrap();
        assert!(bytes.len() < whole.len(), "kept once");
        // This reader puts the parts back.
        let back = Event::from_msgpack(&bytes).unwrap();
        assert_eq!(back.output, Some(crate::Value::from(answer)));
        assert!(back.refs.is_empty());
        // A version this reader does not know is refused, for events as
        // for envelopes, which stay at version 1.
        let mut newer = back.clone();
        newer.v = 3;
        let err = Event::from_msgpack(&newer.to_msgpack().unwrap()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnsupportedVersion);
        assert!(err.to_string().contains("speaks v1 to v2"), "{err}");
        // An event without anything to refer to stays version 1.
        let mut plain = Event::new(
            uuid::Uuid::new_v4(),
            uuid::Uuid::new_v4(),
            EventType::Completed,
        );
        plain.output = Some(crate::Value::from("ok"));
        plain.refer();
        assert_eq!(plain.v, 1);
    }

    #[test]
    fn a_bad_uuid_is_malformed() {
        let mut value = rmpv::ext::to_value(Envelope::task("hi")).unwrap();
        if let Value::Map(entries) = &mut value {
            for (key, val) in entries.iter_mut() {
                if key.as_str() == Some("id") {
                    *val = Value::from("not-a-uuid");
                }
            }
        }
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, &value).unwrap();
        let err = Envelope::from_msgpack(&bytes).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Malformed);
        assert!(err.detail().contains("not-a-uuid"), "{err}");
    }
}
