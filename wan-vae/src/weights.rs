//! Where the decoder's tensors come from: a safetensors file (diffusers names, or the original
//! `.pth` / ComfyUI names), or a seeded random initialisation of the same shapes.
//!
//! The modules ask for tensors by their diffusers name and expected shape; a file with the
//! original names is read through [`original_key`]. Norm gammas are stored `[C, 1, 1, 1]` or
//! `[C, 1, 1]` and flattened to `[C]`. Every tensor is cast to the decoder's dtype on load.

use std::collections::HashMap;

use burn::tensor::{DType, Device, Tensor, TensorData};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

use crate::config::WanConfig;

/// What went wrong loading weights; every variant names the file or the tensor.
#[derive(Debug, Clone, PartialEq)]
pub enum WeightError {
    /// The file could not be read.
    Read { path: String, message: String },
    /// The file is not a safetensors file.
    NotSafetensors { path: String, message: String },
    /// The file has neither naming's first decoder convolution.
    NotWanDecoder { path: String },
    /// A tensor is stored in a dtype other than F32, F16 or BF16.
    Dtype { key: String, dtype: String },
    /// A tensor the decoder needs is not in the file.
    Missing {
        key: String,
        also: String,
        path: String,
    },
    /// A tensor has another shape than this decoder needs.
    Shape {
        key: String,
        also: String,
        path: String,
        found: Vec<usize>,
        expected: Vec<usize>,
    },
    /// The file's shapes do not describe a decoder this crate knows.
    Config(String),
}

impl std::fmt::Display for WeightError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Read { path, message } => write!(f, "weights: cannot read {path}: {message}"),
            Self::NotSafetensors { path, message } => {
                write!(f, "weights: {path} is not a safetensors file: {message}")
            }
            Self::NotWanDecoder { path } => write!(
                f,
                "weights: {path} has no `decoder.conv_in.weight` (diffusers) or \
                 `decoder.conv1.weight` (original) tensor: not a Wan VAE decoder"
            ),
            Self::Dtype { key, dtype } => write!(
                f,
                "weights: `{key}` has dtype {dtype}; expected F32, F16 or BF16"
            ),
            Self::Missing { key, also, path } => {
                write!(f, "weights: missing tensor `{key}`{also} in {path}")
            }
            Self::Shape {
                key,
                also,
                path,
                found,
                expected,
            } => write!(
                f,
                "weights: tensor `{key}`{also} in {path} has shape {found:?}, expected \
                 {expected:?} for this decoder"
            ),
            Self::Config(message) => write!(f, "weights: {message}"),
        }
    }
}

impl std::error::Error for WeightError {}

/// How the keys of a weight file are spelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    /// `decoder.conv_in`, `decoder.mid_block.resnets.0.norm1.gamma`, ...
    Diffusers,
    /// `decoder.conv1`, `decoder.middle.0.residual.0.gamma`, ... (Wan's `.pth`, ComfyUI).
    Original,
}

/// A source of named tensors for building the decoder.
pub enum Weights {
    File {
        path: String,
        /// Host copies in f32, keyed as in the file (minus any common prefix).
        tensors: HashMap<String, (Vec<f32>, Vec<usize>)>,
        naming: Naming,
    },
    /// Seeded uniform weights with the variance of PyTorch's defaults, gammas `1 + U(-0.3, 0.3)`.
    Random { state: u64 },
}

impl Weights {
    /// Reads every tensor of a safetensors file (F32, F16 or BF16) and detects its naming.
    pub fn from_file(path: &str) -> Result<Self, WeightError> {
        let bytes = std::fs::read(path).map_err(|e| WeightError::Read {
            path: path.to_string(),
            message: e.to_string(),
        })?;
        let file = SafeTensors::deserialize(&bytes).map_err(|e| WeightError::NotSafetensors {
            path: path.to_string(),
            message: e.to_string(),
        })?;
        let names = file.names();
        // A checkpoint may prefix every key (`vae.`, `first_stage_model.`): find the decoder's
        // first convolution under either naming and strip what precedes it.
        let (prefix, naming) = names
            .iter()
            .find_map(|k| {
                if let Some(p) = k.strip_suffix("decoder.conv_in.weight") {
                    Some((p.to_string(), Naming::Diffusers))
                } else {
                    k.strip_suffix("decoder.conv1.weight")
                        .map(|p| (p.to_string(), Naming::Original))
                }
            })
            .ok_or_else(|| WeightError::NotWanDecoder {
                path: path.to_string(),
            })?;
        let mut tensors = HashMap::new();
        for name in names {
            let Some(key) = name.strip_prefix(prefix.as_str()) else {
                continue;
            };
            let view = file.tensor(name).map_err(|e| WeightError::NotSafetensors {
                path: path.to_string(),
                message: format!("`{name}`: {e}"),
            })?;
            let values = to_f32(&view).map_err(|other| WeightError::Dtype {
                key: name.to_string(),
                dtype: format!("{other:?}"),
            })?;
            tensors.insert(key.to_string(), (values, view.shape().to_vec()));
        }
        Ok(Weights::File {
            path: path.to_string(),
            tensors,
            naming,
        })
    }

    pub fn random(seed: u64) -> Self {
        Weights::Random {
            state: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
        }
    }

    /// The shape of a tensor by diffusers name (for [`WanConfig::detect`]); `None` for a random
    /// source or a missing key.
    pub fn shape(&self, key: &str) -> Option<Vec<usize>> {
        match self {
            Weights::File {
                tensors, naming, ..
            } => {
                let key = match naming {
                    Naming::Diffusers => key.to_string(),
                    // Detection reads keys that are spelled the same in both Wan versions'
                    // original names except the up blocks; try both layouts.
                    Naming::Original => {
                        let k21 = original_key(key, false, 2);
                        if tensors.contains_key(&k21) {
                            k21
                        } else {
                            original_key(key, true, 2)
                        }
                    }
                };
                tensors.get(&key).map(|(_, s)| s.clone())
            }
            Weights::Random { .. } => None,
        }
    }

    /// The tensor `key` (diffusers name) of `shape`, on `device` in `dtype`. Gammas (`*.gamma`)
    /// are asked for as `[C]` and accepted as `[C, 1, ...]`.
    pub fn get<const D: usize>(
        &mut self,
        key: &str,
        shape: [usize; D],
        config: &WanConfig,
        device: &Device,
        dtype: DType,
    ) -> Result<Tensor<D>, WeightError> {
        let values = self.values(key, &shape, config)?;
        let data = TensorData::new(values, shape.to_vec()).convert_dtype(dtype);
        Ok(Tensor::from_data(data, (device, dtype)))
    }

    /// The host values (f32, row-major) of the tensor `key` of `shape`; see [`Weights::get`].
    pub fn values(
        &mut self,
        key: &str,
        shape: &[usize],
        config: &WanConfig,
    ) -> Result<Vec<f32>, WeightError> {
        let count: usize = shape.iter().product();
        Ok(match self {
            Weights::File {
                path,
                tensors,
                naming,
            } => {
                let file_key = match naming {
                    Naming::Diffusers => key.to_string(),
                    Naming::Original => original_key(key, config.residual, config.num_res_blocks),
                };
                let also = if file_key == key {
                    String::new()
                } else {
                    format!(" (original name `{file_key}`)")
                };
                let (values, file_shape) =
                    tensors.get(&file_key).ok_or_else(|| WeightError::Missing {
                        key: key.to_string(),
                        also: also.clone(),
                        path: path.clone(),
                    })?;
                let flattened_gamma = key.ends_with(".gamma")
                    && file_shape.first() == shape.first()
                    && file_shape.iter().product::<usize>() == count;
                if file_shape.as_slice() != shape && !flattened_gamma {
                    return Err(WeightError::Shape {
                        key: key.to_string(),
                        also,
                        path: path.clone(),
                        found: file_shape.clone(),
                        expected: shape.to_vec(),
                    });
                }
                values.clone()
            }
            Weights::Random { state } => {
                let mut next = || {
                    *state ^= *state << 13;
                    *state ^= *state >> 7;
                    *state ^= *state << 17;
                    ((*state >> 11) as f64 / (1u64 << 53) as f64) as f32 * 2.0 - 1.0
                };
                let fan_in: usize = shape.iter().skip(1).product::<usize>().max(1);
                let bound = if key.ends_with(".weight") {
                    (3.0 / fan_in as f32).sqrt()
                } else if key.ends_with(".bias") {
                    0.02
                } else {
                    0.3
                };
                let offset = if key.ends_with(".gamma") { 1.0 } else { 0.0 };
                (0..count).map(|_| offset + bound * next()).collect()
            }
        })
    }
}

/// A stored F32, F16 or BF16 tensor's values as f32; the dtype otherwise.
pub fn to_f32(view: &TensorView) -> Result<Vec<f32>, Dtype> {
    let data = view.data();
    Ok(match view.dtype() {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::BF16 => data
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        other => return Err(other),
    })
}

/// The original (`.pth` / ComfyUI) name of a diffusers decoder key. `wan22` selects Wan2.2's
/// nested `upsamples.{stage}.upsamples.{block}` layout; Wan2.1 numbers the up stages' blocks
/// flat, `num_res_blocks + 2` per stage (residual blocks, then the upsampler).
pub fn original_key(key: &str, wan22: bool, num_res_blocks: usize) -> String {
    fn residual(rest: &str) -> String {
        for (from, to) in [
            ("norm1.", "residual.0."),
            ("conv1.", "residual.2."),
            ("norm2.", "residual.3."),
            ("conv2.", "residual.6."),
            ("conv_shortcut.", "shortcut."),
        ] {
            if let Some(tail) = rest.strip_prefix(from) {
                return format!("{to}{tail}");
            }
        }
        rest.to_string()
    }
    let split_index = |s: &str| -> (usize, String) {
        let (i, rest) = s.split_once('.').unwrap_or((s, ""));
        (i.parse().unwrap_or(usize::MAX), rest.to_string())
    };
    if let Some(rest) = key.strip_prefix("post_quant_conv.") {
        return format!("conv2.{rest}");
    }
    if let Some(rest) = key.strip_prefix("decoder.conv_in.") {
        return format!("decoder.conv1.{rest}");
    }
    if let Some(rest) = key.strip_prefix("decoder.norm_out.") {
        return format!("decoder.head.0.{rest}");
    }
    if let Some(rest) = key.strip_prefix("decoder.conv_out.") {
        return format!("decoder.head.2.{rest}");
    }
    if let Some(rest) = key.strip_prefix("decoder.mid_block.resnets.") {
        let (j, rest) = split_index(rest);
        return format!(
            "decoder.middle.{}.{}",
            if j == 0 { 0 } else { 2 },
            residual(&rest)
        );
    }
    if let Some(rest) = key.strip_prefix("decoder.mid_block.attentions.0.") {
        return format!("decoder.middle.1.{rest}");
    }
    if let Some(rest) = key.strip_prefix("decoder.up_blocks.") {
        let (stage, rest) = split_index(rest);
        let per_stage = num_res_blocks + 2;
        if let Some(rest) = rest.strip_prefix("resnets.") {
            let (j, rest) = split_index(rest);
            return if wan22 {
                format!(
                    "decoder.upsamples.{stage}.upsamples.{j}.{}",
                    residual(&rest)
                )
            } else {
                format!(
                    "decoder.upsamples.{}.{}",
                    stage * per_stage + j,
                    residual(&rest)
                )
            };
        }
        if let Some(rest) = rest.strip_prefix("upsampler.") {
            return format!(
                "decoder.upsamples.{stage}.upsamples.{}.{rest}",
                num_res_blocks + 1
            );
        }
        if let Some(rest) = rest.strip_prefix("upsamplers.0.") {
            return format!(
                "decoder.upsamples.{}.{rest}",
                stage * per_stage + num_res_blocks + 1
            );
        }
    }
    key.to_string()
}
