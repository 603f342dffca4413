//! The binary's timed decode: per latent frame, the tail, the assembly, and the memory pools' peak.

use crate::*;
use wan_vae::MemoryPeak;

/// Decodes `z` with a device sync after every latent frame: the video and each latent frame's
/// wall time. With `show_progress`, a progress bar on stderr (drawn only on a terminal).
pub(crate) fn timed_decode(
    decoder: &WanDecoder,
    z: Tensor<5>,
    ctx: &Ctx,
    show_progress: bool,
    probe: bool,
) -> (Tensor<5>, DecodeTimes) {
    let latent_frames = z.dims()[2];
    let bar = if show_progress {
        ProgressBar::new(latent_frames as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("[{bar:30}] latent frame {pos}/{len}  {elapsed_precise}")
            .expect("progress template")
            .progress_chars("#> "),
    );
    let mut frame_start = Instant::now();
    let mut per_frame = Vec::new();
    let mut chunks = Vec::with_capacity(latent_frames);
    let mut memory = MemoryPeak::default();
    decoder
        .decode_frames(z, ctx, |_, out| {
            let device = out.device();
            device.sync().expect("sync");
            per_frame.push(frame_start.elapsed());
            memory = memory.sample(&device);
            frame_start = Instant::now();
            bar.inc(1);
            chunks.push(out);
        })
        .unwrap_or_else(|e| fail(&e.to_string()));
    let device = chunks[0].device();
    device.sync().expect("sync");
    let after_frames = frame_start.elapsed();
    if probe {
        for round in 0..2 {
            let start = Instant::now();
            let v = decoder.assemble(chunks.clone());
            v.device().sync().expect("sync");
            let cat = start.elapsed();
            let start = Instant::now();
            let [b, _, h, w, c] = chunks[0].dims();
            let f: usize = chunks.iter().map(|c| c.dims()[1]).sum();
            let mut v = Tensor::<5>::zeros([b, f, h, w, c], (&device, chunks[0].dtype()));
            let mut at = 0;
            for chunk in chunks.clone() {
                let n = chunk.dims()[1];
                v = v.slice_assign(burn::tensor::s![.., at..at + n], chunk);
                at += n;
            }
            v.device().sync().expect("sync");
            println!(
                "probe {round}: cat {:.2} ms, zeros + slice_assign {:.2} ms",
                cat.as_secs_f64() * 1e3,
                start.elapsed().as_secs_f64() * 1e3
            );
        }
    }
    // The decode ends when the assembled video is on the device.
    let start = Instant::now();
    let video = decoder.assemble(chunks);
    video.device().sync().expect("sync");
    let assembly = start.elapsed();
    memory = memory.sample(&video.device());
    bar.finish_and_clear();
    let times = DecodeTimes {
        per_frame,
        after_frames,
        assembly,
        memory,
    };
    (video, times)
}

/// Wall times of one decode with a device sync after every latent frame.
pub(crate) struct DecodeTimes {
    /// Each latent frame, from the previous sync to its own.
    pub(crate) per_frame: Vec<Duration>,
    /// From the last frame's sync until the device is idle again.
    pub(crate) after_frames: Duration,
    /// The video's assembly from the chunks, synchronised.
    pub(crate) assembly: Duration,
    /// Sampled after each latent frame and after the assembly.
    pub(crate) memory: MemoryPeak,
}
