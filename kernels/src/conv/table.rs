//! Per-architecture tables of measured convolution configurations: data, not logic. Each
//! table is a text file in `kernels/lut/` written by the tuner (`cargo bench --bench conv --
//! tune`), compiled in with `include_str!` and parsed once.
//!
//! Lookup for a shape: the entries of the same `C_in`, `C_out` and kernel, and among them the
//! one whose row count (GEMM M) is nearest on a log scale; none of that shape class: no
//! entry (the caller falls back to cubek's own selection).

use std::sync::{OnceLock, RwLock};

use super::{ConvChoice, ConvShape};
use crate::table::{self, TableError};

/// One tuned entry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConvEntry {
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: [usize; 3],
    /// GEMM M (output positions) the entry was measured at.
    pub rows: usize,
    /// cubek's knobs or a `wgmma` launch (the direct kernel is chosen by width, not by table).
    pub choice: ConvChoice,
    /// The tuner's time and rate (None for transcribed entries).
    pub us: Option<f64>,
    pub tflops: Option<f64>,
}

const SM90: &str = include_str!("../../lut/sm90_conv.txt");

/// The columns of a convolution table.
const HEADER: &str = "c_in c_out kt kh kw rows knobs us tflops";

/// Parses a table.
///
/// # Errors
/// The first malformed line, named with its table, line and column.
pub fn parse(text: &str) -> Result<Vec<ConvEntry>, TableError> {
    table::entries("conv table", text, HEADER)?
        .iter()
        .map(|l| {
            Ok(ConvEntry {
                c_in: l.count(0, "c_in")?,
                c_out: l.count(1, "c_out")?,
                kernel: [l.count(2, "kt")?, l.count(3, "kh")?, l.count(4, "kw")?],
                rows: l.count(5, "rows")?,
                choice: l.knobs(6)?,
                us: l.measured(7, "us")?,
                tflops: l.measured(8, "tflops")?,
            })
        })
        .collect()
}

/// The compiled-in tables by compute capability x 10.
pub fn tables() -> &'static [(u32, Vec<ConvEntry>)] {
    static TABLES: OnceLock<Vec<(u32, Vec<ConvEntry>)>> = OnceLock::new();
    TABLES.get_or_init(|| vec![(90, parse(SM90).unwrap_or_else(|e| panic!("{e}")))])
}

/// A table installed at run time in place of the compiled-in one (see [`install`]).
static INSTALLED: RwLock<Option<Vec<ConvEntry>>> = RwLock::new(None);

/// Installs `text` (the tuner's output format) as the table for every architecture, in place of
/// the compiled-in tables, for the rest of the process: how a freshly tuned table is tried
/// before it is compiled in (the decoder's `--conv-table`).
///
/// # Errors
/// The first malformed line, named.
pub fn install(text: &str) -> Result<usize, TableError> {
    let entries = parse(text)?;
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
    let same_class = entries
        .iter()
        .filter(|e| e.c_in == shape.c_in && e.c_out == shape.c_out && e.kernel == shape.kernel);
    table::nearest_rows(same_class, |e| e.rows, shape.rows()).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_parses_and_entries_fit_their_shapes() {
        for (_, entries) in tables() {
            for e in entries {
                // A cube's channel tile must not exceed the layer's width by more than one tile.
                match e.choice {
                    ConvChoice::Knobs(k) => assert!(
                        (k.cube_cols() as usize) < e.c_out + k.tile[1] as usize * 4,
                        "{e:?}"
                    ),
                    ConvChoice::Wgmma(k) => {
                        assert!(
                            k.validate().is_ok() && (k.n as usize) < e.c_out + 64,
                            "{e:?}"
                        );
                        assert!(e.c_in.is_multiple_of(k.k as usize), "{e:?}");
                    }
                    other => panic!("{other} in a convolution table: {e:?}"),
                }
            }
        }
    }

    #[test]
    fn lookup_takes_nearest_rows_of_the_same_class() {
        let text = "96 96 3 3 3 1000 sync_cyclic.mma16x8x16.p2x6x2.s4x1 - -\n\
                    96 96 3 3 3 100000 tma.cmma16x16x16.p1x4x4.s8x1 10.0 2.0\n";
        let entries = parse(text).unwrap();
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
    fn malformed_lines_are_named() {
        let e = parse("96 96 3 3 3 1000 sync_cyclic.mma16x8x16.p2x6x2.s4x1 -").unwrap_err();
        assert!(e.to_string().contains("8 columns, want 9"), "{e}");
        let e = parse("96 96 3 3 3 1000 fast.mma16x8x16.p2x6x2.s4x1 - -").unwrap_err();
        assert!(e.to_string().contains("routine `fast`"), "{e}");
    }
}
