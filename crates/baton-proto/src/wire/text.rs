//! Text forms the protocol's names use: bytes in hex (digests in object
//! names and keys), and free text made safe as a key or subject token.

use std::fmt::Write as _;

/// `bytes` in lowercase hex.
#[must_use]
pub fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut text, byte| {
            let _ = write!(text, "{byte:02x}");
            text
        })
}

/// `text` with every character other than `a-z`, `A-Z`, `0-9`, `-` and `_`
/// replaced by `_`: safe in a key-value key and as a subject token.
#[must_use]
pub fn token_safe(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_hex_and_names_lose_what_a_token_cannot_hold() {
        assert_eq!(hex(&[0, 15, 255]), "000fff");
        assert_eq!(
            token_safe("http://x.io/v1/gpt-4o_mini é"),
            "http___x_io_v1_gpt-4o_mini__"
        );
    }
}
