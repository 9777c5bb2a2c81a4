//! Prometheus's text exposition format, written one way for every metric
//! the console serves (the stored totals and the probe's health).

use std::fmt::{Display, Write};

/// A metric family being written: its `# HELP` and `# TYPE` lines first,
/// then its samples.
pub(crate) struct Family<'a> {
    o: &'a mut String,
    name: &'a str,
}

impl<'a> Family<'a> {
    /// Starts family `name` of `kind` (counter, gauge, histogram).
    pub(crate) fn new(o: &'a mut String, name: &'a str, kind: &str, help: &str) -> Self {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        Family { o, name }
    }

    /// The family's one sample, without labels.
    pub(crate) fn value(self, v: impl Display) {
        let _ = writeln!(self.o, "{} {v}", self.name);
    }

    /// A sample of the series whose labels are `labels` (name, value):
    /// values are escaped, names are the code's.
    pub(crate) fn sample(&mut self, labels: &[(&str, &str)], v: impl Display) {
        self.series("", labels, v);
    }

    /// A sample of the family's series named with `suffix` (a histogram's
    /// `_bucket`, `_sum` and `_count`), braces only around labels.
    pub(crate) fn series(&mut self, suffix: &str, labels: &[(&str, &str)], v: impl Display) {
        self.o.push_str(self.name);
        self.o.push_str(suffix);
        for (i, (k, value)) in labels.iter().enumerate() {
            let open = if i > 0 { "," } else { "{" };
            let _ = write!(self.o, "{open}{k}=\"{}\"", escape_label(value));
        }
        let close = if labels.is_empty() { "" } else { "}" };
        let _ = writeln!(self.o, "{close} {v}");
    }

    /// One sample per `(value of label, count)`.
    pub(crate) fn by<K: AsRef<str>, V: Display>(
        mut self,
        label: &str,
        rows: impl IntoIterator<Item = (K, V)>,
    ) {
        for (k, v) in rows {
            self.sample(&[(label, k.as_ref())], v);
        }
    }
}

/// A label value escaped as the format asks (backslash, quote, newline).
pub(crate) fn escape_label(v: &str) -> String {
    let mut o = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_follow_their_family_and_labels_are_escaped() {
        let mut o = String::new();
        Family::new(&mut o, "m_total", "counter", "Things.").by("kind", [("a\"b\\c\nd", 3)]);
        let mut f = Family::new(&mut o, "n", "gauge", "Two labels.");
        f.sample(&[("x", "1"), ("y", "2")], 1.5);
        Family::new(&mut o, "g", "gauge", "One value.").value(7);
        let mut h = Family::new(&mut o, "h", "histogram", "Suffixed.");
        h.series("_bucket", &[("le", "+Inf")], 2);
        h.series("_sum", &[], 0.5);
        assert_eq!(
            o,
            "# HELP m_total Things.\n# TYPE m_total counter\nm_total{kind=\"a\\\"b\\\\c\\nd\"} 3\n\
             # HELP n Two labels.\n# TYPE n gauge\nn{x=\"1\",y=\"2\"} 1.5\n\
             # HELP g One value.\n# TYPE g gauge\ng 7\n\
             # HELP h Suffixed.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 0.5\n"
        );
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
