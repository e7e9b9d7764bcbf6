//! Kubernetes name syntax: qualified names, label values, DNS labels and subdomains.
//! Each check returns `Err(reason)` with a sentence a user can act on. No I/O here.

/// A DNS-1035 label: lowercase letters, digits and `-`, starting with a letter, ending with a
/// letter or digit, at most 63 characters. Karpenter requires it of both kinds' names.
pub fn check_dns1035_label(s: &str) -> Result<(), String> {
    const REASON: &str =
        "must be a DNS-1035 label: at most 63 lowercase letters, digits or '-', starting with a letter and ending with a letter or digit";
    if s.is_empty() || s.len() > 63 {
        return Err(REASON.into());
    }
    let bytes = s.as_bytes();
    let ok_body = bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
    let ok_first = bytes[0].is_ascii_lowercase();
    let last = bytes[bytes.len() - 1];
    let ok_last = last.is_ascii_lowercase() || last.is_ascii_digit();
    if ok_body && ok_first && ok_last {
        Ok(())
    } else {
        Err(REASON.into())
    }
}

/// A `generateName` prefix that becomes a DNS-1035 label once a random suffix is appended.
pub fn check_dns1035_prefix(s: &str) -> Result<(), String> {
    let trimmed = s.trim_end_matches('-');
    if trimmed.is_empty() {
        return Err("must start with a lowercase letter".into());
    }
    check_dns1035_label(trimmed)
        .map_err(|_| "must be a DNS-1035 label prefix: lowercase letters, digits or '-', starting with a letter".into())
}

/// A DNS-1123 subdomain: dot-separated lowercase alphanumeric labels (with inner `-`), at most
/// 253 characters.
pub fn check_dns1123_subdomain(s: &str) -> Result<(), String> {
    const REASON: &str = "must be a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters";
    if s.is_empty() || s.len() > 253 {
        return Err(REASON.into());
    }
    for label in s.split('.') {
        let b = label.as_bytes();
        let ok = !b.is_empty()
            && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-';
        if !ok {
            return Err(REASON.into());
        }
    }
    Ok(())
}

/// The name part of a qualified name or a non-empty label value: at most 63 characters of
/// `[A-Za-z0-9_.-]`, starting and ending with a letter or digit.
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// A qualified name such as a label key or taint key: an optional DNS-1123 subdomain prefix and
/// `/`, then a name of 1-63 characters of `[A-Za-z0-9_.-]` starting and ending alphanumeric.
pub fn check_qualified_name(s: &str) -> Result<(), String> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Err("prefix before '/' must not be empty".into());
        }
        check_dns1123_subdomain(prefix).map_err(|r| format!("prefix {r}"))?;
        if name.contains('/') {
            return Err("must contain at most one '/'".into());
        }
    }
    if name.is_empty() {
        return Err("name part must not be empty".into());
    }
    if !is_qualified_name_part(name) {
        return Err(
            "name part must be at most 63 characters of letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
                .into(),
        );
    }
    Ok(())
}

/// A label value: empty, or at most 63 characters of `[A-Za-z0-9_.-]` starting and ending with a
/// letter or digit.
pub fn check_label_value(s: &str) -> Result<(), String> {
    if s.is_empty() || is_qualified_name_part(s) {
        Ok(())
    } else {
        Err("must be empty or at most 63 characters of letters, digits, '-', '_' or '.', starting and ending with a letter or digit".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1035_labels() {
        for ok in ["service", "a", "a1", "service-lt", &"a".repeat(63)] {
            assert!(check_dns1035_label(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1st-pool", "team.gpu", "Service", "a-", "-a", &"a".repeat(64)] {
            assert!(check_dns1035_label(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn qualified_names() {
        for ok in ["nodeType", "example.com/blue", "karpenter.sh/capacity-type", "a_b.c", "A"] {
            assert!(check_qualified_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "/a", "a/", "a/b/c", "Example.com/a", "-a", "a b", "é", &"a".repeat(64)] {
            assert!(check_qualified_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn label_values() {
        for ok in ["", "service-2023", "true", "a.b_c"] {
            assert!(check_label_value(ok).is_ok(), "{ok}");
        }
        for bad in ["a/b", "-a", "a-", "ü", &"a".repeat(64)] {
            assert!(check_label_value(bad).is_err(), "{bad}");
        }
    }
}
