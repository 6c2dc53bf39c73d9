use std::collections::HashMap;

use super::*;
use crate::{Envelope, Message, Role, Wire};

fn objects(checked: &CheckedOut) -> HashMap<String, Vec<u8>> {
    checked.objects.iter().cloned().collect()
}

fn big_session(parts: &[usize]) -> Envelope {
    let mut envelope = Envelope::task("question");
    for (index, size) in parts.iter().enumerate() {
        let text = char::from(b'a' + u8::try_from(index).unwrap())
            .to_string()
            .repeat(*size);
        envelope
            .context
            .messages
            .push(Message::new(Role::Agent, text));
    }
    envelope
}

#[test]
fn a_payload_under_the_threshold_is_unchanged() {
    let bytes = big_session(&[1000]).to_msgpack().unwrap();
    let checked = check_out(bytes.clone(), 10_000, 100).unwrap();
    assert_eq!(checked.payload, bytes);
    assert!(checked.objects.is_empty());
}

#[test]
fn large_messages_go_to_objects_and_come_back() {
    let envelope = big_session(&[300_000, 10, 400_000]);
    let bytes = envelope.to_msgpack().unwrap();
    let checked = check_out(bytes, 100_000, 4096).unwrap();
    assert!(checked.payload.len() < 2_000, "{}", checked.payload.len());
    assert_eq!(checked.objects.len(), 2);
    let small = Envelope::from_msgpack(&checked.payload).unwrap();
    assert_eq!(small.context.messages[1].content, "");
    assert_eq!(small.context.messages[2].content, "bbbbbbbbbb");
    let listed = claims(&checked.payload).unwrap();
    assert_eq!(
        listed.iter().map(|c| c.path.as_str()).collect::<Vec<_>>(),
        ["/context/messages/1/content", "/context/messages/3/content"]
    );
    assert!(
        listed
            .iter()
            .all(|c| c.object.starts_with("sha256-") && c.object.len() == 71)
    );
    let back = restore(&checked.payload, &objects(&checked)).unwrap();
    assert_eq!(
        Envelope::from_msgpack_limited(&back, 10 << 20).unwrap(),
        envelope
    );
}

#[test]
fn the_same_text_is_one_object_on_every_hop() {
    let first = check_out(big_session(&[200_000]).to_msgpack().unwrap(), 50_000, 4096).unwrap();
    let second = check_out(
        big_session(&[200_000, 300_000]).to_msgpack().unwrap(),
        50_000,
        4096,
    )
    .unwrap();
    assert_eq!(first.objects.len(), 1);
    assert_eq!(second.objects.len(), 2);
    assert_eq!(first.objects[0].0, second.objects[0].0);
    // Two messages with the same text are one object, claimed twice.
    let mut twice = big_session(&[200_000]);
    let copy = twice.context.messages[1].clone();
    twice.context.messages.push(copy);
    let checked = check_out(twice.to_msgpack().unwrap(), 50_000, 4096).unwrap();
    assert_eq!(checked.objects.len(), 1);
    assert_eq!(claims(&checked.payload).unwrap().len(), 2);
}

#[test]
fn many_small_messages_go_as_an_array() {
    let mut envelope = Envelope::task("q");
    for n in 0..20_000 {
        envelope
            .context
            .messages
            .push(Message::new(Role::User, format!("message {n}")));
    }
    let checked = check_out(envelope.to_msgpack().unwrap(), 100_000, 4096).unwrap();
    let listed = claims(&checked.payload).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].path, "/context/messages");
    let small = Envelope::from_msgpack(&checked.payload).unwrap();
    assert!(small.context.messages.is_empty());
    let back = restore(&checked.payload, &objects(&checked)).unwrap();
    assert_eq!(
        Envelope::from_msgpack_limited(&back, 10 << 20).unwrap(),
        envelope
    );
}

#[test]
fn variables_with_odd_keys_round_trip() {
    let envelope = Envelope::task("q").with_variable("a/b~c", "x".repeat(100_000));
    let checked = check_out(envelope.to_msgpack().unwrap(), 10_000, 4096).unwrap();
    assert_eq!(
        claims(&checked.payload).unwrap()[0].path,
        "/context/variables/a~1b~0c"
    );
    let back = restore(&checked.payload, &objects(&checked)).unwrap();
    assert_eq!(
        Envelope::from_msgpack_limited(&back, 10 << 20).unwrap(),
        envelope
    );
}

#[test]
fn a_missing_or_altered_object_is_an_error() {
    let checked = check_out(big_session(&[200_000]).to_msgpack().unwrap(), 50_000, 4096).unwrap();
    let err = restore(&checked.payload, &HashMap::new()).unwrap_err();
    assert!(err.to_string().contains("is missing"), "{err}");
    let mut altered = objects(&checked);
    for bytes in altered.values_mut() {
        bytes[5] ^= 1;
    }
    let err = restore(&checked.payload, &altered).unwrap_err();
    assert!(err.to_string().contains("does not match"), "{err}");
}

#[test]
fn not_a_map_is_an_error() {
    assert!(check_out(vec![0x93, 1, 2, 3], 1, 1).is_err());
    assert!(claims(&[0xc1]).is_err());
}

#[test]
fn claims_are_written_as_named_maps() {
    let checked = check_out(big_session(&[200_000]).to_msgpack().unwrap(), 50_000, 4096).unwrap();
    let value = rmpv::decode::read_value(&mut &checked.payload[..]).unwrap();
    let claims = value
        .as_map()
        .unwrap()
        .iter()
        .find(|(k, _)| k.as_str() == Some("claims"))
        .map(|(_, v)| v.clone())
        .unwrap();
    let first = &claims.as_array().unwrap()[0];
    let keys: Vec<_> = first
        .as_map()
        .expect("a map, as PROTOCOL.md shows")
        .iter()
        .map(|(k, _)| k.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys, ["path", "object", "size"]);
}
