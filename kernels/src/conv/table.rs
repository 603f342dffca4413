//! Per-architecture tables of measured convolution configurations: data, not logic. Each
//! table is a text file in `kernels/lut/` written by the tuner (`cargo bench --bench conv --
//! tune`), compiled in with `include_str!` and parsed once.
//!
//! Lookup for a shape: the entries of the same `C_in`, `C_out` and kernel, and among them the
//! one whose row count (GEMM M) is nearest on a log scale; none of that shape class: no
//! entry (the caller falls back to cubek's own selection).

use std::sync::{OnceLock, RwLock};

use super::{ConvKnobs, ConvShape};

/// One tuned entry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConvEntry {
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: [usize; 3],
    /// GEMM M (output positions) the entry was measured at.
    pub rows: usize,
    pub knobs: ConvKnobs,
    /// The tuner's time and rate (None for transcribed entries).
    pub us: Option<f64>,
    pub tflops: Option<f64>,
}

const SM90: &str = include_str!("../../lut/sm90_conv.txt");

/// Parses a table; panics naming the line on malformed input (the tables are compiled in, so
/// the tests catch a bad one).
pub fn parse(text: &str) -> Vec<ConvEntry> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let bad = |what: &str| -> ! { panic!("conv table line `{line}`: bad {what}") };
            if f.len() != 9 {
                bad("column count (want 9: c_in c_out kt kh kw rows knobs us tflops)");
            }
            let n = |i: usize, what: &str| f[i].parse::<usize>().unwrap_or_else(|_| bad(what));
            let time = |s: &str| if s == "-" { None } else { s.parse().ok() };
            ConvEntry {
                c_in: n(0, "c_in"),
                c_out: n(1, "c_out"),
                kernel: [n(2, "kt"), n(3, "kh"), n(4, "kw")],
                rows: n(5, "rows"),
                knobs: ConvKnobs::parse(f[6]).unwrap_or_else(|e| bad(&e)),
                us: time(f[7]),
                tflops: time(f[8]),
            }
        })
        .collect()
}

/// The compiled-in tables by compute capability x 10.
pub fn tables() -> &'static [(u32, Vec<ConvEntry>)] {
    static TABLES: OnceLock<Vec<(u32, Vec<ConvEntry>)>> = OnceLock::new();
    TABLES.get_or_init(|| vec![(90, parse(SM90))])
}

/// A table installed at run time in place of the compiled-in one (see [`install`]).
static INSTALLED: RwLock<Option<Vec<ConvEntry>>> = RwLock::new(None);

/// Installs `text` (the tuner's output format) as the table for every architecture, in place of
/// the compiled-in tables, for the rest of the process: how a freshly tuned table is tried
/// before it is compiled in (the decoder's `--conv-table`).
///
/// # Errors
/// The first malformed line, named.
pub fn install(text: &str) -> Result<usize, String> {
    let entries = std::panic::catch_unwind(|| parse(text)).map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| "malformed conv table".to_string())
    })?;
    let count = entries.len();
    *INSTALLED.write().expect("conv table lock") = Some(entries);
    Ok(count)
}

/// The entry for `shape` on `sm`: same channels and kernel, nearest rows (log scale).
pub fn lookup(sm: u32, shape: &ConvShape) -> Option<ConvEntry> {
    if let Some(entries) = INSTALLED.read().expect("conv table lock").as_ref() {
        return nearest(entries, shape);
    }
    let (_, entries) = tables().iter().find(|(s, _)| *s == sm)?;
    nearest(entries, shape)
}

/// Among `entries`, the one of `shape`'s channels and kernel whose rows are nearest.
pub fn nearest(entries: &[ConvEntry], shape: &ConvShape) -> Option<ConvEntry> {
    let rows = shape.rows().max(1) as f64;
    entries
        .iter()
        .filter(|e| e.c_in == shape.c_in && e.c_out == shape.c_out && e.kernel == shape.kernel)
        .min_by(|a, b| {
            let d = |e: &ConvEntry| (e.rows.max(1) as f64 / rows).ln().abs();
            d(a).total_cmp(&d(b))
        })
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_parses_and_entries_fit_their_shapes() {
        for (_, entries) in tables() {
            for e in entries {
                // A cube's channel tile must not exceed the layer's width by more than one tile.
                assert!(
                    (e.knobs.cube_cols() as usize) < e.c_out + e.knobs.tile[1] as usize * 4,
                    "{e:?}"
                );
            }
        }
    }

    #[test]
    fn lookup_takes_nearest_rows_of_the_same_class() {
        let text = "96 96 3 3 3 1000 sync_cyclic.mma16x8x16.p2x6x2.s4x1 - -\n\
                    96 96 3 3 3 100000 tma.cmma16x16x16.p1x4x4.s8x1 10.0 2.0\n";
        let entries = parse(text);
        assert_eq!(entries[1].us, Some(10.0));
        let mut shape = ConvShape {
            batch: 1,
            input: [1, 10, 10],
            c_in: 96,
            c_out: 96,
            kernel: [3, 3, 3],
            padding: [2, 1, 1],
            output: [1, 10, 10],
        };
        assert_eq!(nearest(&entries, &shape).unwrap().rows, 1000);
        shape.input = [1, 200, 200];
        shape.output = [1, 200, 200];
        assert_eq!(nearest(&entries, &shape).unwrap().rows, 100000);
        shape.c_out = 192;
        assert!(nearest(&entries, &shape).is_none());
    }

    #[test]
    #[should_panic(expected = "bad column count")]
    fn malformed_line_panics_with_it() {
        parse("96 96 3 3 3 1000 sync_cyclic.mma16x8x16.p2x6x2.s4x1 -");
    }
}
