//! The norm in the convolution's load against the separate fused norm then the convolution,
//! per shape (sm_90, `C_in` a multiple of 32): the fused norm alone (this crate's row kernel,
//! bf16 out), the wgmma convolution of its output, and the inverse-RMS reduction plus the
//! wgmma convolution with the norm in its load. The saved time against the norm's own is the
//! norm-into-convolution target. The values' correctness is tested in `tests/conv_wgmma.rs`.

use burn_rmsnorm_silu::kernels::conv::prologue::launch_positions_inv_rms;
use burn_rmsnorm_silu::kernels::conv::wgmma::select_wgmma;
use burn_rmsnorm_silu::kernels::conv::{NormPrologue, launch_wgmma};
use burn_rmsnorm_silu::kernels::forward::launch_forward;
use burn_rmsnorm_silu::kernels::problem::{RowOperands, RowsProblem};
use burn_rmsnorm_silu::kernels::select::select_knobs;
use burn_rmsnorm_silu::kernels::{Activation, NormParams};

use super::case::{binding, host_values, upload};
use super::*;

pub(crate) fn normed(timer: &Timer, csv: &mut String, index: usize, site: &Site) {
    let s = &site.shape;
    let sm = device_sm(&timer.client).unwrap_or(0);
    if sm != 90 || !s.c_in.is_multiple_of(32) {
        return;
    }
    let client = timer.client.clone();
    let [t, h, w] = s.input;
    let [ot, oh, ow] = s.output;
    let [kt, kh, kw] = s.kernel;
    let positions = s.batch * t * h * w;
    let x_dims = [s.batch, t, h, w, s.c_in];
    let x = upload(&client, &host_values(positions * s.c_in, 11, 3.0));
    let gamma = upload(&client, &host_values(s.c_in, 12, 1.0));
    let wt = upload(&client, &host_values(s.c_out * s.reduction(), 13, 0.05));
    let bias = upload(&client, &host_values(s.c_out, 14, 0.5));
    let y = client.empty(positions * s.c_in * 2);
    let inv_rms = client.empty(positions * 4);
    let out = client.empty(s.rows() * s.c_out * 2);
    let norm = NormParams::rms(1e-6);
    let problem = RowsProblem::dense(positions, s.c_in);
    let row_knobs = select_knobs(&client, problem, 2, 2, 16);
    let knobs = select_wgmma(Some(sm), s);
    let separate_norm = || {
        let operands = RowOperands {
            x: x.clone(),
            gamma: gamma.clone(),
            x_type: BF16,
            gamma_type: BF16,
        };
        launch_forward(
            &client,
            operands,
            y.clone(),
            problem,
            norm,
            Activation::Silu,
            &row_knobs,
        )
    };
    let conv = |input: &Handle, prologue: Option<NormPrologue>| {
        let operands = ConvOperands {
            input: binding(input, &x_dims),
            weight: binding(&wt, &[s.c_out, kt, kh, kw, s.c_in]),
            bias: Some(binding(&bias, &[s.c_out])),
            out: binding(&out, &[s.batch, ot, oh, ow, s.c_out]),
            accumulate: false,
        };
        launch_wgmma(&client, operands, prologue, None, BF16, s, &knobs)
    };
    let fused = || {
        launch_positions_inv_rms(
            &client,
            binding(&x, &x_dims),
            binding(&inv_rms, &[positions]),
            BF16,
            norm,
        )?;
        let prologue = NormPrologue {
            inv_rms: binding(&inv_rms, &[positions]),
            gamma: binding(&gamma, &[s.c_in]),
        };
        conv(&x, Some(prologue))
    };
    let first = separate_norm()
        .and_then(|()| conv(&y, None))
        .and_then(|()| fused());
    if let Err(e) = first {
        println!("#{index:<2} {:<26} normed   refused: {e}", site.what);
        let _ = writeln!(csv, "{index},{},normed,refused,,,,", site.what);
        return;
    }
    let time = |f: &dyn Fn()| median(&timer.time(2, 10, f));
    let norm_us = time(&|| separate_norm().expect("ran before"));
    let conv_us = time(&|| conv(&y, None).expect("ran before"));
    let fused_us = time(&|| fused().expect("ran before"));
    let saved = (norm_us + conv_us - fused_us) / norm_us;
    println!(
        "#{index:<2} {:<26} normed   {knobs}: norm {norm_us:.1} + conv {conv_us:.1} us, in the load \
         {fused_us:.1} us: saved {:.0}% of the norm's time",
        site.what,
        saved * 100.0
    );
    let _ = writeln!(
        csv,
        "{index},{},normed,{knobs},{fused_us:.2},,,norm {norm_us:.2} conv {conv_us:.2}",
        site.what
    );
    let _ = std::io::stdout().flush();
}
