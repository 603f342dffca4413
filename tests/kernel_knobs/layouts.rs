use super::*;

/// The extension called on the raw (un-fused) CubeCL backend.
#[test]
fn raw_cube_backend_extension() {
    let device = cube_device();
    let mut rng = rng("raw_cube");
    let (rows, channels) = (10, 384);
    let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, DType::BF16);
    let want = reference(&x, &gamma, NormParams::rms(eps), Activation::Silu);
    let y = <CubeBackend as RmsNormSiluBackend>::rms_norm_silu(
        upload(&x, vec![2, 5, channels], DType::BF16, &device),
        upload(&gamma, vec![channels], DType::BF16, &device),
        NormParams::rms(eps),
        Activation::Silu,
    );
    assert_close(&download(y), &want, 2e-2, 2e-2, "raw CubeBackend");
}

/// Rows read from and written to pitched buffers: padding in x is NaN (it must not be read)
/// and padding in the output stays NaN (it must not be written).
#[test]
fn pitched_rows_are_read_and_written_in_place() {
    let device = cube_device();
    let mut rng = rng("pitched");
    let (rows, channels, x_pitch, out_pitch) = (9, 40, 48, 56);
    let (x, gamma, eps) = cudnn_inputs(&mut rng, rows, channels, DType::F32);
    let want = reference(&x, &gamma, NormParams::rms(eps), Activation::Silu);
    let mut x_padded = vec![f64::NAN; rows * x_pitch];
    for r in 0..rows {
        x_padded[r * x_pitch..r * x_pitch + channels]
            .copy_from_slice(&x[r * channels..(r + 1) * channels]);
    }
    let xt = upload(&x_padded, vec![rows * x_pitch], DType::F32, &device);
    let gt = upload(&gamma, vec![channels], DType::F32, &device);
    let out = upload(
        &vec![f64::NAN; rows * out_pitch],
        vec![rows * out_pitch],
        DType::F32,
        &device,
    );
    let problem = RowsProblem {
        rows,
        channels,
        x_row_stride: x_pitch,
        out_row_stride: out_pitch,
    };
    let client = xt.client.clone();
    let k = select_knobs(&client, problem, 4, 4, 256);
    launch_forward(
        &client,
        RowOperands {
            x: xt.handle.clone(),
            gamma: gt.handle.clone(),
            x_type: elem(DType::F32),
            gamma_type: elem(DType::F32),
        },
        out.handle.clone(),
        problem,
        NormParams::rms(eps),
        Activation::Silu,
        &k,
    )
    .unwrap();
    let got = download(out);
    let rows_got: Vec<f64> = (0..rows)
        .flat_map(|r| got[r * out_pitch..r * out_pitch + channels].to_vec())
        .collect();
    assert_close(&rows_got, &want, 1e-5, 1e-5, "pitched rows");
    for r in 0..rows {
        assert!(
            got[r * out_pitch + channels..(r + 1) * out_pitch]
                .iter()
                .all(|v| v.is_nan()),
            "row {r}: the kernel wrote into the output padding"
        );
    }
}

/// A pitched Burn tensor (a slice of a wider one) goes through the public API without a copy
/// of its rows being needed for correctness.
#[test]
fn sliced_tensor_through_the_api() {
    use burn::tensor::s;
    let device = device();
    let mut rng = rng("sliced");
    let (rows, wide, channels) = (6, 72, 64);
    let x = round_to(&randn(&mut rng, rows * wide), DType::F32);
    let gamma = round_to(&uniform(&mut rng, channels, 0.5, 2.0), DType::F32);
    let x_rows: Vec<f64> = (0..rows)
        .flat_map(|r| x[r * wide..r * wide + channels].to_vec())
        .collect();
    let want = reference(&x_rows, &gamma, NormParams::rms(1e-5), Activation::Silu);
    let xt = tensor(&x, [rows, wide], DType::F32, &device).slice(s![.., 0..channels]);
    let y =
        burn_rmsnorm_silu::rms_norm_silu(xt, tensor(&gamma, [channels], DType::F32, &device), 1e-5);
    assert_close(&values(y), &want, 1e-6, 1e-5, "sliced rows");
}

/// The benchmarks' two copy roofs (`Timer::copy`, `Timer::copy_unrolled`) move every byte,
/// for lengths that leave a tail after the unrolled steps and with 16-, 8- and 4-byte vectors.
#[test]
fn copy_roofs_move_every_byte() {
    use rmsnorm_silu_kernels::timing::Timer;
    let device = cube_device();
    let timer = Timer::new(device.client());
    let mut rng = rng("copy_roofs");
    for len in [1usize, 6, 4 * 1031, 4 * 77 * 256 + 12] {
        let src = upload(
            &uniform(&mut rng, len, -9.0, 9.0),
            vec![len],
            DType::F32,
            &device,
        );
        for unrolled in [false, true] {
            let dst = upload(&vec![f64::NAN; len], vec![len], DType::F32, &device);
            if unrolled {
                timer.copy_unrolled(&src.handle, &dst.handle, len * 4);
            } else {
                timer.copy(&src.handle, &dst.handle, len * 4);
            }
            let got = download(dst);
            let want = download(src.clone());
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "len {len}, unrolled {unrolled}: the copy differs"
            );
        }
    }
}

/// The write-behind into a target whose rows lie at a pitch (as CUDA allocates them: 16 f32
/// channels in rows of 24) happens in place: the result keeps the target's buffer and strides,
/// its new frames hold the op's values, its cached frames and the padding keep theirs.
#[test]
fn write_behind_into_pitched_rows_in_place() {
    use rmsnorm_silu_kernels::cubecl::zspace::metadata::Metadata;
    let device = cube_device();
    let mut rng = rng("pitched into");
    let ([frames, h, w, c], t, at, pitch) = ([5, 2, 3, 16], 3, 2, 24);
    let x = round_to(&randn(&mut rng, t * h * w * c), DType::F32);
    let gamma = round_to(&uniform(&mut rng, c, 0.5, 2.0), DType::F32);
    let norm = NormParams::l2_clamp(1e-12, c);
    let want_x = reference(&x, &gamma, norm, Activation::Silu);
    let poison = -7.25;
    let buffer = upload(
        &vec![poison; frames * h * w * pitch],
        vec![frames * h * w * pitch],
        DType::F32,
        &device,
    );
    let strides = [frames * h * w * pitch, h * w * pitch, w * pitch, pitch, 1];
    let into = CubeTensor::new(
        buffer.client.clone(),
        buffer.handle,
        Metadata::new([1, frames, h, w, c], strides),
        buffer.device.clone(),
        DType::F32,
    );
    let offset = at * h * w * c;
    let out = <CubeBackend as RmsNormSiluBackend>::rms_norm_silu_into(
        upload(&x, vec![1, t, h, w, c], DType::F32, &device),
        upload(&gamma, vec![c], DType::F32, &device),
        norm,
        Activation::Silu,
        into,
        offset,
    );
    assert_eq!(
        out.meta.strides().to_vec(),
        strides.to_vec(),
        "written in place"
    );
    // The whole buffer, padding included, through a dense view of it.
    let raw = CubeTensor::new(
        out.client.clone(),
        out.handle.clone(),
        Metadata::new([frames * h * w * pitch], [1]),
        out.device.clone(),
        DType::F32,
    );
    let got = download(raw);
    for row in 0..frames * h * w {
        for k in 0..pitch {
            let g = got[row * pitch + k];
            let new_row = row.checked_sub(at * h * w).filter(|r| *r < t * h * w);
            match new_row {
                Some(r) if k < c => assert!(
                    (g - want_x[r * c + k]).abs() <= 1e-5 * (1.0 + want_x[r * c + k].abs()),
                    "row {row} channel {k}: {g} vs {}",
                    want_x[r * c + k]
                ),
                _ => assert_eq!(g, poison, "row {row} position {k} must keep its value"),
            }
        }
    }
}

/// Channels-first `[B, C, T, H, W]` whose W rows lie at a pitch (as CUDA allocates
/// `Tensor::from_data` when W's bytes are not a power of two), over the channel axis: read in
/// place by the channels kernel (one launch per batch, the T x H rows as its batches), NaN in the
/// padding never read, the output dense channels-first; an offset view (a slice of the padded
/// rows) too.
#[test]
fn pitched_channels_first_over_the_channel_axis() {
    use rmsnorm_silu_kernels::cubecl::zspace::metadata::Metadata;
    let device = cube_device();
    let mut rng = rng("pitched channels-first");
    for ([b, c, t, h, w], pitch, skip) in [([2, 5, 3, 2, 12], 16, 0), ([1, 8, 2, 3, 8], 12, 4)] {
        let shape = [b, c, t, h, w];
        let n = b * c * t * h * w;
        let x = round_to(&randn(&mut rng, n), DType::F32);
        let gamma = round_to(&uniform(&mut rng, c, 0.5, 2.0), DType::F32);
        let norm = NormParams::rms(1e-5);
        let want = crate::channels::reference_dim(&x, &shape, 1, &gamma, norm, Activation::Silu);
        // Row r of W values at r * pitch + skip; NaN everywhere else.
        let rows = b * c * t * h;
        let mut padded = vec![f64::NAN; rows * pitch + skip];
        for r in 0..rows {
            padded[r * pitch + skip..r * pitch + skip + w].copy_from_slice(&x[r * w..(r + 1) * w]);
        }
        let buffer = upload(&padded, vec![padded.len()], DType::F32, &device);
        let strides = [c * t * h * pitch, t * h * pitch, h * pitch, pitch, 1];
        let mut handle = buffer.handle.clone();
        handle = handle.offset_start((skip * 4) as u64);
        let x = CubeTensor::new(
            buffer.client.clone(),
            handle,
            Metadata::new(shape, strides),
            buffer.device.clone(),
            DType::F32,
        );
        let y = <CubeBackend as RmsNormSiluBackend>::rms_norm_silu_dim(
            x,
            upload(&gamma, vec![c], DType::F32, &device),
            1,
            norm,
            Activation::Silu,
        );
        assert_eq!(y.meta.shape().to_vec(), shape.to_vec());
        let dense = [c * t * h * w, t * h * w, h * w, w, 1];
        assert_eq!(y.meta.strides().to_vec(), dense.to_vec(), "dense output");
        assert_close(
            &download(y),
            &want,
            1e-5,
            1e-5,
            &format!("{shape:?} at pitch {pitch}, offset {skip}"),
        );
    }
}
