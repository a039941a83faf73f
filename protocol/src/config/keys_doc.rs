//! The configuration reference's key tables, rendered from [`KEYS`] as
//! markdown, one per [`Place`]. `protocol/tests/protocol/config_keys_doc.rs` keeps the copy in
//! `docs/configuration.md` equal to this.

use super::keys::{Default, Form, KEYS, Key, Place, Unit};
use std::fmt::Write;

/// The markdown table of the keys at `place`, in [`KEYS`] order,
/// newline-terminated.
pub fn keys_markdown(place: Place) -> String {
    let mut out = String::new();
    out.push_str("| key | type | default | range / form | scope | fingerprint | meaning |\n");
    out.push_str("|---|---|---|---|---|---|---|\n");
    for key in KEYS.iter().filter(|key| key.place == place) {
        let cells = [
            format!("`{}`", key.name),
            json_type(key),
            default(key),
            range(key),
            key.scope.as_str().to_owned(),
            if key.fingerprinted { "yes" } else { "no" }.to_owned(),
            key.doc.to_owned(),
        ];
        // Writing to a String cannot fail.
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out
}

fn json_type(key: &Key) -> String {
    match key.form {
        Form::Bool => "boolean".to_owned(),
        Form::Integer { unit, .. } | Form::IntegerRule { unit, .. } => match unit {
            Unit::Milliseconds => "integer (ms)".to_owned(),
            Unit::Bytes => "integer (bytes)".to_owned(),
            Unit::Plain => "integer".to_owned(),
        },
        Form::Choice(_) => "string".to_owned(),
        Form::Path { nullable: false } => "absolute path".to_owned(),
        Form::Path { nullable: true } => "absolute path or null".to_owned(),
        Form::Other { json, .. } => json.to_owned(),
    }
}

fn default(key: &Key) -> String {
    match key.default {
        Default::Required => "required".to_owned(),
        Default::Integer(value) => {
            let (unit, zero) = match key.form {
                Form::Integer { unit, zero, .. } => (unit, zero),
                Form::IntegerRule { unit, .. } => (unit, None),
                _ => (Unit::Plain, None),
            };
            match (value, zero) {
                (0, Some(zero)) => format!("0 ({zero})"),
                _ => number_with_size(value, unit),
            }
        }
        Default::Json(text) => format!("`{text}`"),
        Default::Derived(text) => text.to_owned(),
    }
}

fn range(key: &Key) -> String {
    match key.form {
        // The type says it all.
        Form::Bool | Form::Path { .. } => "—".to_owned(),
        Form::Integer {
            min,
            max,
            zero,
            rule,
            ..
        } => {
            let min = match (min, zero) {
                (0, Some(zero)) => format!("0 ({zero})"),
                _ => min.to_string(),
            };
            let range = format!("{min}..={}", bound(max));
            match rule {
                Some(rule) => format!("{range}, {rule}"),
                None => range,
            }
        }
        Form::IntegerRule { rule, .. } => rule.to_owned(),
        Form::Choice(values) => {
            let quoted: Vec<String> = values.iter().map(|v| format!("`\"{v}\"`")).collect();
            match quoted.split_last() {
                Some((last, [])) => last.clone(),
                Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                None => String::new(),
            }
        }
        Form::Other { rule, .. } => rule.to_owned(),
    }
}

/// A large power of two as `2^N` (the prefetch bounds' 2^50), anything
/// else as digits.
fn bound(value: u64) -> String {
    if value.is_power_of_two() && value >= 1 << 40 {
        format!("2^{}", value.trailing_zeros())
    } else {
        value.to_string()
    }
}

/// A byte count with its size in MiB or GiB when it is a whole number of
/// them: `268435456 (256 MiB)`.
fn number_with_size(value: u64, unit: Unit) -> String {
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    match unit {
        Unit::Bytes if value >= GIB && value.is_multiple_of(GIB) => {
            format!("{value} ({} GiB)", value / GIB)
        }
        Unit::Bytes if value >= MIB && value.is_multiple_of(MIB) => {
            format!("{value} ({} MiB)", value / MIB)
        }
        _ => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_cell_can_break_the_table() {
        for place in [Place::TopLevel, Place::Model] {
            for line in keys_markdown(place).lines() {
                assert_eq!(line.matches('|').count(), 8, "{line}");
            }
        }
    }

    #[test]
    fn sizes_and_bounds_read_as_people_write_them() {
        assert_eq!(
            number_with_size(268_435_456, Unit::Bytes),
            "268435456 (256 MiB)"
        );
        assert_eq!(
            number_with_size(128 << 30, Unit::Bytes),
            "137438953472 (128 GiB)"
        );
        assert_eq!(number_with_size(2048, Unit::Bytes), "2048");
        assert_eq!(number_with_size(1 << 30, Unit::Plain), "1073741824");
        assert_eq!(bound(1 << 50), "2^50");
        assert_eq!(bound(1_073_741_824), "1073741824");
    }
}
