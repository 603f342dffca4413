//! Per-architecture knob tables ("LUTs"): data, not logic. Each table is a text file in
//! `kernels/lut/` written by the tuner (`cargo bench --bench rmsnorm -- tune`), compiled in with
//! `include_str!` and parsed once.
//!
//! Lookup for `(arch, C, T, output)`: the exact entry, else the entry of the same C and output
//! whose T is nearest on a log scale, else nothing (the caller falls back to the heuristic).

use std::sync::OnceLock;

use crate::knobs::Knobs;
use crate::table;

/// One tuned entry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LutEntry {
    pub channels: usize,
    pub rows: usize,
    /// Output element kind, e.g. `"bf16"` (2-byte inputs and outputs).
    pub out: &'static str,
    /// Knobs with `max_cubes` unset; see `occupancy`.
    pub knobs: Knobs,
    /// Cubes per multiprocessor of the persistent grid, 0 for one cube per row group.
    pub occupancy: u32,
    /// Kernel and same-bytes copy times measured by the tuner (None for transcribed tables).
    pub kernel_us: Option<f64>,
    pub copy_us: Option<f64>,
}

impl LutEntry {
    /// The knobs for a device with `sms` multiprocessors.
    pub fn knobs_for(&self, sms: Option<u32>) -> Knobs {
        Knobs {
            max_cubes: match (self.occupancy, sms) {
                (0, _) | (_, None) => None,
                (occ, Some(sms)) => Some(occ * sms),
            },
            ..self.knobs
        }
    }
}

/// A parsed table for one architecture (`sm` = compute capability x 10).
pub struct Lut {
    pub sm: u32,
    pub measured: bool,
    pub entries: Vec<LutEntry>,
}

const SM90: &str = include_str!("../lut/sm90.txt");
/// The sm_90 entries for FP8 output (`cargo bench --bench rmsnorm -- tune --output fp8`).
const SM90_FP8: &str = include_str!("../lut/sm90_fp8.txt");
const SM100: &str = include_str!("../lut/sm100.txt");

/// Parses a table (columns `C T out knobs occupancy kernel_us copy_us`); panics naming the line
/// on malformed input (the tables are compiled in, so a bad one is caught by the tests).
pub fn parse(text: &'static str) -> Vec<LutEntry> {
    table::compiled_in(
        "row LUT",
        text,
        "C T out knobs occupancy kernel_us copy_us",
        |l| {
            Ok(LutEntry {
                channels: l.count(0, "C")?,
                rows: l.count(1, "T")?,
                out: l.word(2),
                knobs: l.knobs(3)?,
                occupancy: l.count(4, "occupancy")? as u32,
                kernel_us: l.measured(5, "kernel_us")?,
                copy_us: l.measured(6, "copy_us")?,
            })
        },
    )
}

/// All compiled-in tables.
pub fn tables() -> &'static [Lut] {
    static TABLES: OnceLock<Vec<Lut>> = OnceLock::new();
    TABLES.get_or_init(|| {
        vec![
            Lut {
                sm: 90,
                measured: true,
                entries: parse(SM90).into_iter().chain(parse(SM90_FP8)).collect(),
            },
            Lut {
                sm: 100,
                measured: false,
                entries: parse(SM100),
            },
        ]
    })
}

/// How an entry was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Match {
    Exact,
    NearestRows,
}

/// The entry for `(sm, C, T, out)`: exact, else nearest T (log scale) for the same C and out.
pub fn lookup(sm: u32, channels: usize, rows: usize, out: &str) -> Option<(LutEntry, Match)> {
    let table = tables().iter().find(|t| t.sm == sm)?;
    let same_c = table
        .entries
        .iter()
        .filter(|e| e.channels == channels && e.out == out);
    let best = table::nearest_rows(same_c, |e| e.rows, rows)?;
    let how = if best.rows == rows {
        Match::Exact
    } else {
        Match::NearestRows
    };
    Some((*best, how))
}

/// The entry nearest to `(C, T)` for `out` on a log scale in both (C weighted first): the
/// starting point of [`crate::select::table_derived_knobs`] for widths the table lacks.
pub fn nearest(sm: u32, channels: usize, rows: usize, out: &str) -> Option<LutEntry> {
    let table = tables().iter().find(|t| t.sm == sm)?;
    let log_ratio = |a: usize, b: usize| ((a.max(1) as f64) / (b.max(1) as f64)).ln().abs();
    table
        .entries
        .iter()
        .filter(|e| e.out == out)
        .min_by(|a, b| {
            let key =
                |e: &LutEntry| 2.0 * log_ratio(e.channels, channels) + log_ratio(e.rows, rows);
            key(a).total_cmp(&key(b))
        })
        .copied()
}

/// The compute capability x 10 from a cubecl CUDA fingerprint such as `ptx_sm90`.
pub fn sm_from_fingerprint(fingerprint: &str) -> Option<u32> {
    let digits: String = fingerprint
        .rsplit("sm")
        .next()?
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    if fingerprint.contains("sm") {
        digits.parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_parse_and_cover_the_cudnn_grid() {
        let sm100 = tables().iter().find(|t| t.sm == 100).unwrap();
        assert_eq!(sm100.entries.len(), 120);
        assert!(!sm100.measured);
        for t in tables() {
            for e in &t.entries {
                // Powers of two, or counts that pack rows into planes of 32.
                let lanes = e.knobs.lanes_per_row;
                assert!(lanes.is_power_of_two() || lanes < 32, "{e:?}");
                assert!(e.channels.is_multiple_of(e.knobs.vector_size), "{e:?}");
            }
        }
    }

    #[test]
    fn lookup_exact_then_nearest_rows() {
        let (e, how) = lookup(100, 256, 24960, "bf16").unwrap();
        assert_eq!((e.rows, how), (24960, Match::Exact));
        let (e, how) = lookup(100, 256, 30000, "bf16").unwrap();
        assert_eq!((e.rows, how), (24960, Match::NearestRows));
        let (e, _) = lookup(100, 256, 1, "bf16").unwrap();
        assert_eq!(e.rows, 1560);
        assert!(lookup(100, 257, 1560, "bf16").is_none());
        assert!(lookup(75, 256, 1560, "bf16").is_none());
    }

    #[test]
    fn nearest_entry_weighs_c_first() {
        let e = nearest(100, 200, 50_000, "bf16").unwrap();
        assert_eq!((e.channels, e.rows), (160, 99840));
        let e = nearest(100, 8192, 1, "bf16").unwrap();
        assert_eq!((e.channels, e.rows), (1024, 1560));
        assert!(nearest(75, 64, 64, "bf16").is_none());
    }

    #[test]
    fn fingerprints() {
        assert_eq!(sm_from_fingerprint("ptx_sm90"), Some(90));
        assert_eq!(sm_from_fingerprint("cuda_sm100a"), Some(100));
        assert_eq!(sm_from_fingerprint("cpu"), None);
    }
}
