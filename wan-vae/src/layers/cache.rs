//! The frame cache of the causal decode: each cached convolution's last input frames, and the norm that writes behind them in the next convolution's input.

use super::*;

/// One decode call's frame caches, one slot per cached convolution in call order (the order
/// of diffusers' `feat_cache`, so the two can be compared slot by slot).
#[derive(Default)]
pub struct FrameCache {
    slots: Vec<Slot>,
    next: usize,
}

#[derive(Clone, Default)]
pub(crate) enum Slot {
    /// Not called yet.
    #[default]
    Empty,
    /// An upsampler's time convolution was skipped on the first chunk.
    SkippedFirst,
    /// The last (up to two) input frames of the previous call.
    Frames(Box<Tensor<5>>),
}

impl FrameCache {
    /// Starts a new chunk: slots are visited again from the first.
    pub fn rewind(&mut self) {
        self.next = 0;
    }

    fn take(&mut self) -> (usize, Slot) {
        let i = self.next;
        self.next += 1;
        if self.slots.len() <= i {
            self.slots.resize(i + 1, Slot::Empty);
        }
        (i, self.slots[i].clone())
    }

    /// The frames to keep for the next call: the last two of `x`, topped up with the last
    /// frame of the previous cache (or zeros) when `x` has only one. Always a tensor of its own
    /// (a view would keep all of `x`'s memory alive until the next chunk).
    fn keep(x: &Tensor<5>, previous: Option<&Tensor<5>>, zeros_if_short: bool) -> Tensor<5> {
        let t = x.dims()[1];
        let last = x.clone().slice(s![.., t.saturating_sub(2)..t]);
        if t >= 2 || (previous.is_none() && !zeros_if_short) {
            let device = last.device();
            let dims = last.dims();
            return Tensor::empty(dims, (&device, last.dtype())).slice_assign(
                s![0..dims[0], 0..dims[1], 0..dims[2], 0..dims[3], 0..dims[4]],
                last,
            );
        }
        match previous {
            Some(p) => {
                let pt = p.dims()[1];
                Tensor::cat(vec![p.clone().slice(s![.., pt - 1..pt]), last], 1)
            }
            None if zeros_if_short => Tensor::cat(vec![last.clone().zeros_like(), last], 1),
            None => last,
        }
    }

    /// A norm site followed by a cached causal convolution (plus `residual`, the output's
    /// shape, where given). With cached frames, the norm writes its output behind a copy of
    /// them in the convolution's input buffer (only the cached frames are copied, not the
    /// chunk); the buffer's last two frames are kept.
    pub fn norm_conv(
        &mut self,
        norm: &Norm,
        conv: &CausalConv3d,
        x: Tensor<5>,
        residual: Option<Tensor<5>>,
        ctx: &Ctx,
    ) -> Tensor<5> {
        if conv.fp8_input {
            // E4M3 codes (dequantised), then the plain cached convolution (joined by a copy).
            let y = norm.forward_fp8(x, ctx);
            return self.conv_add(conv, y, residual, ctx);
        }
        let (i, slot) = self.take();
        let previous = match slot {
            Slot::Frames(f) if conv.context > 0 => Some(*f),
            _ => None,
        };
        let (input, front) = match previous {
            Some(previous) => {
                let [b, t, h, w, c] = x.dims();
                let pt = previous.dims()[1];
                let have = pt.min(conv.context);
                let device = x.device();
                let buffer = ctx.timed(&ctx.join_time, &device, || {
                    Tensor::empty([b, have + t, h, w, c], (&device, x.dtype()))
                        .slice_assign(s![.., 0..have], previous.slice(s![.., pt - have..pt]))
                });
                (norm.forward_into(x, buffer, have, ctx), conv.context - have)
            }
            None => (norm.forward(x, ctx), conv.context),
        };
        self.slots[i] = Slot::Frames(Box::new(Self::keep(&input, None, false)));
        conv.forward_padded(input, front, residual, ctx)
    }

    /// A cached causal convolution: uses and then replaces this slot's frames.
    pub fn conv(&mut self, conv: &CausalConv3d, x: Tensor<5>, ctx: &Ctx) -> Tensor<5> {
        self.conv_add(conv, x, None, ctx)
    }

    /// [`Self::conv`] plus `residual` where given.
    fn conv_add(
        &mut self,
        conv: &CausalConv3d,
        x: Tensor<5>,
        residual: Option<Tensor<5>>,
        ctx: &Ctx,
    ) -> Tensor<5> {
        let (i, slot) = self.take();
        let previous = match slot {
            Slot::Frames(f) => Some(*f),
            _ => None,
        };
        let keep = Self::keep(&x, previous.as_ref(), false);
        let y = conv.forward_add(x, previous, residual, ctx);
        self.slots[i] = Slot::Frames(Box::new(keep));
        y
    }

    /// The upsampler's time convolution: skipped on the first chunk (returns `None`), then run
    /// with zeros and later with the cached frames.
    pub fn time_conv(&mut self, conv: &PhasedConv, x: Tensor<5>, ctx: &Ctx) -> Option<Tensor<5>> {
        let (i, slot) = self.take();
        match slot {
            Slot::Empty => {
                self.slots[i] = Slot::SkippedFirst;
                None
            }
            Slot::SkippedFirst => {
                let keep = Self::keep(&x, None, true);
                let y = conv.forward(x, None, ctx);
                self.slots[i] = Slot::Frames(Box::new(keep));
                Some(y)
            }
            Slot::Frames(previous) => {
                let keep = Self::keep(&x, Some(&previous), false);
                let y = conv.forward(x, Some(*previous), ctx);
                self.slots[i] = Slot::Frames(Box::new(keep));
                Some(y)
            }
        }
    }
}
