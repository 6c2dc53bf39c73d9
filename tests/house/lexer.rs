//! Just enough of Rust's lexical rules to count braces: comments, strings
//! and character literals are blanked (newlines kept), so a brace inside
//! them is not counted.

/// A function found in source text.
#[derive(Debug)]
pub(crate) struct Function {
    pub(crate) name: String,
    /// Its first line, counting from 1.
    pub(crate) line: usize,
    /// From the `fn` line to its closing brace, both counted.
    pub(crate) lines: usize,
}

/// `code` with comments, strings and character literals replaced by spaces.
pub(crate) fn blank(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    let keep = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let rest = &chars[i..];
        let skip = match rest {
            ['/', '/', ..] => rest.iter().position(|&c| c == '\n').unwrap_or(rest.len()),
            ['/', '*', ..] => block_comment(rest),
            ['r', '#' | '"', ..] if i == 0 || !is_ident(chars[i - 1]) => raw_string(rest),
            ['b', 'r', '#' | '"', ..] if i == 0 || !is_ident(chars[i - 1]) => {
                1 + raw_string(&rest[1..])
            }
            ['"', ..] => string(rest),
            // `'\n'`, `'\''`, `'\u{..}'`: the escaped character, then up to the quote.
            ['\'', '\\', _, ..] => 4 + rest[3..].iter().position(|&c| c == '\'').unwrap_or(0),
            ['\'', _, '\'', ..] => 3,
            _ => 0,
        };
        if skip == 0 {
            out.push(chars[i]);
            i += 1;
        } else {
            let end = (i + skip).min(chars.len());
            out.extend(chars[i..end].iter().map(|&c| keep(c)));
            i = end;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn block_comment(rest: &[char]) -> usize {
    let mut depth = 0;
    let mut i = 0;
    while i + 1 < rest.len() {
        match (rest[i], rest[i + 1]) {
            ('/', '*') => {
                depth += 1;
                i += 2;
            }
            ('*', '/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    rest.len()
}

fn string(rest: &[char]) -> usize {
    let mut i = 1;
    while i < rest.len() {
        match rest[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    rest.len()
}

/// `r#"…"#`, starting at the `r`.
fn raw_string(rest: &[char]) -> usize {
    let hashes = rest[1..].iter().take_while(|&&c| c == '#').count();
    if rest.get(1 + hashes) != Some(&'"') {
        return 0;
    }
    let mut i = 2 + hashes;
    while i < rest.len() {
        if rest[i] == '"'
            && rest[i + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == '#')
                .count()
                == hashes
        {
            return i + 1 + hashes;
        }
        i += 1;
    }
    rest.len()
}

/// Every function with a body in `code`, with its length in lines.
pub(crate) fn functions(code: &str) -> Vec<Function> {
    let text = blank(code);
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(offset) = text[at..].find("fn ") {
        let start = at + offset;
        at = start + 3;
        if start > 0 && is_ident(char::from(bytes[start - 1])) {
            continue;
        }
        let name: String = text[at..].chars().take_while(|&c| is_ident(c)).collect();
        if name.is_empty() {
            continue;
        }
        let Some(open) = body_or_end(bytes, at) else {
            break;
        };
        if bytes[open] == b';' {
            continue; // a declaration without a body
        }
        let close = matching(bytes, open);
        let line = text[..start].matches('\n').count() + 1;
        let last = text[..close].matches('\n').count() + 1;
        found.push(Function {
            name,
            line,
            lines: last - line + 1,
        });
    }
    found
}

/// From `at` in a signature: the index of the body's `{`, or of the `;`
/// that ends a declaration, outside parentheses and brackets (a `[u8; 32]`
/// is a type, not the end).
fn body_or_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (i, &b) in bytes.iter().enumerate().skip(at) {
        match b {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            b'{' | b';' if depth == 0 => return Some(i),
            _ => {}
        }
    }
    None
}

/// The index of the brace that closes the one at `open`.
fn matching(bytes: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    bytes.len().saturating_sub(1)
}
