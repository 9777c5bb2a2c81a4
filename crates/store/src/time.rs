//! Instants as RFC 3339 text, both ways (UTC; no time-zone database).

/// Formats ns since the epoch as RFC 3339 UTC with microseconds.
pub fn rfc3339(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let micros = ns.rem_euclid(1_000_000_000) / 1000;
    let days = secs.div_euclid(86400);
    let tod = secs.rem_euclid(86400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        tod / 3600,
        tod % 3600 / 60,
        tod % 60
    )
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses `YYYY-MM-DD`, optionally followed by `THH:MM`, `:SS`, a
/// fraction and `Z` or an offset `±HH:MM` (UTC when none), into ns since
/// the epoch. None for anything else, or a date beyond what ns in an i64
/// can hold (years 1678 to 2261).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let d = b.get(from..from + len)?;
        d.iter()
            .all(u8::is_ascii_digit)
            .then(|| d.iter().fold(0i64, |n, c| n * 10 + i64::from(c - b'0')))
    };
    let (y, mo, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    if b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') || !(1..=12).contains(&mo) {
        return None;
    }
    let month_days = [
        31,
        28 + i64::from(y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)),
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if d < 1 || d > month_days[(mo - 1) as usize] {
        return None;
    }
    let mut secs = days_from_civil(y, mo, d) * 86_400;
    let mut frac_ns = 0i64;
    let mut i = 10;
    if i < b.len() {
        if !matches!(b[i], b'T' | b't' | b' ') {
            return None;
        }
        let (h, mi) = (num(i + 1, 2)?, num(i + 4, 2)?);
        if b.get(i + 3) != Some(&b':') || h > 23 || mi > 59 {
            return None;
        }
        secs += h * 3600 + mi * 60;
        i += 6;
        if b.get(i) == Some(&b':') {
            let sec = num(i + 1, 2)?;
            if sec > 60 {
                return None;
            }
            secs += sec;
            i += 3;
            if b.get(i) == Some(&b'.') {
                i += 1;
                let digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
                if digits == 0 {
                    return None;
                }
                let mut scale = 100_000_000;
                for c in &b[i..i + digits.min(9)] {
                    frac_ns += i64::from(c - b'0') * scale;
                    scale /= 10;
                }
                i += digits;
            }
        }
        match b.get(i) {
            None => {}
            Some(b'Z' | b'z') if i + 1 == b.len() => {}
            Some(&sign @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
                let (oh, om) = (num(i + 1, 2)?, num(i + 4, 2)?);
                if oh > 23 || om > 59 {
                    return None;
                }
                let offset = oh * 3600 + om * 60;
                secs -= if sign == b'+' { offset } else { -offset };
            }
            _ => return None,
        }
    }
    secs.checked_mul(1_000_000_000)?.checked_add(frac_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(rfc3339(951_782_400_000_000_000), "2000-02-29T00:00:00.000000Z");
        assert_eq!(rfc3339(1_700_000_000_123_456_789), "2023-11-14T22:13:20.123456Z");
        assert_eq!(rfc3339(-1_000), "1969-12-31T23:59:59.999999Z");
    }

    #[test]
    fn parses_what_it_formats_and_common_forms() {
        for ns in [0, 951_782_400_000_000_000, 1_700_000_000_123_456_000, -1_000] {
            assert_eq!(parse_rfc3339(&rfc3339(ns)), Some(ns));
        }
        assert_eq!(parse_rfc3339("2023-11-14"), Some(1_699_920_000_000_000_000));
        assert_eq!(
            parse_rfc3339("2023-11-14T22:13"),
            Some(1_700_000_000_000_000_000 - 20_000_000_000)
        );
        assert_eq!(parse_rfc3339("2023-11-15T00:13:20+02:00"), Some(1_700_000_000_000_000_000));
        assert_eq!(parse_rfc3339("2023-11-14T21:13:20-01:00"), Some(1_700_000_000_000_000_000));
        for bad in [
            "",
            "2023-13-01",
            "2023-02-29",
            "2023-11-14X",
            "2023-11-14T25:00",
            "2023-11-14T10:00:00.Z",
            "2023-11-14T10:00+0200",
            "9999-01-01",
            "２０２３-01-01",
            "2023-11-14T10:00:00Zjunk",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        assert_eq!(parse_rfc3339("2024-02-29"), Some(1_709_164_800_000_000_000));
    }
}
