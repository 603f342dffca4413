//! The convolution's output added to what the output buffer already holds: a residual
//! connection (`y = x + conv(h)`) in the implicit GEMM's store instead of a separate add, which
//! would write the convolution's output, read it back with the residual and write the sum.
//!
//! cubek's routines take their operands through a [`MatmulArgs`] type; [`AccumulateArgs`]
//! wraps a routine's own one and changes only the output view: each store reads the value at
//! its position and writes the sum (in f32, rounded once more to the element type, as an add
//! after a convolution that wrote its output rounds). The loaders (TMA, `cp.async`, plain) and
//! the tile matmul are the routine's own. Each output vector is read and written by the one
//! unit that stores it, and the routines do not split K, so the read-modify-write has no race.

use std::marker::PhantomData;

use cubecl::prelude::*;
use cubecl::server::LaunchError;
use cubecl::std::tensor::{
    View, ViewMut, ViewMutExpand, ViewOperationsExpand, ViewOperationsMutExpand,
};
use cubek::convolution::ConvAlgorithm;
use cubek::convolution::components::global::args::RuntimeArgs;
use cubek::convolution::components::{ConvSetupError, ConvolutionOperation, ConvolutionProblem};
use cubek::convolution::forward::args::ConcreteArgs;
use cubek::convolution::kernels::forward::launch_kernel;
use cubek::convolution::routines::Routine;
use cubek::matmul::definition::{AvailableVectorSizes, MatmulElems};
use cubek::matmul::multi_level::args::{BatchedCoords, MatmulArgs};
use cubek::matmul::multi_level::components::global::memory::GlobalLayoutConfig;
use cubek::matmul::multi_level::definition::BatchMatmulBlueprint;
use cubek::matmul::routine::BlueprintStrategy;
use cubek::std::InputBinding;

type Pos = <BatchedCoords as CubeType>::ExpandType;

/// `MatmulArgs` identical to `I` (same inputs, so the TMA / async loaders are untouched),
/// except that the output view adds what the output already holds.
#[derive(Clone)]
pub struct AccumulateArgs<I>(PhantomData<I>);

#[cube]
impl<I: MatmulArgs> MatmulArgs for AccumulateArgs<I> {
    type Input<Lhs: CubePrimitive, Rhs: CubePrimitive, EO: CubePrimitive> = I::Input<Lhs, Rhs, EO>;
    type Output<EO: CubePrimitive> = I::Output<EO>;
    type Config = I::Config;
    type State<Lhs: CubePrimitive, Rhs: CubePrimitive, EO: CubePrimitive> = I::State<Lhs, Rhs, EO>;

    fn init_state<Lhs: CubePrimitive, Rhs: CubePrimitive, EO: CubePrimitive>(
        input: &Self::Input<Lhs, Rhs, EO>,
        output: &mut Self::Output<EO>,
        config: Self::Config,
        #[comptime] lhs: GlobalLayoutConfig,
        #[comptime] rhs: GlobalLayoutConfig,
        #[comptime] out: GlobalLayoutConfig,
    ) -> Self::State<Lhs, Rhs, EO> {
        I::init_state::<Lhs, Rhs, EO>(input, output, config, lhs, rhs, out)
    }
    fn view_lhs<Lhs: CubePrimitive, Rhs: CubePrimitive, EO: CubePrimitive>(
        state: &Self::State<Lhs, Rhs, EO>,
    ) -> View<'_, Lhs, BatchedCoords> {
        I::view_lhs::<Lhs, Rhs, EO>(state)
    }
    fn batch_lhs<Lhs: CubePrimitive, Rhs: CubePrimitive, EO: CubePrimitive>(
        state: &Self::State<Lhs, Rhs, EO>,
        batch: usize,
    ) -> usize {
        I::batch_lhs::<Lhs, Rhs, EO>(state, batch)
    }
    fn view_rhs<Lhs: CubePrimitive, Rhs: CubePrimitive, EO: CubePrimitive>(
        state: &Self::State<Lhs, Rhs, EO>,
    ) -> View<'_, Rhs, BatchedCoords> {
        I::view_rhs::<Lhs, Rhs, EO>(state)
    }
    fn batch_rhs<Lhs: CubePrimitive, Rhs: CubePrimitive, EO: CubePrimitive>(
        state: &Self::State<Lhs, Rhs, EO>,
        batch: usize,
    ) -> usize {
        I::batch_rhs::<Lhs, Rhs, EO>(state, batch)
    }
    fn view_acc<Lhs: CubePrimitive, Rhs: CubePrimitive, EO: CubePrimitive>(
        state: &Self::State<Lhs, Rhs, EO>,
    ) -> ComptimeOption<View<'_, EO, BatchedCoords>> {
        I::view_acc::<Lhs, Rhs, EO>(state)
    }
    fn batch_acc<Lhs: CubePrimitive, Rhs: CubePrimitive, EO: CubePrimitive>(
        state: &Self::State<Lhs, Rhs, EO>,
        batch: usize,
    ) -> usize {
        I::batch_acc::<Lhs, Rhs, EO>(state, batch)
    }
    fn view_out<Lhs: CubePrimitive, Rhs: CubePrimitive, EO: CubePrimitive>(
        state: &Self::State<Lhs, Rhs, EO>,
    ) -> ViewMut<'_, EO, BatchedCoords> {
        let out = I::view_out::<Lhs, Rhs, EO>(state);
        intrinsic!(|scope| ViewMutExpand::new(scope, AccumulateExpand { out }))
    }
    fn batch_out<Lhs: CubePrimitive, Rhs: CubePrimitive, EO: CubePrimitive>(
        state: &Self::State<Lhs, Rhs, EO>,
        batch: usize,
    ) -> usize {
        I::batch_out::<Lhs, Rhs, EO>(state, batch)
    }
    fn runtime_config<Lhs: CubePrimitive, Rhs: CubePrimitive, EO: CubePrimitive>(
        state: &Self::State<Lhs, Rhs, EO>,
    ) -> Self::Config {
        I::runtime_config::<Lhs, Rhs, EO>(state)
    }
}

/// `a + b` in f32, back to `E` (a bf16 vector here).
#[cube]
fn add_f32<E: CubePrimitive>(a: E, b: E) -> E {
    let sum = Vector::<f32, E::Size>::cast_from(a) + Vector::<f32, E::Size>::cast_from(b);
    E::cast_from(sum)
}

/// Expand-only view storage: reads delegate to the output view, writes add the old value.
#[derive(Clone)]
pub struct AccumulateExpand<'a, E: CubePrimitive> {
    out: ViewMutExpand<'a, E, BatchedCoords>,
}

impl<E: CubePrimitive> VectorizedExpand for AccumulateExpand<'_, E> {
    fn __expand_vector_size_method(&self, scope: &Scope) -> VectorSize {
        VectorizedExpand::__expand_vector_size_method(&self.out, scope)
    }
}

impl<E: CubePrimitive> ViewOperationsExpand<E, BatchedCoords> for AccumulateExpand<'_, E> {
    fn __expand_read_method(&self, scope: &Scope, pos: Pos) -> NativeExpand<E> {
        ViewOperationsExpand::<E, BatchedCoords>::__expand_read_method(&self.out, scope, pos)
    }
    fn __expand_read_checked_method(&self, scope: &Scope, pos: Pos) -> NativeExpand<E> {
        ViewOperationsExpand::<E, BatchedCoords>::__expand_read_checked_method(
            &self.out, scope, pos,
        )
    }
    fn __expand_read_masked_method(
        &self,
        scope: &Scope,
        pos: Pos,
        v: NativeExpand<E>,
    ) -> NativeExpand<E> {
        ViewOperationsExpand::<E, BatchedCoords>::__expand_read_masked_method(
            &self.out, scope, pos, v,
        )
    }
    fn __expand_read_unchecked_method(&self, scope: &Scope, pos: Pos) -> NativeExpand<E> {
        ViewOperationsExpand::<E, BatchedCoords>::__expand_read_unchecked_method(
            &self.out, scope, pos,
        )
    }
    fn __expand_as_linear_slice_method(
        &self,
        scope: &Scope,
        pos: Pos,
        end: Pos,
    ) -> &SliceExpand<E> {
        ViewOperationsExpand::<E, BatchedCoords>::__expand_as_linear_slice_method(
            &self.out, scope, pos, end,
        )
    }
    fn __expand_tensor_map_load_method(
        &self,
        _: &Scope,
        _: &NativeExpand<cubecl::prelude::barrier::Barrier>,
        _: &mut SliceExpand<E>,
        _: Pos,
    ) {
        unimplemented!("the conv output is never a TMA source")
    }
    fn __expand_shape_method(&self, scope: &Scope) -> Pos {
        ViewOperationsExpand::<E, BatchedCoords>::__expand_shape_method(&self.out, scope)
    }
    fn __expand_is_in_bounds_method(&self, scope: &Scope, pos: Pos) -> NativeExpand<bool> {
        ViewOperationsExpand::<E, BatchedCoords>::__expand_is_in_bounds_method(
            &self.out, scope, pos,
        )
    }
}

impl<E: CubePrimitive> ViewOperationsMutExpand<E, BatchedCoords> for AccumulateExpand<'_, E> {
    fn __expand_write_method(&self, scope: &Scope, pos: Pos, value: NativeExpand<E>) {
        let old =
            ViewOperationsExpand::<E, BatchedCoords>::__expand_read_method(&self.out, scope, pos);
        let sum = add_f32::expand::<E>(scope, value, old);
        ViewOperationsMutExpand::__expand_write_method(&self.out, scope, pos, sum);
    }
    fn __expand_write_checked_method(&self, scope: &Scope, pos: Pos, value: NativeExpand<E>) {
        // One bound check guards both the read of the residual and the write.
        let in_bounds = ViewOperationsExpand::<E, BatchedCoords>::__expand_is_in_bounds_method(
            &self.out, scope, pos,
        );
        if_expand(scope, in_bounds, |scope| {
            ViewOperationsMutExpand::<E, BatchedCoords>::__expand_write_method(
                self, scope, pos, value,
            )
        });
    }
    fn __expand_as_linear_slice_mut_method(
        &self,
        _: &Scope,
        _: Pos,
        _: Pos,
    ) -> &mut SliceExpand<E> {
        unimplemented!("the plane/unit writers only call write_checked")
    }
    fn __expand_tensor_map_store_method(&self, _: &Scope, _: &SliceExpand<E>, _: Pos) {
        unimplemented!("the conv routines store through write_checked, not TMA")
    }
}

impl<A, I> ConcreteArgs<A> for AccumulateArgs<I>
where
    A: cubek::matmul::multi_level::BatchMatmulRoutine<RuntimeArgs>,
    I: ConcreteArgs<A>,
{
    fn adjust_problem(
        client: &Client,
        problem: ConvolutionProblem,
        blueprint: &A::Blueprint,
        dtypes: &MatmulElems,
    ) -> ConvolutionProblem {
        I::adjust_problem(client, problem, blueprint, dtypes)
    }
}

/// A cubek conv routine `R` (loaders, stages, tile matmul unchanged) with an accumulating output.
pub struct Accumulate<R>(PhantomData<R>);

impl<R: Routine> Routine for Accumulate<R> {
    type Blueprint = R::Blueprint;
    type Strategy = R::Strategy;
    type MatmulRoutine = R::MatmulRoutine;
    type Args = AccumulateArgs<R::Args>;
    const IS_SPECIALIZED: bool = R::IS_SPECIALIZED;

    fn correct_layout(
        client: &Client,
        handle: TensorBinding,
        dtype: ElemType,
        op: ConvolutionOperation,
    ) -> Result<TensorBinding, LaunchError> {
        R::correct_layout(client, handle, dtype, op)
    }
    fn filter_vector_sizes(v: AvailableVectorSizes) -> AvailableVectorSizes {
        R::filter_vector_sizes(v)
    }
}

/// The operands of one accumulating launch (cubek's, after the problem is built).
pub(super) struct AccumulateLaunch {
    pub input: InputBinding,
    pub weight: InputBinding,
    pub bias: Option<InputBinding>,
    /// Holds the residual on entry, the sum on return.
    pub out: TensorBinding,
    pub problem: ConvolutionProblem,
    pub blueprint: BatchMatmulBlueprint,
    pub dtypes: MatmulElems,
}

/// `out = conv(input, weight) + bias + out` with cubek's routine `R` and a forced blueprint.
fn launch_with<R>(client: &Client, l: AccumulateLaunch) -> Result<(), ConvSetupError>
where
    R: Routine<Blueprint = BatchMatmulBlueprint>,
    R::Args: ConcreteArgs<R::MatmulRoutine>,
{
    launch_kernel::<Accumulate<R>>(
        client,
        l.input,
        l.weight,
        l.bias,
        l.out,
        l.problem,
        &BlueprintStrategy::Forced(l.blueprint),
        l.dtypes,
    )
}

/// [`launch_with`] for the routine `algorithm` names.
pub(super) fn launch_accumulating(
    algorithm: ConvAlgorithm,
    client: &Client,
    launch: AccumulateLaunch,
) -> Result<(), ConvSetupError> {
    use ConvAlgorithm as A;
    use cubek::convolution::routines::{simple::*, specialized::*};
    match algorithm {
        A::SimpleSyncCyclic => launch_with::<SimpleSyncCyclicConv>(client, launch),
        A::SimpleSyncStrided => launch_with::<SimpleSyncStridedConv>(client, launch),
        A::SimpleSyncTilewise => launch_with::<SimpleSyncTilewiseConv>(client, launch),
        A::SimpleAsyncCyclic => launch_with::<SimpleAsyncCyclicConv>(client, launch),
        A::SimpleAsyncStrided => launch_with::<SimpleAsyncStridedConv>(client, launch),
        A::SimpleAsyncTma => launch_with::<SimpleAsyncTmaConv>(client, launch),
        A::SpecializedAsyncCyclic => launch_with::<SpecializedAsyncCyclicConv>(client, launch),
        A::SpecializedAsyncStrided => launch_with::<SpecializedAsyncStridedConv>(client, launch),
        A::SpecializedTma => launch_with::<SpecializedTmaConv>(client, launch),
    }
}
