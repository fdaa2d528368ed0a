//! Flag values read as Kubernetes components read them: a boolean as Go's `strconv.ParseBool`
//! does, a size as `resource.Quantity` does. The command line and `--feature-gates` both use
//! them.

/// A boolean that Go's `strconv.ParseBool` refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "strconv.ParseBool: parsing {0:?}: invalid syntax; use one of 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False"
)]
pub struct ParseBoolError(pub String);

/// Go's `strconv.ParseBool`, which Kubernetes components use for boolean flags and feature
/// gates: exactly `1, t, T, TRUE, true, True` and `0, f, F, FALSE, false, False`.
pub fn parse_bool(s: &str) -> Result<bool, ParseBoolError> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(ParseBoolError(s.to_owned())),
    }
}

/// A boolean flag's value for clap, as Go's `strconv.ParseBool` reads it.
pub(crate) fn go_bool(s: &str) -> Result<bool, String> {
    parse_bool(s).map_err(|e| e.to_string())
}

/// A size in bytes written as a Kubernetes quantity (`resource.Quantity`): a plain number, a
/// binary suffix (`Ki`, `Mi`, `Gi`, `Ti`, `Pi`, `Ei`), a decimal one (`k`, `M`, `G`, `T`, `P`,
/// `E`) or an exponent (`7e6`). A fraction of a byte rounds up, as `Quantity.Value()` does.
pub fn byte_quantity(s: &str) -> Result<usize, String> {
    let refuse = |why: &str| {
        format!(
            "{s:?} is not a size in bytes ({why}); write a whole number or a Kubernetes quantity such as 7Mi or 8M"
        )
    };
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(refuse("no number"));
    }
    // value = digits * 10^-fraction_len * base^power
    let (base, power): (u128, u32) = match suffix {
        "" => (10, 0),
        "Ki" => (1024, 1),
        "Mi" => (1024, 2),
        "Gi" => (1024, 3),
        "Ti" => (1024, 4),
        "Pi" => (1024, 5),
        "Ei" => (1024, 6),
        "k" => (10, 3),
        "M" => (10, 6),
        "G" => (10, 9),
        "T" => (10, 12),
        "P" => (10, 15),
        "E" => (10, 18),
        _ => match suffix.strip_prefix(['e', 'E']).map(str::parse::<u32>) {
            Some(Ok(exponent)) if exponent <= 30 => (10, exponent),
            _ => return Err(refuse(&format!("unknown suffix {suffix:?}"))),
        },
    };
    let too_large = || refuse("too large");
    let digits: u128 = format!("{whole}{fraction}")
        .parse()
        .map_err(|_| too_large())?;
    let scaled = base
        .checked_pow(power)
        .and_then(|m| digits.checked_mul(m))
        .ok_or_else(too_large)?;
    let divisor = 10u128
        .checked_pow(u32::try_from(fraction.len()).map_err(|_| too_large())?)
        .ok_or_else(too_large)?;
    let bytes = scaled.div_ceil(divisor);
    if bytes == 0 {
        return Err(refuse("must be at least 1"));
    }
    usize::try_from(bytes).map_err(|_| too_large())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_are_exactly_gos_parse_bool() {
        for yes in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_bool(yes), Ok(true), "{yes}");
        }
        for no in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_bool(no), Ok(false), "{no}");
        }
        for bad in [
            "", "yes", "no", "on", "off", "tRUE", "fAlse", " true", "true ", "2", "y",
        ] {
            assert_eq!(
                parse_bool(bad),
                Err(ParseBoolError(bad.to_owned())),
                "{bad:?}"
            );
        }
        assert_eq!(
            parse_bool("yes").unwrap_err().to_string(),
            "strconv.ParseBool: parsing \"yes\": invalid syntax; use one of 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False"
        );
    }

    #[test]
    fn request_size_takes_kubernetes_quantities() {
        for (text, want) in [
            ("7340032", Ok(7 * 1024 * 1024)),
            ("7Mi", Ok(7 * 1024 * 1024)),
            ("3Ki", Ok(3072)),
            ("1Gi", Ok(1 << 30)),
            ("8M", Ok(8_000_000)),
            ("8k", Ok(8000)),
            ("1.5Mi", Ok(1_572_864)),
            ("0.5Ki", Ok(512)),
            (".5Ki", Ok(512)),
            ("7e6", Ok(7_000_000)),
            ("7E6", Ok(7_000_000)),
            ("1.0001", Ok(2)),
            ("1E", Ok(1_000_000_000_000_000_000)),
            ("0", Err("must be at least 1")),
            ("", Err("no number")),
            ("Mi", Err("no number")),
            ("-1Mi", Err("no number")),
            ("1.2.3", Err("no number")),
            ("7MB", Err("unknown suffix \"MB\"")),
            ("7mi", Err("unknown suffix \"mi\"")),
            ("7 Mi", Err("unknown suffix \" Mi\"")),
            ("100Ei", Err("too large")),
            (
                "99999999999999999999999999999999999999999",
                Err("too large"),
            ),
        ] {
            match (byte_quantity(text), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{text}"),
                (Err(got), Err(want)) => {
                    assert!(got.contains(want), "{text}: {got}");
                    assert!(got.contains("7Mi"), "the message shows the syntax: {got}");
                }
                (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
            }
        }
    }
}
