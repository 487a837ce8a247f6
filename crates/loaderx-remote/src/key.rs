//! The key a store URL names, exactly as written, or a refusal saying why.
//!
//! A URL parser rewrites what it is given: it drops a query and a fragment,
//! resolves `.` and `..` segments (percent-encoded ones too), strips control
//! characters and spaces at the ends and removes tabs and newlines anywhere,
//! and reads `\` as `/` in `http(s)://` and `file://` URLs. Each of these would
//! make an open read, and an upload write, a key other than the one the caller
//! wrote, so each is refused here, naming what would have changed.

use loaderx_gather::{Error, Result};
use percent_encoding::percent_decode_str;

/// Refuses `url` when the key it names is not the text after its authority,
/// percent-decoded. `url` is the caller's text, trailing slashes included.
pub(crate) fn check_written(url: &str) -> Result<()> {
    let refuse = |why: String| Err(Error::invalid(format!("{url:?}: {why}")));
    if let Some((at, c)) = url.chars().enumerate().find(|(_, c)| c.is_control()) {
        return refuse(format!(
            "holds the control character U+{:04X} at position {at}; a URL drops or rewrites \
             such characters, so it would name another key",
            c as u32
        ));
    }
    if url.trim() != url {
        return refuse(
            "begins or ends with white space, which a URL drops, so it would name another key"
                .into(),
        );
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(());
    };
    if let Some(at) = rest.find(['?', '#']) {
        let what = if rest[at..].starts_with('?') {
            "a query (?...)"
        } else {
            "a fragment (#...)"
        };
        return refuse(format!(
            "holds {what}, which is not part of an object's key, so the URL would name the key \
             before it; a key that holds ? or # writes them %3F and %23"
        ));
    }
    let path = rest.find('/').map_or("", |i| &rest[i + 1..]);
    let path = path.trim_end_matches('/');
    if path.is_empty() {
        return Ok(());
    }
    let special = matches!(
        scheme.to_ascii_lowercase().as_str(),
        "http" | "https" | "file"
    );
    for raw in path.split('/') {
        if raw.is_empty() {
            return refuse(
                "holds an empty path segment (//); object_store's keys have none, so it would \
                 name another key"
                    .into(),
            );
        }
        if special && raw.contains('\\') {
            return refuse(format!(
                "its path segment {raw:?} holds \\, which a {scheme}:// URL reads as /, so it \
                 would name another key; write / or %5C"
            ));
        }
        let decoded = percent_decode_str(raw).decode_utf8_lossy();
        if decoded == "." || decoded == ".." {
            return refuse(format!(
                "its path segment {raw:?} means {decoded:?}, which a URL resolves away, so it \
                 would name another key; name the store's key itself"
            ));
        }
        if let Some(c) = decoded.chars().find(|c| c.is_control()) {
            return refuse(format!(
                "its path segment {raw:?} decodes to the control character U+{:04X}, which no \
                 object key loaderx reads holds",
                c as u32
            ));
        }
    }
    Ok(())
}

/// Refuses a parsed URL whose path is not the one written: a last check that
/// no rewriting the checks above do not know of changes the key.
pub(crate) fn check_parsed(url: &str, parsed: &url::Url) -> Result<()> {
    let written = url
        .split_once("://")
        .and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..]))
        .unwrap_or("");
    let decode = |p: &str| {
        percent_decode_str(p.trim_matches('/'))
            .decode_utf8_lossy()
            .into_owned()
    };
    let (want, got) = (decode(written), decode(parsed.path()));
    if want != got {
        return Err(Error::invalid(format!(
            "{url:?}: a URL parser reads its key as {got:?}, not {want:?} as written"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(url: &str) -> String {
        match check_written(url) {
            Err(e) => e.to_string(),
            Ok(()) => panic!("{url:?} was taken"),
        }
    }

    #[test]
    fn rewritten_keys_are_refused_saying_why() {
        for (url, want) in [
            ("s3://b/runs/q?x=1", "holds a query (?...)"),
            ("s3://b/h#frag", "holds a fragment (#...)"),
            (
                "s3://b/a/%2e%2e/b",
                r#"its path segment "%2e%2e" means "..""#,
            ),
            ("file:///t/a/../b", r#"its path segment ".." means "..""#),
            ("s3://b/a/%2E/b", r#"its path segment "%2E" means ".""#),
            (
                "s3://b/q\u{1}",
                "holds the control character U+0001 at position 8",
            ),
            (
                "s3://b/q\n",
                "holds the control character U+000A at position 8",
            ),
            (
                "s3://b/a\tb",
                "holds the control character U+0009 at position 8",
            ),
            ("s3://b/q ", "begins or ends with white space"),
            ("s3://b/a//b", "holds an empty path segment (//)"),
            ("http://h/a\\b", r#"its path segment "a\\b" holds \"#),
            ("s3://b/a%0Ab", "decodes to the control character U+000A"),
        ] {
            let msg = refusal(url);
            assert!(msg.starts_with(&format!("{url:?}: ")), "{msg}");
            assert!(msg.contains(want), "{url:?}: {msg}");
        }
    }

    #[test]
    fn keys_as_written_are_taken() {
        for url in [
            "s3://b/runs/q",
            "s3://b/runs/q/",
            "s3://b/a%20b/c%3Fd",
            "s3://b/a\\b",
            "s3://b/.hidden/x..y",
            "http://127.0.0.1:8/",
            "s3://b",
        ] {
            check_written(url).unwrap();
            let parsed = url::Url::parse(url.trim_end_matches('/')).unwrap();
            check_parsed(url, &parsed).unwrap();
        }
    }
}
