//! Kubernetes quantities (`500m`, `1Gi`, `64T`, `1e3`) and Go durations (`1m30s`), parsed into
//! plain numbers for range checks. No I/O here.

/// Parses a Kubernetes quantity into its value (bytes, cores, ...). Returns `None` when the text is
/// not a quantity in the API server's grammar: an optional sign, a decimal number, and either a
/// binary suffix (`Ki`..`Ei`), a decimal suffix (`n`, `u`, `m`, `k`, `M`, `G`, `T`, `P`, `E`) or a
/// decimal exponent (`e3`, `E-2`).
pub fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let (sign, rest) = match s.as_bytes().first()? {
        b'+' => (1.0, &s[1..]),
        b'-' => (-1.0, &s[1..]),
        _ => (1.0, s),
    };
    let number_len = rest.bytes().take_while(|b| b.is_ascii_digit() || *b == b'.').count();
    let (number, suffix) = rest.split_at(number_len);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    let multiplier = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        exp if exp.starts_with('e') || exp.starts_with('E') => {
            let digits = &exp[1..];
            let unsigned = digits.strip_prefix(['+', '-']).unwrap_or(digits);
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            10f64.powi(digits.parse::<i32>().ok()?)
        }
        _ => return None,
    };
    Some(sign * value * multiplier)
}

/// The largest amount of one resource karpenter-rs keeps, in its integer unit (millicores for
/// cpu, the base unit otherwise): 2^62, so that the sum of two such amounts still fits an `i64`.
pub const MAX_AMOUNT: i64 = 1 << 62;

/// The largest quantity of `resource` a spec may give, as the value `parse_quantity` returns
/// (cores for cpu) and as the text an error shows: 4611686018427387 cores for cpu (2^62
/// millicores), 4Ei for bytes, 2^62 for anything else.
pub fn max_quantity(resource: &str) -> (f64, String) {
    match resource {
        "cpu" => ((MAX_AMOUNT / 1000) as f64, (MAX_AMOUNT / 1000).to_string()),
        "memory" | "ephemeral-storage" => (MAX_AMOUNT as f64, "4Ei".to_string()),
        r if r.starts_with("hugepages-") => (MAX_AMOUNT as f64, "4Ei".to_string()),
        _ => (MAX_AMOUNT as f64, MAX_AMOUNT.to_string()),
    }
}

/// Checks a spec's quantity of `resource`: a quantity, not negative, at most `max_quantity`.
/// The error says what is wrong, for a `FieldError` on the field holding it.
pub fn check_spec_quantity(resource: &str, text: &str) -> Result<f64, String> {
    let (max, max_text) = max_quantity(resource);
    match parse_quantity(text) {
        None => Err("must be a quantity such as 100, 500m or 1000Gi".to_string()),
        Some(v) if v < 0.0 => Err("must not be negative".to_string()),
        Some(v) if v > max => Err(format!("must be at most {max_text}")),
        Some(v) => Ok(v),
    }
}

/// Parses a Go duration (`300ms`, `1m30s`, `-1h`, `0`) into seconds.
pub fn parse_go_duration(s: &str) -> Option<f64> {
    go_duration_nanos(s, false).ok().map(|nanos| nanos as f64 / 1e9)
}

/// Parses a duration as Go writes one (`time.ParseDuration`, the form of Karpenter's env values and
/// of the settings ConfigMap's `batchMaxDuration`): one or more decimal numbers, each followed by a
/// unit `ns`, `us` (`µs`), `ms`, `s`, `m` or `h`, e.g. `500ms`, `1m30s`, `1h2m3.5s`, `0`; and, as
/// an extension for long certificate lifetimes, `d` (24h), e.g. `365d`. Negative durations are
/// refused.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    if s.starts_with('-') {
        return Err(format!("invalid duration {s:?}: must not be negative (e.g. 10s, 1m30s, 500ms, 2h)"));
    }
    let nanos = go_duration_nanos(s, true)?;
    u64::try_from(nanos)
        .map(std::time::Duration::from_nanos)
        .map_err(|_| format!("invalid duration {s:?}: too long (e.g. 10s, 1m30s, 500ms, 2h)"))
}

/// The one duration parser: a duration as Go writes one (`time.ParseDuration`, the form of
/// Karpenter's env values, the settings ConfigMap's `batchMaxDuration` and kubelet grace
/// periods): an optional sign, then one or more decimal numbers each followed by a unit `ns`,
/// `us` (`µs`), `ms`, `s`, `m` or `h`, e.g. `500ms`, `1m30s`, `-1h2m3.5s`, `0`; with `days`, also
/// `d` (24h, an extension for long certificate lifetimes, e.g. `365d`). In nanoseconds, computed
/// in integers as Go does (so `0.1s` is exactly 100ms); the error names the text and why.
pub fn go_duration_nanos(s: &str, days: bool) -> Result<i128, String> {
    let units = if days {
        "ns, us, ms, s, m, h or d"
    } else {
        "ns, us, ms, s, m or h"
    };
    let err = |why: &str| format!("invalid duration {s:?}: {why} (e.g. 10s, 1m30s, 500ms, 2h)");
    let (sign, unsigned) = match s.as_bytes().first() {
        Some(b'-') => (-1, &s[1..]),
        Some(b'+') => (1, &s[1..]),
        Some(_) => (1, s),
        None => return Err(err("empty")),
    };
    if unsigned == "0" {
        return Ok(0);
    }
    if unsigned.is_empty() {
        return Err(err("expected a number and a unit"));
    }
    let mut rest = unsigned;
    let mut total: i128 = 0;
    let too_long = || err("too long");
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| err(&format!("a number needs a unit: {units}")))?;
        let (number, tail) = rest.split_at(number_len);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(err("expected a number before each unit"));
        }
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let unit_nanos: i128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "d" if days => 86_400_000_000_000,
            _ => return Err(err(&format!("unknown unit {unit:?}: expected {units}"))),
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let whole: i128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| too_long())?
        };
        let mut nanos = whole.checked_mul(unit_nanos).ok_or_else(too_long)?;
        let mut scale = unit_nanos;
        for digit in fraction.bytes().take(30) {
            scale /= 10;
            nanos += i128::from(digit - b'0') * scale;
        }
        // At most what a u64 of nanoseconds holds (584 years), as Go's int64 limits it.
        total = total
            .checked_add(nanos)
            .filter(|t| *t <= i128::from(u64::MAX))
            .ok_or_else(too_long)?;
        rest = tail;
    }
    Ok(sign * total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_parser_serves_kubelet_grace_periods_and_the_binarys_settings() {
        assert_eq!(go_duration_nanos("0.1s", false), Ok(100_000_000), "exact, as Go computes it");
        assert_eq!(go_duration_nanos("-1h2m3.5s", false), Ok(-3_723_500_000_000));
        assert_eq!(go_duration_nanos("365d", true), Ok(365 * 86_400_000_000_000));
        let refused = go_duration_nanos("1d", false).unwrap_err();
        assert!(refused.contains("unknown unit \"d\"") && refused.contains("\"1d\""), "{refused}");
        assert!(go_duration_nanos("", false).unwrap_err().contains("empty"));
        assert!(go_duration_nanos("10", false).unwrap_err().contains("needs a unit"));
        assert!(go_duration_nanos("99999999999999999999h", false).unwrap_err().contains("too long"));
        assert_eq!(parse_go_duration("1m30s"), Some(90.0));
    }

    #[test]
    fn parses_quantities() {
        assert_eq!(parse_quantity("1G"), Some(1e9));
        assert_eq!(parse_quantity("64T"), Some(64e12));
        assert_eq!(parse_quantity("953Mi"), Some(953.0 * 1048576.0));
        assert_eq!(parse_quantity("500m"), Some(0.5));
        assert_eq!(parse_quantity("-1"), Some(-1.0));
        assert_eq!(parse_quantity("1e3"), Some(1000.0));
        assert_eq!(parse_quantity("20"), Some(20.0));
        for bad in ["", "110GB", "5%3", "abc", "1.2.3", "Gi", "1e", "1 Gi"] {
            assert_eq!(parse_quantity(bad), None, "{bad}");
        }
    }

    #[test]
    fn spec_quantities_are_bounded_so_sums_cannot_overflow() {
        assert_eq!(check_spec_quantity("memory", "4Ei"), Ok(4.0 * 1024f64.powi(6)));
        assert_eq!(check_spec_quantity("memory", "8Ei"), Err("must be at most 4Ei".to_string()));
        assert_eq!(check_spec_quantity("cpu", "4611686018427387"), Ok(4611686018427387.0));
        assert_eq!(check_spec_quantity("cpu", "1E"), Err("must be at most 4611686018427387".to_string()));
        assert_eq!(check_spec_quantity("nvidia.com/gpu", "1e400"), Err("must be at most 4611686018427387904".to_string()));
        assert_eq!(check_spec_quantity("cpu", "-1"), Err("must not be negative".to_string()));
        assert!(check_spec_quantity("cpu", "lots").unwrap_err().contains("quantity"));
    }

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_go_duration("1m"), Some(60.0));
        assert_eq!(parse_go_duration("1m30s"), Some(90.0));
        assert_eq!(parse_go_duration("0"), Some(0.0));
        assert_eq!(parse_go_duration("1.5h"), Some(5400.0));
        for bad in ["", "1", "m", "1x", "1m30"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }
}
