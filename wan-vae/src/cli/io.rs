//! The binary's files: the latent and reference tensors read, the video written (PNG frames, GIF, safetensors), the comparisons.

use crate::*;

/// A safetensors file's bytes (read once: `--latent` serves as the input and the reference).
pub(crate) fn read_file(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| fail(&format!("--latent {}: {e}", path.display())))
}

/// A latent from a safetensors file: the tensor `z`, or the file's only tensor.
pub(crate) fn read_latent(path: &Path, bytes: &[u8], device: &Device) -> Tensor<5> {
    let shown = path.display();
    let file = safetensors::SafeTensors::deserialize(bytes)
        .unwrap_or_else(|e| fail(&format!("--latent {shown}: not a safetensors file: {e}")));
    let names = file.names();
    let name = if names.contains(&"z") {
        "z".to_string()
    } else if names.len() == 1 {
        names[0].to_string()
    } else {
        fail(&format!("--latent {shown}: no tensor `z` among {names:?}"))
    };
    read_tensor(path, bytes, &name, device).expect("listed tensor")
}

/// The 5-D tensor `name` of a safetensors file, if it has one.
pub(crate) fn read_tensor(
    path: &Path,
    bytes: &[u8],
    name: &str,
    device: &Device,
) -> Option<Tensor<5>> {
    let path = path.display();
    let file = safetensors::SafeTensors::deserialize(bytes)
        .unwrap_or_else(|e| fail(&format!("--latent {path}: not a safetensors file: {e}")));
    let view = file.tensor(name).ok()?;
    let shape = view.shape().to_vec();
    if shape.len() != 5 {
        fail(&format!(
            "--latent {path}: `{name}` must be [B, z_dim, T, h, w], got {shape:?}"
        ));
    }
    let values = wan_vae::weights::to_f32(&view).unwrap_or_else(|other| {
        fail(&format!(
            "--latent {path}: dtype {other:?} (expected F32, F16 or BF16)"
        ))
    });
    Some(Tensor::from_data(TensorData::new(values, shape), device))
}

/// Frames `[3, F, H, W]` in [-1, 1] -> one RGB byte buffer per frame.
pub(crate) fn to_rgb(video: Tensor<5>) -> (Vec<Vec<u8>>, usize, usize) {
    let [_, _, frames, height, width] = video.dims();
    let v = video
        .slice(burn::tensor::s![0..1])
        .cast(DType::F32)
        .permute([0, 2, 3, 4, 1]) // [1, F, H, W, 3]
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("f32 frames");
    let per_frame = height * width * 3;
    let rgb = (0..frames)
        .map(|f| {
            v[f * per_frame..(f + 1) * per_frame]
                .iter()
                .map(|&x| ((x.clamp(-1.0, 1.0) + 1.0) * 127.5).round() as u8)
                .collect()
        })
        .collect();
    (rgb, width, height)
}

pub(crate) fn flat(t: Tensor<5>) -> Vec<f32> {
    t.cast(DType::F32)
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("f32 values")
}

pub(crate) fn write_outputs(dir: &Path, frames: &[Vec<u8>], width: usize, height: usize) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| fail(&format!("--out {}: {e}", dir.display())));
    let dir = dir.display();
    for (i, rgb) in frames.iter().enumerate() {
        let path = format!("{dir}/frame_{i:03}.png");
        let file = std::fs::File::create(&path).unwrap_or_else(|e| fail(&format!("{path}: {e}")));
        let mut encoder =
            png::Encoder::new(std::io::BufWriter::new(file), width as u32, height as u32);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().expect("png header");
        writer.write_image_data(rgb).expect("png data");
    }
    let path = format!("{dir}/video.gif");
    let file = std::fs::File::create(&path).unwrap_or_else(|e| fail(&format!("{path}: {e}")));
    let mut gif = gif::Encoder::new(file, width as u16, height as u16, &[]).expect("gif header");
    gif.set_repeat(gif::Repeat::Infinite).expect("gif repeat");
    for rgb in frames {
        let mut frame = gif::Frame::from_rgb_speed(width as u16, height as u16, rgb, 10);
        frame.delay = 6; // 1/100 s units: ~16 fps, Wan's frame rate
        gif.write_frame(&frame).expect("gif frame");
    }
    let path = format!("{dir}/video.mp4");
    wan_vae::write_mp4(
        Path::new(&path),
        frames,
        width,
        height,
        wan_vae::Mp4Options::default(),
    )
    .unwrap_or_else(|e| fail(&format!("{path}: {e}")));
}

/// max |a - b| / max |b|.
pub(crate) fn max_relative_difference(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let worst = a
        .iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    worst / scale
}

/// PSNR in dB of `a` against `b` after clamping both to [-1, 1] (peak-to-peak 2).
pub(crate) fn psnr(a: &[f32], b: &[f32]) -> f64 {
    let mse = a
        .iter()
        .zip(b)
        .map(|(x, y)| {
            let d = (x.clamp(-1.0, 1.0) - y.clamp(-1.0, 1.0)) as f64;
            d * d
        })
        .sum::<f64>()
        / a.len().max(1) as f64;
    10.0 * (4.0 / mse).log10()
}

/// Writes the video `[B, 3, F, H, W]` (before the clamp) as f32 `video` in a safetensors file.
pub(crate) fn save_video(path: &Path, video: Tensor<5>) {
    let file = path;
    let path = path.display();
    let shape = video.dims().to_vec();
    let values = flat(video);
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape, &bytes)
        .unwrap_or_else(|e| fail(&format!("--save {path}: {e}")));
    safetensors::serialize_to_file([("video", view)], None, file)
        .unwrap_or_else(|e| fail(&format!("--save {path}: {e}")));
}
