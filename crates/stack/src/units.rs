//! Quantities written in stack files: durations (`"10ms"`, `"1.5s"`), byte sizes (`1500`,
//! `"64KiB"`, `"1MB"`) and bandwidths (`"100Mbit"`, `"10Mbps"`, in bits per second).
//!
//! Numbers are read as exact decimals (no floating point), so `"1.5s"` is exactly 1.5 s; a
//! quantity too large for its type is an error, never a wrap or a panic. Part of issue 2 §3 /
//! DESIGN.md §6.10: the catalog's parameter parser and the scenario parser both use these.

use viastack_kernel::Duration;

/// Why a quantity could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    /// Nothing was written.
    #[error("empty {what}; expected {expected}")]
    Empty {
        /// "duration", "byte size", "bandwidth".
        what: &'static str,
        /// An example of the accepted form.
        expected: &'static str,
    },
    /// The number part is not a decimal number.
    #[error("`{text}` is not a {what}; expected {expected}")]
    BadNumber {
        /// The input.
        text: String,
        /// "duration", "byte size", "bandwidth".
        what: &'static str,
        /// An example of the accepted form.
        expected: &'static str,
    },
    /// The unit is not one of the known ones.
    #[error("unknown {what} unit `{unit}` in `{text}`; expected one of {units}")]
    UnknownUnit {
        /// The input.
        text: String,
        /// The unit as written.
        unit: String,
        /// "duration", "byte size", "bandwidth".
        what: &'static str,
        /// The accepted units.
        units: &'static str,
    },
    /// A number without the unit this quantity needs.
    #[error("`{text}` has no unit; expected {expected}")]
    MissingUnit {
        /// The input.
        text: String,
        /// An example of the accepted form.
        expected: &'static str,
    },
    /// Too large to represent.
    #[error("{what} `{text}` is too large")]
    Overflow {
        /// The input.
        text: String,
        /// "duration", "byte size", "bandwidth".
        what: &'static str,
    },
}

/// Accepted duration units.
pub const DURATION_UNITS: &str = "ns, us (or µs), ms, s, m, h";
/// Accepted byte-size units.
pub const BYTE_UNITS: &str = "B, KB, KiB, MB, MiB, GB, GiB, TB, TiB (or none)";
/// Accepted bandwidth units.
pub const BANDWIDTH_UNITS: &str = "bit, Kbit, Mbit, Gbit, Tbit, bps, Kbps, Mbps, Gbps, Tbps";

const DURATION_EXAMPLE: &str = "a number and a unit such as \"10ms\", \"1.5s\", \"200us\", \"2m\"";
const BYTES_EXAMPLE: &str = "an integer or a string such as \"1500\", \"64KiB\", \"1MB\"";
const BANDWIDTH_EXAMPLE: &str = "a number and a unit such as \"100Mbit\", \"1Gbit\", \"10Mbps\"";

/// A decimal number split from its unit: integer digits, fraction digits, unit.
struct Split<'a> {
    int: &'a str,
    frac: &'a str,
    unit: &'a str,
}

fn split(text: &str) -> Option<Split<'_>> {
    let t = text.trim();
    let num_end = t
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.' || *c == '_'))
        .map_or(t.len(), |(i, _)| i);
    let (num, unit) = t.split_at(num_end);
    let (int, frac) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit() || c == '_');
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
        return None;
    }
    if num.ends_with('.') && frac.is_empty() && int.is_empty() {
        return None;
    }
    Some(Split {
        int,
        frac,
        unit: unit.trim(),
    })
}

/// `int.frac × scale`, truncated to an integer, or `None` on overflow.
fn scaled(int: &str, frac: &str, scale: u128) -> Option<u128> {
    let mut whole: u128 = 0;
    for c in int.chars().filter(|c| *c != '_') {
        whole = whole
            .checked_mul(10)?
            .checked_add(u128::from(c.to_digit(10)?))?;
    }
    let mut value = whole.checked_mul(scale)?;
    // Fraction: at most 18 digits matter (scales are below 10^18).
    let mut num: u128 = 0;
    let mut den: u128 = 1;
    for c in frac.chars().filter(|c| *c != '_').take(18) {
        num = num * 10 + u128::from(c.to_digit(10)?);
        den *= 10;
    }
    value = value.checked_add(num.checked_mul(scale)? / den)?;
    Some(value)
}

/// Reads a duration such as `"10ms"`, `"1.5s"`, `"200us"`, `"2m"`, `"0s"`. A unit is required.
///
/// # Errors
/// [`UnitError`] for an empty text, a bad number, a missing or unknown unit, or a duration
/// beyond `u64` nanoseconds.
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    const WHAT: &str = "duration";
    if text.trim().is_empty() {
        return Err(UnitError::Empty {
            what: WHAT,
            expected: DURATION_EXAMPLE,
        });
    }
    let s = split(text).ok_or_else(|| UnitError::BadNumber {
        text: text.to_string(),
        what: WHAT,
        expected: DURATION_EXAMPLE,
    })?;
    let scale: u128 = match s.unit {
        "" => {
            return Err(UnitError::MissingUnit {
                text: text.to_string(),
                expected: DURATION_EXAMPLE,
            })
        }
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        unit => {
            return Err(UnitError::UnknownUnit {
                text: text.to_string(),
                unit: unit.to_string(),
                what: WHAT,
                units: DURATION_UNITS,
            })
        }
    };
    let nanos = scaled(s.int, s.frac, scale)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| UnitError::Overflow {
            text: text.to_string(),
            what: WHAT,
        })?;
    Ok(Duration::from_nanos(nanos))
}

/// Reads a byte size written as a string: `"1500"`, `"64KiB"`, `"1MB"`, `"1.5KiB"` (rounded
/// down to whole bytes). Units are case-sensitive; `K` = 1000, `Ki` = 1024.
///
/// # Errors
/// [`UnitError`] for an empty text, a bad number, an unknown unit or more than `u64` bytes.
pub fn parse_bytes(text: &str) -> Result<u64, UnitError> {
    const WHAT: &str = "byte size";
    if text.trim().is_empty() {
        return Err(UnitError::Empty {
            what: WHAT,
            expected: BYTES_EXAMPLE,
        });
    }
    let s = split(text).ok_or_else(|| UnitError::BadNumber {
        text: text.to_string(),
        what: WHAT,
        expected: BYTES_EXAMPLE,
    })?;
    let scale: u128 = match s.unit {
        "" | "B" => 1,
        "KB" | "kB" => 1_000,
        "KiB" => 1 << 10,
        "MB" => 1_000_000,
        "MiB" => 1 << 20,
        "GB" => 1_000_000_000,
        "GiB" => 1 << 30,
        "TB" => 1_000_000_000_000,
        "TiB" => 1 << 40,
        unit => {
            return Err(UnitError::UnknownUnit {
                text: text.to_string(),
                unit: unit.to_string(),
                what: WHAT,
                units: BYTE_UNITS,
            })
        }
    };
    scaled(s.int, s.frac, scale)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| UnitError::Overflow {
            text: text.to_string(),
            what: WHAT,
        })
}

/// Reads a bandwidth in bits per second: `"100Mbit"`, `"1Gbit"`, `"10Mbps"`, `"1.5Gbit"`.
/// Prefixes are decimal (`K`/`k` = 1000). A unit is required.
///
/// # Errors
/// [`UnitError`] for an empty text, a bad number, a missing or unknown unit, or more than
/// `u64` bits/s.
pub fn parse_bandwidth(text: &str) -> Result<u64, UnitError> {
    const WHAT: &str = "bandwidth";
    if text.trim().is_empty() {
        return Err(UnitError::Empty {
            what: WHAT,
            expected: BANDWIDTH_EXAMPLE,
        });
    }
    let s = split(text).ok_or_else(|| UnitError::BadNumber {
        text: text.to_string(),
        what: WHAT,
        expected: BANDWIDTH_EXAMPLE,
    })?;
    let prefix = s
        .unit
        .strip_suffix("bit")
        .or_else(|| s.unit.strip_suffix("bps"));
    if s.unit.is_empty() {
        return Err(UnitError::MissingUnit {
            text: text.to_string(),
            expected: BANDWIDTH_EXAMPLE,
        });
    }
    let scale: u128 = match prefix {
        Some("") => 1,
        Some("K" | "k") => 1_000,
        Some("M") => 1_000_000,
        Some("G") => 1_000_000_000,
        Some("T") => 1_000_000_000_000,
        _ => {
            return Err(UnitError::UnknownUnit {
                text: text.to_string(),
                unit: s.unit.to_string(),
                what: WHAT,
                units: BANDWIDTH_UNITS,
            })
        }
    };
    scaled(s.int, s.frac, scale)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| UnitError::Overflow {
            text: text.to_string(),
            what: WHAT,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10ms"), Ok(Duration::from_millis(10)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("200us"), Ok(Duration::from_micros(200)));
        assert_eq!(parse_duration("200µs"), Ok(Duration::from_micros(200)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse_duration("0ms"), Ok(Duration::ZERO));
        assert_eq!(parse_duration(" 3 s "), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration(".5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1_000ms"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("0.000000001s"), Ok(Duration::from_nanos(1)));
    }

    #[test]
    fn bad_durations() {
        assert!(matches!(parse_duration(""), Err(UnitError::Empty { .. })));
        assert!(matches!(
            parse_duration("10"),
            Err(UnitError::MissingUnit { .. })
        ));
        assert!(matches!(
            parse_duration("10 parsecs"),
            Err(UnitError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_duration("ms"),
            Err(UnitError::BadNumber { .. })
        ));
        assert!(matches!(
            parse_duration("-1s"),
            Err(UnitError::BadNumber { .. })
        ));
        assert!(matches!(
            parse_duration("1.2.3s"),
            Err(UnitError::BadNumber { .. })
        ));
        assert!(matches!(
            parse_duration("99999999999999999999999h"),
            Err(UnitError::Overflow { .. })
        ));
        assert!(matches!(
            parse_duration("100000000h"),
            Err(UnitError::Overflow { .. })
        ));
        let msg = parse_duration("5 fortnights").unwrap_err().to_string();
        assert!(msg.contains("unknown duration unit `fortnights`"), "{msg}");
        assert!(msg.contains("ms"), "{msg}");
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_bytes("1500"), Ok(1500));
        assert_eq!(parse_bytes("64KiB"), Ok(65536));
        assert_eq!(parse_bytes("1MB"), Ok(1_000_000));
        assert_eq!(parse_bytes("1MiB"), Ok(1 << 20));
        assert_eq!(parse_bytes("2 GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes("1.5KiB"), Ok(1536));
        assert_eq!(parse_bytes("10B"), Ok(10));
        assert!(matches!(
            parse_bytes("10 furlongs"),
            Err(UnitError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_bytes("KiB"),
            Err(UnitError::BadNumber { .. })
        ));
        assert!(matches!(
            parse_bytes("99999999999TiB"),
            Err(UnitError::Overflow { .. })
        ));
    }

    #[test]
    fn bandwidths() {
        assert_eq!(parse_bandwidth("100Mbit"), Ok(100_000_000));
        assert_eq!(parse_bandwidth("1Gbit"), Ok(1_000_000_000));
        assert_eq!(parse_bandwidth("10Mbps"), Ok(10_000_000));
        assert_eq!(parse_bandwidth("56kbit"), Ok(56_000));
        assert_eq!(parse_bandwidth("1.5Gbit"), Ok(1_500_000_000));
        assert_eq!(parse_bandwidth("9600bps"), Ok(9600));
        assert!(matches!(
            parse_bandwidth("100"),
            Err(UnitError::MissingUnit { .. })
        ));
        assert!(matches!(
            parse_bandwidth("100MB"),
            Err(UnitError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_bandwidth("99999999999999Tbit"),
            Err(UnitError::Overflow { .. })
        ));
    }
}
