//! How deeply a MessagePack payload nests, measured without recursion, so
//! a hostile payload (thousands of nested arrays) is refused before any
//! recursive decoder sees it.

/// The deepest nesting of maps and arrays a payload may have. Contexts
/// nest a few levels; the protocol's own structure needs six.
pub const MAX_NESTING: usize = 128;

/// Whether `bytes` nests maps and arrays deeper than `limit`. Bytes that are
/// not MessagePack are not judged here (the decoder reports them).
#[must_use]
pub fn nests_deeper_than(bytes: &[u8], limit: usize) -> bool {
    // Children still to read, per open container.
    let mut open: Vec<u64> = vec![1];
    let mut at = 0usize;
    while let Some(left) = open.last_mut() {
        if *left == 0 {
            open.pop();
            continue;
        }
        *left -= 1;
        let Some(Item { children, next }) = item(bytes, at) else {
            return false;
        };
        at = next;
        if children > 0 {
            open.push(children);
            // The root value is not a level of nesting; each open container is.
            if open.len() - 1 > limit {
                return true;
            }
        }
    }
    false
}

/// Where the value that starts at `at` ends (the index after its last
/// byte), its maps and arrays walked without recursion; `None` for bytes
/// that end early or are not MessagePack.
pub(crate) fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    // Values still to read, counting this one and what it contains.
    let (mut left, mut at) = (1u64, at);
    while left > 0 {
        let Item { children, next } = item(bytes, at)?;
        left = left - 1 + children;
        at = next;
    }
    (at <= bytes.len()).then_some(at)
}

/// One value's header: how many values it contains, and where the next
/// value starts.
struct Item {
    children: u64,
    next: usize,
}

/// The value whose marker is at `at`; `None` for bytes that end early or
/// are not MessagePack.
fn item(bytes: &[u8], at: usize) -> Option<Item> {
    let marker = *bytes.get(at)?;
    let read = |n: usize| -> Option<u64> {
        let slice = bytes.get(at + 1..at + 1 + n)?;
        Some(slice.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    };
    // (bytes of the length field, payload bytes after it, values inside)
    let (len_bytes, skip, children): (usize, u64, u64) = match marker {
        0x00..=0x7f | 0xc0 | 0xc2 | 0xc3 | 0xe0..=0xff => (0, 0, 0),
        0x80..=0x8f => (0, 0, 2 * u64::from(marker & 0x0f)),
        0x90..=0x9f => (0, 0, u64::from(marker & 0x0f)),
        0xa0..=0xbf => (0, u64::from(marker & 0x1f), 0),
        0xc4 | 0xd9 => (1, read(1)?, 0),
        0xc5 | 0xda => (2, read(2)?, 0),
        0xc6 | 0xdb => (4, read(4)?, 0),
        0xc7 => (1, read(1)? + 1, 0),
        0xc8 => (2, read(2)? + 1, 0),
        0xc9 => (4, read(4)? + 1, 0),
        0xcc | 0xd0 => (0, 1, 0),
        0xcd | 0xd1 => (0, 2, 0),
        0xca | 0xce | 0xd2 => (0, 4, 0),
        0xcb | 0xcf | 0xd3 => (0, 8, 0),
        0xd4 => (0, 2, 0),
        0xd5 => (0, 3, 0),
        0xd6 => (0, 5, 0),
        0xd7 => (0, 9, 0),
        0xd8 => (0, 17, 0),
        0xdc => (2, 0, read(2)?),
        0xdd => (4, 0, read(4)?),
        0xde => (2, 0, 2 * read(2)?),
        0xdf => (4, 0, 2 * read(4)?),
        0xc1 => return None,
    };
    let next = at
        .checked_add(1 + len_bytes)?
        .checked_add(usize::try_from(skip).ok()?)?;
    Some(Item { children, next })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> Vec<u8> {
        let mut bytes = vec![0x91; depth];
        bytes.push(0xc0);
        bytes
    }

    #[test]
    fn finds_where_a_value_ends() {
        // {"a": {"b": [1, "x"]}}, then a trailing nil.
        let map = [
            0x81, 0xa1, b'a', 0x81, 0xa1, b'b', 0x92, 0x01, 0xa1, b'x', 0xc0,
        ];
        assert_eq!(value_end(&map, 0), Some(10));
        assert_eq!(value_end(&map, 3), Some(10), "the inner map");
        assert_eq!(value_end(&map, 10), Some(11), "the nil");
        assert_eq!(value_end(&map[..9], 0), None, "cut short");
        assert_eq!(value_end(&[0xd9, 5, b'a'], 0), None, "a string cut short");
    }

    #[test]
    fn counts_arrays_and_maps() {
        assert!(!nests_deeper_than(&nested(128), 128));
        assert!(nests_deeper_than(&nested(129), 128));
        assert!(nests_deeper_than(&nested(10_000), 128));
        // {"a": {"b": [1, "x"]}}: three levels.
        let map = [0x81, 0xa1, b'a', 0x81, 0xa1, b'b', 0x92, 0x01, 0xa1, b'x'];
        assert!(!nests_deeper_than(&map, 3));
        assert!(nests_deeper_than(&map, 2));
    }

    #[test]
    fn long_flat_values_are_skipped_not_counted() {
        // [a 44-byte string, [4,464 small ints]]: two levels.
        let mut bytes = vec![0x92, 0xd9, 44];
        bytes.extend(std::iter::repeat_n(b'x', 44));
        bytes.extend([0xdc, 0x11, 0x70]);
        bytes.extend(std::iter::repeat_n(0x01, 0x1170));
        assert!(!nests_deeper_than(&bytes, 2));
        assert!(nests_deeper_than(&bytes, 1));
    }

    #[test]
    fn truncated_or_invalid_bytes_are_left_to_the_decoder() {
        assert!(!nests_deeper_than(&[], 1));
        assert!(!nests_deeper_than(&[0x91, 0x91], 5));
        assert!(!nests_deeper_than(&[0xc1], 5));
        assert!(!nests_deeper_than(&[0xdb, 0xff, 0xff, 0xff, 0xff], 5));
    }
}
