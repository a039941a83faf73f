//! Statistics and tables for the benchmark's output (plain text or Markdown).

/// The value at percentile `p` (0..=100) of `sorted` (nearest rank); 0 for an empty slice.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median of `values` (the mean of the middle two for an even count); `None` if empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if !sorted.len().is_multiple_of(2) {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    })
}

/// How a figure is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Microseconds.
    Micros,
    /// Milliseconds.
    Millis,
    /// A rate per second (req/s, events/s, MB/s).
    Rate,
    /// MiB (from KiB).
    MiB,
    /// KiB.
    KiB,
}

impl Unit {
    /// The suffix printed after a value.
    pub fn suffix(self) -> &'static str {
        match self {
            Unit::Micros => " µs",
            Unit::Millis => " ms",
            Unit::Rate => "",
            Unit::MiB => " MiB",
            Unit::KiB => " KiB",
        }
    }
}

/// `value` (in the unit's base: µs, ms, 1/s, KiB for MiB and KiB) for a table cell.
pub fn format_value(value: f64, unit: Unit) -> String {
    let shown = match unit {
        Unit::MiB => value / 1024.0,
        _ => value,
    };
    let text = if shown >= 1000.0 {
        group_thousands(shown.round() as u64)
    } else if shown >= 100.0 {
        format!("{shown:.0}")
    } else if shown >= 10.0 {
        format!("{shown:.1}")
    } else {
        format!("{shown:.2}")
    };
    format!("{text}{}", unit.suffix())
}

fn group_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// `a / b` as `5.1x`, or `—` when either is missing or `b` is 0.
pub fn format_ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() => {
            let r = a / b;
            if r >= 10.0 {
                format!("{r:.0}x")
            } else {
                format!("{r:.2}x")
            }
        }
        _ => "—".into(),
    }
}

/// A table with a title, a header row and rows of cells.
#[derive(Debug, Clone, Default)]
pub struct Table {
    pub title: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: impl Into<String>, header: &[&str]) -> Table {
        Table {
            title: title.into(),
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Aligned plain text: the first column left-aligned, the others right-aligned.
    pub fn render_text(&self) -> String {
        let widths: Vec<usize> = (0..self.header.len())
            .map(|col| {
                std::iter::once(&self.header)
                    .chain(&self.rows)
                    .filter_map(|row| row.get(col))
                    .map(|cell| cell.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |row: &[String]| {
            let cells: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(col, cell)| {
                    let pad = widths[col].saturating_sub(cell.chars().count());
                    if col == 0 {
                        format!("{cell}{}", " ".repeat(pad))
                    } else {
                        format!("{}{cell}", " ".repeat(pad))
                    }
                })
                .collect();
            cells.join("  ").trim_end().to_owned()
        };
        let mut out = format!("{}\n", self.title);
        out.push_str(&line(&self.header));
        out.push('\n');
        let total: usize = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
        out.push_str(&"-".repeat(total));
        out.push('\n');
        for row in &self.rows {
            out.push_str(&line(row));
            out.push('\n');
        }
        out
    }

    /// A Markdown table under a `###` heading.
    pub fn render_markdown(&self) -> String {
        let mut out = format!("### {}\n\n", self.title);
        out.push_str(&format!("| {} |\n", self.header.join(" | ")));
        let align: Vec<&str> = (0..self.header.len())
            .map(|col| if col == 0 { "---" } else { "---:" })
            .collect();
        out.push_str(&format!("| {} |\n", align.join(" | ")));
        for row in &self.rows {
            out.push_str(&format!("| {} |\n", row.join(" | ")));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_medians() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&v, 100.0), 100);
        assert_eq!(percentile(&[7], 99.0), 7);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn cells() {
        assert_eq!(format_value(281.4, Unit::Micros), "281 µs");
        assert_eq!(format_value(12_345.0, Unit::Rate), "12 345");
        assert_eq!(format_value(1_234_567.0, Unit::Rate), "1 234 567");
        assert_eq!(format_value(9.0 * 1024.0, Unit::MiB), "9.00 MiB");
        assert_eq!(format_ratio(Some(5.1), Some(1.0)), "5.10x");
        assert_eq!(format_ratio(Some(1.0), None), "—");
        let mut t = Table::new("T", &["metric", "a"]);
        t.row(vec!["x".into(), "1".into()]);
        assert!(t.render_markdown().contains("| x | 1 |"));
        assert!(t.render_text().contains("x       1"));
    }
}
