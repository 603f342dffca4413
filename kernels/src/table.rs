//! The one machinery behind every kernel's launch knobs and measured tables.
//!
//! Knobs: each kernel has its own knob struct, and each has one text form
//! ([`TextKnobs`]: parse and `Display` round-trip), which the tables, the tuners, the benches'
//! overrides and the error messages all use.
//!
//! Tables (`kernels/lut/*.txt`, written by the tuners, compiled in): one entry per line,
//! whitespace-separated columns: the key columns, the knobs in their text form, then the
//! measurements (`-` for an entry transcribed rather than measured); `#` starts a comment line.
//! [`entries`] splits a table into checked lines, [`Line`] reads typed columns with errors that
//! name the table, the line and the column, and [`nearest_rows`] is the lookup every table uses
//! for shapes it does not hold: the entry of the same class whose row count is nearest on a log
//! scale.

use core::fmt;

/// Launch knobs with a text form: `K::from_text(&k.to_string()) == Ok(k)`.
pub trait TextKnobs: Copy + PartialEq + fmt::Display + Sized {
    /// The kernel the knobs launch, for messages (`"row"`, `"NVFP4"`, `"conv"`).
    const KERNEL: &'static str;

    /// Parses the text form; the error names the text and what was expected.
    fn from_text(text: &str) -> Result<Self, String>;
}

/// A malformed table line: the table, the line, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableError {
    pub table: &'static str,
    pub line: String,
    pub problem: String,
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} line `{}`: {}", self.table, self.line, self.problem)
    }
}

impl std::error::Error for TableError {}

/// One entry line of a table, split into its columns.
pub struct Line<'a> {
    table: &'static str,
    text: &'a str,
    columns: Vec<&'a str>,
}

impl<'a> Line<'a> {
    fn error(&self, problem: String) -> TableError {
        TableError {
            table: self.table,
            line: self.text.to_string(),
            problem,
        }
    }

    /// Column `i` as text.
    pub fn word(&self, i: usize) -> &'a str {
        self.columns[i]
    }

    /// Column `i` (named `name` in the error) as a count.
    pub fn count(&self, i: usize, name: &str) -> Result<usize, TableError> {
        self.columns[i]
            .parse()
            .map_err(|_| self.error(format!("bad {name} `{}`", self.columns[i])))
    }

    /// Column `i` as `K`'s text form.
    pub fn knobs<K: TextKnobs>(&self, i: usize) -> Result<K, TableError> {
        K::from_text(self.columns[i]).map_err(|e| self.error(e))
    }

    /// Column `i` as a measurement: a number, or `-` for none.
    pub fn measured(&self, i: usize, name: &str) -> Result<Option<f64>, TableError> {
        match self.columns[i] {
            "-" => Ok(None),
            s => s
                .parse()
                .map(Some)
                .map_err(|_| self.error(format!("bad {name} `{s}` (a number or -)"))),
        }
    }
}

/// The entry lines of table `table` (its name, for errors), each checked to have the columns
/// `header` names (whitespace-separated, e.g. `"C T knobs us"`).
pub fn entries<'a>(
    table: &'static str,
    text: &'a str,
    header: &str,
) -> Result<Vec<Line<'a>>, TableError> {
    let want = header.split_whitespace().count();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let line = Line {
                table,
                text: l,
                columns: l.split_whitespace().collect(),
            };
            if line.columns.len() == want {
                Ok(line)
            } else {
                Err(line.error(format!(
                    "{} columns, want {want}: {header}",
                    line.columns.len()
                )))
            }
        })
        .collect()
}

/// Parses a compiled-in table with `entry`; panics with the [`TableError`] on a malformed line
/// (the tables are compiled in, so their tests catch a bad one).
pub fn compiled_in<'a, E>(
    table: &'static str,
    text: &'a str,
    header: &str,
    entry: impl Fn(&Line<'a>) -> Result<E, TableError>,
) -> Vec<E> {
    entries(table, text, header)
        .and_then(|lines| lines.iter().map(&entry).collect())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Among `candidates` (the entries of one shape class), the one whose row count (`rows_of`) is
/// nearest to `rows` on a log scale; ties go to the first.
pub fn nearest_rows<E>(
    candidates: impl IntoIterator<Item = E>,
    rows_of: impl Fn(&E) -> usize,
    rows: usize,
) -> Option<E> {
    let distance = |e: &E| {
        ((rows_of(e).max(1) as f64) / (rows.max(1) as f64))
            .ln()
            .abs()
    };
    candidates
        .into_iter()
        .min_by(|a, b| distance(a).total_cmp(&distance(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Lanes(u32);

    impl fmt::Display for Lanes {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "l{}", self.0)
        }
    }

    impl TextKnobs for Lanes {
        const KERNEL: &'static str = "test";
        fn from_text(text: &str) -> Result<Self, String> {
            text.strip_prefix('l')
                .and_then(|n| n.parse().ok())
                .map(Lanes)
                .ok_or_else(|| format!("test knobs `{text}`: expected l<lanes>"))
        }
    }

    const TABLE: &str = "# C T knobs us\n96 1000 l4 1.5\n\n96 100000 l8 -\n128 1000 l16 2.0\n";

    type Entry = (usize, usize, Lanes, Option<f64>);

    fn parse(text: &str) -> Result<Vec<Entry>, TableError> {
        entries("test table", text, "C T knobs us")?
            .iter()
            .map(|l| {
                Ok((
                    l.count(0, "C")?,
                    l.count(1, "T")?,
                    l.knobs(2)?,
                    l.measured(3, "us")?,
                ))
            })
            .collect()
    }

    #[test]
    fn entries_parse_typed_columns() {
        let rows = parse(TABLE).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0], (96, 1000, Lanes(4), Some(1.5)));
        assert_eq!(rows[1].3, None);
    }

    #[test]
    fn errors_name_table_line_and_column() {
        let e = parse("96 1000 l4").unwrap_err();
        assert_eq!(
            e.to_string(),
            "test table line `96 1000 l4`: 3 columns, want 4: C T knobs us"
        );
        let e = parse("96 x l4 1.0").unwrap_err();
        assert!(e.to_string().ends_with("bad T `x`"), "{e}");
        let e = parse("96 10 q4 1.0").unwrap_err();
        assert!(e.problem.contains("expected l<lanes>"), "{e}");
        let e = parse("96 10 l4 fast").unwrap_err();
        assert!(e.problem.contains("bad us `fast`"), "{e}");
    }

    #[test]
    #[should_panic(expected = "test table line `96 1000`")]
    fn compiled_in_tables_panic_with_the_line() {
        compiled_in("test table", "96 1000", "C T knobs us", |_| Ok(()));
    }

    #[test]
    fn every_compiled_in_entry_round_trips_through_its_text_form() {
        fn check<K: TextKnobs + fmt::Debug>(k: K) {
            assert_eq!(
                K::from_text(&k.to_string()),
                Ok(k),
                "{} knobs {k}",
                K::KERNEL
            );
        }
        for t in crate::lut::tables() {
            t.entries.iter().for_each(|e| check(e.knobs));
        }
        crate::nvfp4::sm90_table().iter().for_each(|e| check(e.2));
        for (_, entries) in crate::conv::table::tables() {
            entries.iter().for_each(|e| check(e.choice));
        }
        check(crate::conv::DirectKnobs::default());
        check(crate::conv::ConvChoice::Wgmma(
            crate::conv::WgmmaKnobs::default(),
        ));
        check(crate::conv::ConvChoice::Inferred);
        // The backward has no table: its GPU heuristic's choices over the swept shapes.
        for c in [96, 192, 384, 1024] {
            for t in [6_240, 24_960, 99_840, 399_360] {
                let shape = crate::backward::GpuBackwardShape::for_shape(c, t, 132);
                check(crate::backward::BackwardKnobs {
                    fast_math: t > 50_000,
                    max_vectors_per_lane: shape.max_vectors_per_lane,
                    units_per_cube: shape.units_per_cube,
                    prefetch: c < 1024,
                    cubes_per_sm: shape.cubes_per_sm,
                    max_vector: shape.max_vector,
                });
            }
        }
        let bad = crate::backward::BackwardKnobs::from_text;
        for text in [
            "c1",
            "u256.c1",
            "c1.u256.pf.fast",
            "c1.u256.s2.s2",
            "c1.u256.v0",
            "c1.u256.x",
        ] {
            let e = bad(text).unwrap_err();
            assert!(
                e.contains(&format!("`{text}`")) && e.contains("expected"),
                "{e}"
            );
        }
    }

    #[test]
    fn nearest_rows_on_a_log_scale() {
        let rows = parse(TABLE).unwrap();
        let same_c = || rows.iter().filter(|r| r.0 == 96);
        assert_eq!(nearest_rows(same_c(), |r| r.1, 5_000).unwrap().1, 1000);
        assert_eq!(nearest_rows(same_c(), |r| r.1, 20_000).unwrap().1, 100_000);
        assert_eq!(nearest_rows(same_c(), |r| r.1, 0).unwrap().1, 1000);
        assert!(nearest_rows(rows.iter().filter(|r| r.0 == 7), |r| r.1, 10).is_none());
    }
}
