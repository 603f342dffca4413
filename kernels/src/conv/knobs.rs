//! The launch configuration of one implicit-GEMM convolution: which cubek routine (how its
//! tiles are loaded), which tensor-core instruction, and how the output is tiled over planes
//! and cubes. A plain value with a dotted text form, so that a table can name it.
//!
//! ```text
//! sync_cyclic.mma16x8x16.p2x6x2.s4x1.sw.db
//! │           │          │      │    │  └ double-buffered partitions (else single)
//! │           │          │      │    └ shared-memory swizzle (else none)
//! │           │          │      └ stage: planes along m x n (planes per cube = m * n)
//! │           │          └ partition: instruction tiles per plane along m x n x k
//! │           └ instruction: mma (PTX mma.sync) or cmma (wmma), its m x n x k
//! └ routine: sync_cyclic, sync_strided, sync_tilewise, async_cyclic, async_strided, tma,
//!   spec_cyclic, spec_strided, spec_tma (spec: load-only planes, two stages)
//! ```
//!
//! A cube computes `s_m * p_m * t_m` output rows (positions) by `s_n * p_n * t_n` output
//! channels, stepping through the reduction (`C_in` times the kernel's taps) `p_k * t_k` at a
//! time.

use cubek::convolution::{AcceleratedTileKind, ConvAlgorithm};
use cubek::matmul::definition::MatmulProblem;
use cubek::matmul::multi_level::components::global::{InputLoadFlow, LoadFlows};
use cubek::matmul::multi_level::components::stage::PartitionBuffering;
use cubek::matmul::multi_level::components::tile::TileMatmulKind;
use cubek::matmul::multi_level::definition::{BatchMatmulBlueprint, TilingScheme};
use cubek::matmul::multi_level::stage::{SwizzleMode, SwizzleModes};
use cubek::std::cube_count::{CubeCountStrategy, GlobalOrder, HypercubeBlueprint, SmAllocation};

/// One convolution launch configuration (see the module docs for its text form).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvKnobs {
    pub algorithm: ConvAlgorithm,
    pub tile_kind: AcceleratedTileKind,
    /// The tensor-core instruction's m, n, k.
    pub tile: [u32; 3],
    /// Instruction tiles per plane along m, n, k.
    pub partition: [u32; 3],
    /// Planes per cube along m and n.
    pub stage: [u32; 2],
    pub swizzle: bool,
    pub double_buffer: bool,
}

const ALGORITHMS: [(&str, ConvAlgorithm); 9] = [
    ("sync_cyclic", ConvAlgorithm::SimpleSyncCyclic),
    ("sync_strided", ConvAlgorithm::SimpleSyncStrided),
    ("sync_tilewise", ConvAlgorithm::SimpleSyncTilewise),
    ("async_cyclic", ConvAlgorithm::SimpleAsyncCyclic),
    ("async_strided", ConvAlgorithm::SimpleAsyncStrided),
    ("tma", ConvAlgorithm::SimpleAsyncTma),
    ("spec_cyclic", ConvAlgorithm::SpecializedAsyncCyclic),
    ("spec_strided", ConvAlgorithm::SpecializedAsyncStrided),
    ("spec_tma", ConvAlgorithm::SpecializedTma),
];

fn triple(s: &str, what: &str) -> Result<[u32; 3], String> {
    let v: Vec<u32> = s
        .split('x')
        .map(|p| p.parse::<u32>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("{what} `{s}`: expected three numbers joined by x"))?;
    match v[..] {
        [a, b, c] if a > 0 && b > 0 && c > 0 => Ok([a, b, c]),
        _ => Err(format!(
            "{what} `{s}`: expected three positive numbers joined by x"
        )),
    }
}

impl ConvKnobs {
    /// Parses the dotted form (`sync_cyclic.mma16x8x16.p2x6x2.s4x1.sw.db`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split('.').collect();
        if parts.len() < 4 {
            return Err(format!(
                "conv knobs `{text}`: expected routine.instruction.partition.stage[.sw][.db]"
            ));
        }
        let algorithm = ALGORITHMS
            .iter()
            .find(|(name, _)| *name == parts[0])
            .map(|(_, a)| *a)
            .ok_or_else(|| {
                let names: Vec<&str> = ALGORITHMS.iter().map(|(n, _)| *n).collect();
                format!(
                    "conv knobs `{text}`: routine `{}` is not one of {names:?}",
                    parts[0]
                )
            })?;
        let (tile_kind, tile) = if let Some(t) = parts[1].strip_prefix("mma") {
            (AcceleratedTileKind::Mma, triple(t, "instruction")?)
        } else if let Some(t) = parts[1].strip_prefix("cmma") {
            (AcceleratedTileKind::Cmma, triple(t, "instruction")?)
        } else {
            return Err(format!(
                "conv knobs `{text}`: instruction `{}` must start with mma or cmma",
                parts[1]
            ));
        };
        let partition = parts[2]
            .strip_prefix('p')
            .ok_or_else(|| format!("conv knobs `{text}`: partition must start with p"))
            .and_then(|p| triple(p, "partition"))?;
        let stage = parts[3]
            .strip_prefix('s')
            .ok_or_else(|| format!("conv knobs `{text}`: stage must start with s"))
            .and_then(|s| triple(&format!("{s}x1"), "stage"))?;
        let mut knobs = Self {
            algorithm,
            tile_kind,
            tile,
            partition,
            stage: [stage[0], stage[1]],
            swizzle: false,
            double_buffer: false,
        };
        for flag in &parts[4..] {
            match *flag {
                "sw" if !knobs.swizzle => knobs.swizzle = true,
                "db" if !knobs.double_buffer => knobs.double_buffer = true,
                other => {
                    return Err(format!(
                        "conv knobs `{text}`: flag `{other}` is not sw or db (each at most once)"
                    ));
                }
            }
        }
        Ok(knobs)
    }

    /// Whether the routine dedicates planes to loading (two stages in flight).
    pub fn specialized(&self) -> bool {
        matches!(
            self.algorithm,
            ConvAlgorithm::SpecializedAsyncCyclic
                | ConvAlgorithm::SpecializedAsyncStrided
                | ConvAlgorithm::SpecializedTma
        )
    }

    /// Whether the routine loads through the tensor-memory accelerator (vectors of one).
    pub fn tma(&self) -> bool {
        matches!(
            self.algorithm,
            ConvAlgorithm::SimpleAsyncTma | ConvAlgorithm::SpecializedTma
        )
    }

    /// Output rows (positions) one cube computes.
    pub fn cube_rows(&self) -> u32 {
        self.stage[0] * self.partition[0] * self.tile[0]
    }

    /// Output channels one cube computes.
    pub fn cube_cols(&self) -> u32 {
        self.stage[1] * self.partition[1] * self.tile[1]
    }

    /// Reduction elements one stage holds.
    pub fn stage_k(&self) -> u32 {
        self.partition[2] * self.tile[2]
    }

    /// cubek's blueprint for `problem` on a device with `sms` multiprocessors and planes of
    /// `plane_dim` units. `vector` is the load width in elements the launch will pick (it
    /// decides whether a swizzle pattern fits); `elem_size` the stage element's bytes.
    pub fn blueprint(
        &self,
        problem: &MatmulProblem,
        plane_dim: u32,
        sms: Option<u32>,
        elem_size: usize,
        vector: usize,
    ) -> BatchMatmulBlueprint {
        let tiling = TilingScheme::builder()
            .with_tile_size((self.tile[0], self.tile[1], self.tile[2]).into())
            .with_partition_size((self.partition[0], self.partition[1], self.partition[2]).into())
            .with_stage_size((self.stage[0], self.stage[1], 1).into())
            .build()
            .expect("all tiling levels are set");
        let cube_count_strategy = match sms {
            Some(num_sms) => CubeCountStrategy::Sm {
                num_sms,
                sm_usage: SmAllocation::Exact,
                cubes_first: true,
            },
            None => CubeCountStrategy::FromProblem,
        };
        let hypercube = HypercubeBlueprint::builder()
            .global_order(GlobalOrder::SwizzleRow(4))
            .cube_count_strategy(cube_count_strategy)
            .build();
        let kind = match self.tile_kind {
            AcceleratedTileKind::Mma => TileMatmulKind::Mma,
            AcceleratedTileKind::Cmma => TileMatmulKind::Cmma,
        };
        let mut builder = BatchMatmulBlueprint::builder(kind, tiling, plane_dim, problem)
            .partition_buffering(if self.double_buffer {
                PartitionBuffering::Double
            } else {
                PartitionBuffering::Single
            })
            .stage_buffering(if self.specialized() { 2 } else { 1 })
            .hypercube_blueprint(hypercube);
        if self.specialized() {
            builder = builder.load_specialization_config(LoadFlows {
                lhs: InputLoadFlow::LoadOnly,
                rhs: InputLoadFlow::LoadOnly,
            });
        }
        if self.swizzle {
            // Both operands are k-major (input rows of C_in, weight rows of C_in), so the
            // swizzled span is the stage's k extent.
            let vector = if self.tma() { 1 } else { vector };
            let mode = swizzle_mode(self.stage_k() as usize * elem_size, elem_size * vector);
            builder = builder.shared_swizzle(SwizzleModes {
                lhs: mode,
                rhs: mode,
                ..Default::default()
            });
        }
        builder.build()
    }
}

/// The swizzle pattern for a `span_bytes` row read in `vector_bytes` pieces (cubek's patterns
/// permute 16-byte atoms within 32, 64 or 128 bytes).
fn swizzle_mode(span_bytes: usize, vector_bytes: usize) -> SwizzleMode {
    if vector_bytes > 16 {
        return SwizzleMode::None;
    }
    match span_bytes {
        32 => SwizzleMode::B32,
        64 => SwizzleMode::B64,
        b if b >= 128 && b.is_power_of_two() => SwizzleMode::B128,
        _ => SwizzleMode::None,
    }
}

impl std::fmt::Display for ConvKnobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = ALGORITHMS
            .iter()
            .find(|(_, a)| *a == self.algorithm)
            .map(|(n, _)| *n)
            .expect("every algorithm has a name");
        let kind = match self.tile_kind {
            AcceleratedTileKind::Mma => "mma",
            AcceleratedTileKind::Cmma => "cmma",
        };
        let [tm, tn, tk] = self.tile;
        let [pm, pn, pk] = self.partition;
        let [sm, sn] = self.stage;
        write!(f, "{name}.{kind}{tm}x{tn}x{tk}.p{pm}x{pn}x{pk}.s{sm}x{sn}")?;
        if self.swizzle {
            f.write_str(".sw")?;
        }
        if self.double_buffer {
            f.write_str(".db")?;
        }
        Ok(())
    }
}

impl crate::table::TextKnobs for ConvKnobs {
    const KERNEL: &'static str = "conv";
    fn from_text(text: &str) -> Result<Self, String> {
        Self::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form_round_trips() {
        for text in [
            "sync_cyclic.mma16x8x16.p2x6x2.s4x1.sw.db",
            "tma.cmma16x16x16.p1x4x4.s8x1",
            "spec_strided.mma16x8x16.p4x4x1.s2x2.db",
        ] {
            let knobs = ConvKnobs::parse(text).unwrap();
            assert_eq!(knobs.to_string(), text);
        }
        let k = ConvKnobs::parse("sync_cyclic.mma16x8x16.p2x6x2.s4x1").unwrap();
        assert_eq!((k.cube_rows(), k.cube_cols(), k.stage_k()), (128, 48, 32));
    }

    #[test]
    fn bad_text_names_the_part() {
        for (text, needle) in [
            ("sync_cyclic.mma16x8x16.p2x6x2", "expected routine"),
            ("fast.mma16x8x16.p2x6x2.s4x1", "routine `fast`"),
            (
                "tma.wmma16x16x16.p1x4x4.s8x1",
                "must start with mma or cmma",
            ),
            ("tma.mma16x8.p1x4x4.s8x1", "instruction `16x8`"),
            ("tma.mma16x8x16.q1x4x4.s8x1", "partition must start with p"),
            ("tma.mma16x8x16.p1x0x4.s8x1", "partition `1x0x4`"),
            ("tma.mma16x8x16.p1x4x4.s8", "stage `8x1`"),
            ("tma.mma16x8x16.p1x4x4.s8x1.sw.sw", "flag `sw`"),
        ] {
            let err = ConvKnobs::parse(text).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
