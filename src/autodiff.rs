//! Autodiff: the forward runs the inner backend's op (the fused kernel on CubeCL backends) and
//! registers a backward node whose gradients come from the inner backend's
//! [`RmsNormSiluBackend::rms_norm_silu_backward`] (the fused backward kernels on CubeCL
//! backends over the last axis, composed ops otherwise).

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::backend::{
    AutodiffBackend, Backend, TensorMetadata,
    tensor::{FloatTensor, IntTensor, QuantizedTensor},
};

use crate::backend::RmsNormSiluBackend;
use rmsnorm_silu_kernels::nvfp4::{Fp4Recipe, ScaleLayout};
use rmsnorm_silu_kernels::{Activation, NormParams};

#[derive(Debug)]
struct RmsNormSiluBackward;

/// What the backward needs: the inputs (inner-backend primitives), the axis and the scalars.
#[derive(Clone, Debug)]
struct SavedInputs<B: Backend> {
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    dim: usize,
    norm: NormParams,
    activation: Activation,
}

impl<B: Backend + RmsNormSiluBackend> Backward<B, 2> for RmsNormSiluBackward {
    type State = SavedInputs<B>;

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let SavedInputs {
            x,
            gamma,
            dim,
            norm,
            activation,
        } = ops.state;
        let dy = grads.consume::<B>(&ops.node);
        let (dx, dgamma) = B::rms_norm_silu_backward(x, gamma, dy, dim, norm, activation);
        let [x_parent, gamma_parent] = ops.parents;
        if let Some(node) = x_parent {
            grads.register::<B>(node.id, dx);
        }
        if let Some(node) = gamma_parent {
            grads.register::<B>(node.id, dgamma);
        }
    }
}

impl<B: Backend + RmsNormSiluBackend, C: CheckpointStrategy> RmsNormSiluBackend for Autodiff<B, C> {
    fn rms_norm_silu(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        norm: NormParams,
        activation: Activation,
    ) -> FloatTensor<Self> {
        let last = x.shape().num_dims() - 1;
        Self::rms_norm_silu_dim(x, gamma, last, norm, activation)
    }

    /// Quantised outputs are not differentiable: the inner backend's op on the inner tensors.
    fn rms_norm_silu_fp8(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        norm: NormParams,
        activation: Activation,
        scale: f32,
    ) -> QuantizedTensor<Self> {
        let (x, _) = x.into_parts();
        let (gamma, _) = gamma.into_parts();
        B::rms_norm_silu_fp8(x, gamma, norm, activation, scale)
    }

    fn rms_norm_silu_fp8_amax(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        norm: NormParams,
        activation: Activation,
        scale: f32,
    ) -> (QuantizedTensor<Self>, FloatTensor<Self>) {
        let (x, _) = x.into_parts();
        let (gamma, _) = gamma.into_parts();
        let (q, amax) = B::rms_norm_silu_fp8_amax(x, gamma, norm, activation, scale);
        (q, <Self as AutodiffBackend>::from_inner(amax))
    }

    fn rms_norm_silu_fp8_device_scale(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        scale: FloatTensor<Self>,
        norm: NormParams,
        activation: Activation,
    ) -> (QuantizedTensor<Self>, FloatTensor<Self>) {
        let (x, _) = x.into_parts();
        let (gamma, _) = gamma.into_parts();
        let (scale, _) = scale.into_parts();
        let (q, amax) = B::rms_norm_silu_fp8_device_scale(x, gamma, scale, norm, activation);
        (q, <Self as AutodiffBackend>::from_inner(amax))
    }

    fn rms_norm_silu_nvfp4(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        norm: NormParams,
        activation: Activation,
        recipe: Fp4Recipe,
        s_enc: f32,
    ) -> QuantizedTensor<Self> {
        let (x, _) = x.into_parts();
        let (gamma, _) = gamma.into_parts();
        B::rms_norm_silu_nvfp4(x, gamma, norm, activation, recipe, s_enc)
    }

    fn rms_norm_silu_nvfp4_device_amax(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        amax: FloatTensor<Self>,
        norm: NormParams,
        activation: Activation,
    ) -> QuantizedTensor<Self> {
        let (x, _) = x.into_parts();
        let (gamma, _) = gamma.into_parts();
        let (amax, _) = amax.into_parts();
        B::rms_norm_silu_nvfp4_device_amax(x, gamma, amax, norm, activation)
    }

    fn rms_norm_silu_nvfp4_parts(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        norm: NormParams,
        activation: Activation,
        recipe: Fp4Recipe,
        s_enc: f32,
        layout: ScaleLayout,
    ) -> (IntTensor<Self>, IntTensor<Self>) {
        let (x, _) = x.into_parts();
        let (gamma, _) = gamma.into_parts();
        B::rms_norm_silu_nvfp4_parts(x, gamma, norm, activation, recipe, s_enc, layout)
    }

    fn rms_norm_silu_dim(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        dim: usize,
        norm: NormParams,
        activation: Activation,
    ) -> FloatTensor<Self> {
        let (x, x_node) = x.into_parts();
        let (gamma, gamma_node) = gamma.into_parts();
        let run = |x, gamma| B::rms_norm_silu_dim(x, gamma, dim, norm, activation);
        match RmsNormSiluBackward
            .prepare::<C>([x_node, gamma_node])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let saved = SavedInputs {
                    x: x.clone(),
                    gamma: gamma.clone(),
                    dim,
                    norm,
                    activation,
                };
                prep.finish(saved, run(x, gamma))
            }
            OpsKind::UnTracked(prep) => prep.finish(run(x, gamma)),
        }
    }
}
