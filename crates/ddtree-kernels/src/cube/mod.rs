//! CubeCL kernels and the [`KernelOps`] overrides for burn's CubeCL backends
//! (`CubeBackend` over CUDA, or over wgpu for tests on a software Vulkan device).
//!
//! Every kernel is generic over the float type (bf16 on the GPU, f32/f16 in tests) and
//! accumulates in f32. Each file holds one kernel family next to a pointer to its plain-burn
//! reference in [`crate::reference`]; `tests/cube_kernels.rs` compares the two.
//!
//! Kernels read the plane (warp) size from the device (32 on NVIDIA, 8 on lavapipe) and pick the
//! widest vector load the device, the row length and the buffer offsets allow.

pub mod activation;
pub mod argmax;
pub mod attention;
pub mod attention_mma;
pub mod attention_rows;
pub mod cache;
pub mod delta;
pub mod fence;
pub mod gdn;
pub mod linear;
pub mod norm;
mod reduce;
pub mod rope;
pub mod top_k;
pub mod upload;
pub mod wgmma;

use burn_cubecl::CubeElement;
use burn_cubecl::element::{BoolElement, FloatElement, IntElement};
use burn_cubecl::kernel::{into_contiguous, into_contiguous_aligned};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{CubeBackend, CubeRuntime};
use burn_tensor::{DType, Int, Shape, Tensor, TensorData, TensorPrimitive};
use cubecl::prelude::*;
use cubecl::server::CopyDescriptor;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::nn::{HeadShape, QkvRows};
use crate::{AttentionContext, GdnConv, GdnHeads, KernelOps, LayerCaches, Visibility};

/// The GPU backend the project runs on NVIDIA devices: burn's CubeCL CUDA backend in bf16 (f32
/// accumulation inside the kernels), without burn's fusion layer so our kernels see plain
/// buffers.
#[cfg(feature = "cuda")]
pub type Cuda = CubeBackend<cubecl::cuda::CudaRuntime, half::bf16, i32, u8>;

/// The CUDA device (GPU ordinal).
#[cfg(feature = "cuda")]
pub use cubecl::cuda::CudaDevice;

/// burn's CubeCL backend on cubecl's wgpu runtime in f32, with our kernels: what the tests run
/// on Vulkan (in CI, Mesa's software device lavapipe).
#[cfg(feature = "wgpu")]
pub type Wgpu = CubeBackend<cubecl::wgpu::WgpuRuntime, f32, i32, u32>;

/// The fewest planes per cube of the GEMV.
const GEMV_PLANES: usize = 4;
/// Planes per attention cube (each takes one query of the cube at a time).
const ATTENTION_PLANES: u32 = 8;
/// Planes per cube of the split-combining attention kernel (a query each).
const COMBINE_PLANES: u32 = 4;
/// The largest `k` the top-K kernel is tested for (DDTree budgets stay below it).
const TOP_K_MAX: usize = 256;
/// Units per cube of the norms (one cube per row: a 4096-wide row is one 16-byte vector each, so
/// every load of a unit — the residual, the delta or all of its k-slice partial sums — is in
/// flight at once).
const NORM_UNITS: u32 = 512;
/// Units per cube of the argmax (one cube per row of up to ~152k logits).
const ARGMAX_UNITS: u32 = 1024;
/// Units per cube for element-wise kernels.
const ELEMENTWISE_CUBE: u32 = 256;
/// The most layers one [`cache::compact_rows`] launch compacts (a kernel variant per count;
/// Qwen3-8B has 36 attention layers, Qwen3.6-27B 16).
const MAX_COMPACT_LAYERS: usize = 64;

/// Whether linear layers of more than [`linear::MAX_ROWS`] rows use [`linear_tiled`].
static TENSOR_CORES: AtomicBool = AtomicBool::new(true);

/// Whether the tensor-core linears run on warpgroup MMAs ([`wgmma::linear_wgmma()`]) where the
/// device has them (sm_90), instead of [`linear::linear_mma()`].
static WARPGROUP_MMA: AtomicBool = AtomicBool::new(true);

/// Turns the warpgroup-MMA linear on or off (benchmarks compare the two tensor-core kernels);
/// on by default.
pub fn set_warpgroup_mma(enabled: bool) {
    WARPGROUP_MMA.store(enabled, Ordering::Relaxed);
}

/// Turns the tensor-core linear for tree-verify and drafter rows on (the default) or off (burn's
/// matmul instead), for the whole process: benchmarks compare the two in one run.
pub fn set_tensor_cores(enabled: bool) {
    TENSOR_CORES.store(enabled, Ordering::Relaxed);
}

/// Whether an AR step's attention launch normalises and rotates its own queries and new key
/// ([`attention_mma::attention_mma()`]'s `project`).
static ROTATE_IN_ATTENTION: AtomicBool = AtomicBool::new(true);

/// Turns the q/k norm + RoPE + cache write of an AR step inside its attention launch on (the
/// default) or off (a launch of its own, as for more rows), for the whole process: benchmarks
/// compare the two in one run.
pub fn set_rotate_in_attention(enabled: bool) {
    ROTATE_IN_ATTENTION.store(enabled, Ordering::Relaxed);
}

/// Whether an AR step's attention merges its key splits in the cube that finishes each KV head
/// last ([`attention_mma::attention_mma()`]'s `fold`) instead of a launch of its own.
static FOLD_COMBINE: AtomicBool = AtomicBool::new(true);

/// Turns the split merge of an AR step's attention inside the attention launch on (the default,
/// on CUDA) or off ([`attention::attention_combine()`], as for more rows), for the whole
/// process: benchmarks and the self-test compare the two in one run.
pub fn set_fold_combine(enabled: bool) {
    FOLD_COMBINE.store(enabled, Ordering::Relaxed);
}

/// Whether [`attention_mma::attention_mma()`]'s softmax takes the GPU's `ex2` approximation of
/// its exponentials ([`attention_mma::fast_exp()`]) instead of the accurate `expf`: −3 % of an
/// AR step's attention on an H100; the attention self-test passes with it, and both fixture
/// pairs' lossless eval differs from AR only at ties, as with `expf` (docs/perf-notes.md,
/// twenty-ninth and thirty-first sessions).
static FAST_EXP: AtomicBool = AtomicBool::new(true);

/// Turns the tensor-core attention's approximate exponentials on (the default) or off, for the
/// whole process: benchmarks and the self-test compare the two in one run.
pub fn set_fast_exp(enabled: bool) {
    FAST_EXP.store(enabled, Ordering::Relaxed);
}

/// Whether blocks of rows (tree verify, drafter blocks) take the CUDA C++ attention
/// ([`attention_rows::attention_rows()`]) where it applies, instead of
/// [`attention_mma::attention_mma()`].
static ATTENTION_ROWS: AtomicBool = AtomicBool::new(true);

/// Turns the CUDA C++ block-row attention on (the default) or off, for the whole process:
/// benchmarks and the self-test compare it with [`attention_mma::attention_mma()`] in one run.
pub fn set_attention_rows(enabled: bool) {
    ATTENTION_ROWS.store(enabled, Ordering::Relaxed);
}

/// Counter slots for [`fence::last_cube()`]: a buffer of zeros kept by [`upload::upload_words`]
/// (per runtime, device and thread, whose launches run in order), which the kernels leave at zero.
const FOLD_COUNTERS: usize = 64;

/// Whether kernels on `client` may fence across cubes ([`fence::device_fence()`]: CUDA only).
fn fences<R: CubeRuntime>(client: &ComputeClient<R>) -> bool {
    R::name(client) == "cuda"
}

impl<R, F, I, BT> KernelOps for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn linear(x: Tensor<Self, 2>, weight: Tensor<Self, 2>) -> Tensor<Self, 2> {
        let [rows, k] = x.dims();
        let k_w = weight.dims()[1];
        assert_eq!(k, k_w, "linear: x has {k} features, the weight expects {k_w}");
        if rows == 0 {
            return crate::reference::linear(x, weight);
        }
        if rows > linear::MAX_ROWS {
            // Tree-verify and drafter rows: tensor cores where the device has them, else burn's
            // matmul (lavapipe, or more rows than the tiled kernel takes).
            if !TENSOR_CORES.load(Ordering::Relaxed) {
                return crate::reference::linear(x, weight);
            }
            return linear_tiled(x, weight).unwrap_or_else(|(x, w)| crate::reference::linear(x, w));
        }
        rows_linear(x, weight, false)
    }

    fn gate_up_silu(x: Tensor<Self, 2>, gate_up: Tensor<Self, 2>) -> Tensor<Self, 2> {
        let rows = x.dims()[0];
        let n_out = gate_up.dims()[0];
        if rows == 0 || !n_out.is_multiple_of(2) {
            return crate::gate_up_silu_unfused(x, gate_up);
        }
        if rows <= linear::MAX_ROWS {
            return rows_linear(x, gate_up, true);
        }
        if !TENSOR_CORES.load(Ordering::Relaxed) {
            return crate::gate_up_silu_unfused(x, gate_up);
        }
        let (x, gate_up) = match linear_wgmma(x, gate_up, true) {
            Ok(y) => return y,
            Err(inputs) => inputs,
        };
        let shape = gate_up_mma_shape(&x, &gate_up);
        let tiled = match shape {
            Some(shape) => gate_up_silu_tiled_with(x, gate_up, shape),
            None => Err((x, gate_up)),
        };
        tiled.unwrap_or_else(|(x, w)| crate::gate_up_silu_unfused(x, w))
    }

    fn rms_norm(x: Tensor<Self, 2>, weight: Tensor<Self, 1>, eps: f64) -> Tensor<Self, 2> {
        let [rows, hidden] = x.dims();
        let (x, w) = (cube(x), cube(weight));
        let y = contiguous::<R, F, _>(&x, [rows, hidden]);
        let width = vector_width(&[&x, &w, &y], hidden);
        let (count, dim, planes) = cube_per_row(&x.client, rows, NORM_UNITS);
        // SAFETY: contiguous buffers of `rows · hidden` and `hidden` elements.
        unsafe {
            norm::rms_norm_rows::launch_unchecked::<F, R>(
                &x.client,
                count,
                dim,
                width,
                array(&x),
                array(&w),
                array(&y),
                hidden / width,
                1.0 / hidden as f32,
                eps as f32,
                planes,
            );
        }
        float(y)
    }

    fn add_rms_norm(
        x: Tensor<Self, 2>,
        delta: Tensor<Self, 2>,
        weight: Tensor<Self, 1>,
        eps: f64,
    ) -> (Tensor<Self, 2>, Tensor<Self, 2>) {
        assert_eq!(
            delta.dims(),
            x.dims(),
            "add_rms_norm: x and delta differ in shape"
        );
        add_norm(x, Product::Rows(cube(delta)), weight, eps)
    }

    fn linear_add_rms_norm(
        x: Tensor<Self, 2>,
        weight: Tensor<Self, 2>,
        residual: Tensor<Self, 2>,
        norm_weight: Tensor<Self, 1>,
        eps: f64,
    ) -> (Tensor<Self, 2>, Tensor<Self, 2>) {
        let rows = x.dims()[0];
        if rows <= linear::MAX_ROWS || !TENSOR_CORES.load(Ordering::Relaxed) {
            return crate::linear_add_rms_norm_unfused(x, weight, residual, norm_weight, eps);
        }
        // A k-sliced product reaches the norm as its partial sums (no split-sum launch).
        add_norm(residual, tiled_product(x, weight), norm_weight, eps)
    }

    fn silu_mul(gate: Tensor<Self, 2>, up: Tensor<Self, 2>) -> Tensor<Self, 2> {
        gated_rows(gate, up, false)
    }

    fn sigmoid_mul(x: Tensor<Self, 2>, gate: Tensor<Self, 2>) -> Tensor<Self, 2> {
        gated_rows(gate, x, true)
    }

    fn rope(x: Tensor<Self, 3>, cos: Tensor<Self, 2>, sin: Tensor<Self, 2>) -> Tensor<Self, 3> {
        let [rows, heads, head_dim] = x.dims();
        let half = cos.dims()[1];
        let (x, cos, sin) = (cube(x), cube(cos), cube(sin));
        let y = contiguous::<R, F, _>(&x, [rows, heads, head_dim]);
        let len = rows * heads * head_dim;
        let (count, dim) = elementwise_grid(len);
        // SAFETY: dense `[rows, heads, head_dim]` and `[rows, half]` buffers.
        unsafe {
            rope::rope_rows::launch_unchecked::<F, R>(
                &x.client,
                count,
                dim,
                array(&x),
                array(&cos),
                array(&sin),
                array(&y),
                len,
                heads,
                head_dim,
                half,
            );
        }
        float(y)
    }

    fn qk_norm_rope_write(
        qkv: Tensor<Self, 2>,
        rows: QkvRows<Self>,
        keys: Tensor<Self, 3>,
        values: Tensor<Self, 3>,
        at: usize,
    ) -> (Tensor<Self, 3>, Tensor<Self, 3>, Tensor<Self, 3>) {
        let [n, width] = qkv.dims();
        qk_rope(Product::Rows(cube(qkv)), [n, width], rows, keys, values, at)
    }

    fn linear_qk_norm_rope_write(
        x: Tensor<Self, 2>,
        weight: Tensor<Self, 2>,
        rows: QkvRows<Self>,
        keys: Tensor<Self, 3>,
        values: Tensor<Self, 3>,
        at: usize,
    ) -> (Tensor<Self, 3>, Tensor<Self, 3>, Tensor<Self, 3>) {
        let n = x.dims()[0];
        let width = weight.dims()[0];
        if n <= linear::MAX_ROWS || !TENSOR_CORES.load(Ordering::Relaxed) {
            let qkv = <Self as KernelOps>::linear(x, weight);
            return Self::qk_norm_rope_write(qkv, rows, keys, values, at);
        }
        // A k-sliced projection reaches the rotation as its partial sums (no split-sum launch).
        qk_rope(tiled_product(x, weight), [n, width], rows, keys, values, at)
    }

    fn linear_qk_norm_rope_attention(
        x: Tensor<Self, 2>,
        weight: Tensor<Self, 2>,
        rows: QkvRows<Self>,
        keys: Tensor<Self, 3>,
        values: Tensor<Self, 3>,
        ctx: &AttentionContext<'_>,
        scale: f64,
    ) -> (Tensor<Self, 3>, Tensor<Self, 3>, Tensor<Self, 3>) {
        let HeadShape {
            heads,
            kv_heads,
            head_dim,
        } = rows.shape;
        let (keys, values) = (keys.into_primitive().tensor(), values.into_primitive().tensor());
        // One row without context rows (an AR step) on `attention_mma` with split keys, the
        // caches ours alone and laid out alike (written in place); otherwise the two ops.
        let fits = x.dims()[0] == 1
            && rows.context_rows == 0
            && ROTATE_IN_ATTENTION.load(Ordering::Relaxed)
            && caches_in_place(&keys, &values)
            && AttentionPlan::new::<R, F>(None, &keys, &values, 1, heads / kv_heads, head_dim).split_keys;
        if !fits {
            let (keys, values) = (float(keys), float(values));
            return crate::linear_qk_norm_rope_attention_unfused(x, weight, rows, keys, values, ctx, scale);
        }
        assert!(
            ctx.prefix_len < keys.meta.shape()[1],
            "linear_qk_norm_rope_attention: row {} lies outside the caches",
            ctx.prefix_len
        );
        let projection = Projection {
            qkv: cube(<Self as KernelOps>::linear(x, weight)),
            norms_rotary: [
                cube(rows.q_norm.weight().clone()),
                cube(rows.k_norm.weight().clone()),
                cube(rows.cos.clone()),
                cube(rows.sin),
            ],
            k_at: rows.k_at,
            half: rows.cos.dims()[1],
            eps: [rows.q_norm.eps() as f32, rows.k_norm.eps() as f32],
        };
        let out = attention_launch::<R, F>(
            Queries::Projected(&projection),
            [1, heads, head_dim],
            &keys,
            &values,
            ctx,
            scale,
            None,
        );
        (float(out), float(keys), float(values))
    }

    fn write_cache_rows(cache: Tensor<Self, 3>, rows: Tensor<Self, 3>, at: usize) -> Tensor<Self, 3> {
        let [n, kv_heads, head_dim] = rows.dims();
        let cache = cache.into_primitive().tensor();
        // In place when the cache is ours alone (the decode loop's case); otherwise copy.
        if !cache.can_mut() || cache.meta.strides()[2] != 1 {
            return crate::reference::write_cache_rows(
                float(cache),
                float(rows.into_primitive().tensor()),
                at,
            );
        }
        let rows = cube(rows);
        let (head_stride, row_stride) = (cache.meta.strides()[0], cache.meta.strides()[1]);
        let len = n * kv_heads * head_dim;
        let (count, dim) = elementwise_grid(len);
        // SAFETY: rows `at..at + n` lie inside the cache (the caller checks capacity).
        unsafe {
            cache::write_rows::launch_unchecked::<F, R>(
                &rows.client,
                count,
                dim,
                array(&rows),
                view_array(&cache),
                len,
                kv_heads,
                head_dim,
                head_stride,
                row_stride,
                at,
            );
        }
        float(cache)
    }

    fn compact_kv_rows(caches: Vec<LayerCaches<Self>>, at: usize, keep: &[usize]) -> Vec<LayerCaches<Self>> {
        let caches: Vec<_> = caches
            .into_iter()
            .map(|(keys, values)| (keys.into_primitive().tensor(), values.into_primitive().tensor()))
            .collect();
        let float_all = |caches: Vec<(CubeTensor<R>, CubeTensor<R>)>| {
            caches.into_iter().map(|(k, v)| (float(k), float(v))).collect()
        };
        // In place when every layer's caches are ours alone (the decode loop's case) and all of
        // them share one layout; otherwise copies.
        let Some((first, _)) = caches.first() else {
            return Vec::new();
        };
        let (shape, strides) = (first.meta.shape().clone(), first.meta.strides().clone());
        let in_place = caches.iter().all(|(k, v)| {
            caches_in_place(k, v)
                && k.meta.shape() == &shape
                && v.meta.shape() == &shape
                && k.meta.strides() == &strides
        });
        if !in_place || keep.is_empty() {
            return crate::reference::compact_kv_rows(float_all(caches), at, keep);
        }
        let [kv_heads, capacity, head_dim] = [shape[0], shape[1], shape[2]];
        assert!(
            keep.windows(2).all(|w| w[0] < w[1]) && at + keep[keep.len() - 1] < capacity,
            "compact_kv_rows: keep must increase and stay inside the caches"
        );
        let client = first.client.clone();
        let keep_words: Vec<u32> = keep.iter().map(|&k| k as u32).collect();
        // Two bindings per layer, beside `keep` (and a runtime's own): a device with few bindings
        // takes the layers in groups.
        let max_bindings = client.properties().hardware.max_bindings as usize;
        let per_launch = (max_bindings.saturating_sub(2) / 2).clamp(1, MAX_COMPACT_LAYERS);
        let (cubes, dim) = elementwise_grid(kv_heads * head_dim);
        let CubeCount::Static(cubes_x, _, _) = cubes else {
            unreachable!("elementwise_grid counts its cubes statically")
        };
        for group in caches.chunks(per_launch) {
            let keys: SequenceArg<R, Array<F>> = group.iter().map(|(k, _)| view_array(k)).collect();
            let values: SequenceArg<R, Array<F>> = group.iter().map(|(_, v)| view_array(v)).collect();
            // SAFETY: rows `at + keep[i]` lie inside every layer's caches (checked above, one
            // shape and strides) and `keep` increases.
            unsafe {
                cache::compact_rows::launch_unchecked::<F, R>(
                    &client,
                    CubeCount::Static(cubes_x, group.len() as u32, 1),
                    dim,
                    keys,
                    values,
                    upload::upload_words(&client, &first.device, &keep_words),
                    keep.len(),
                    kv_heads,
                    head_dim,
                    strides[0],
                    strides[1],
                    at,
                    group.len(),
                );
            }
        }
        float_all(caches)
    }

    fn cached_attention(
        q: Tensor<Self, 3>,
        k_cache: Tensor<Self, 3>,
        v_cache: Tensor<Self, 3>,
        ctx: &AttentionContext<'_>,
        scale: f64,
    ) -> Tensor<Self, 3> {
        cached_attention_with(q, k_cache, v_cache, ctx, scale, None)
    }

    fn top_k_log_softmax(logits: Tensor<Self, 2>, k: usize) -> (Tensor<Self, 2>, Tensor<Self, 2, Int>) {
        let cols = logits.dims()[1];
        if k == 0 || k > cols || k > TOP_K_MAX {
            return crate::reference::top_k_log_softmax(logits, k);
        }
        let (values, ids) = top_k::top_k_log_softmax::<R, F, I>(cube(logits), k);
        (float(values), Tensor::from_primitive(ids))
    }

    fn host_values_and_ids(values: Tensor<Self, 2>, ids: Tensor<Self, 2, Int>) -> (Vec<f32>, Vec<u32>) {
        let values = into_contiguous_aligned(cube(values));
        let ids = into_contiguous_aligned(ids.into_primitive());
        let copy = |t: &CubeTensor<R>| {
            CopyDescriptor::new(
                t.handle.clone().binding(),
                t.meta.shape().clone(),
                t.meta.strides().clone(),
                t.elem_size(),
            )
        };
        // One read of both buffers: the runtime waits for the device once.
        let mut bytes =
            cubecl::future::block_on(values.client.read_tensor_async(vec![copy(&values), copy(&ids)]))
                .unwrap_or_else(|err| panic!("reading the values and ids back: {err}"))
                .into_iter();
        let mut data = |t: &CubeTensor<R>| {
            let bytes = bytes.next().expect("one buffer per tensor read");
            TensorData::from_bytes(bytes, t.meta.shape().clone(), t.dtype)
        };
        (crate::f32_of(data(&values)), crate::ids_of(data(&ids)))
    }

    fn argmax(logits: Tensor<Self, 2>) -> Tensor<Self, 1, Int> {
        let [rows, cols] = logits.dims();
        let logits = cube(logits);
        let out = contiguous::<R, I, _>(&logits, [rows]);
        let width = vector_width(&[&logits], cols);
        let (count, dim, planes) = cube_per_row(&logits.client, rows, ARGMAX_UNITS);
        // SAFETY: a contiguous `[rows, cols]` input and a `[rows]` output.
        unsafe {
            argmax::argmax_rows::launch_unchecked::<F, I, R>(
                &logits.client,
                count,
                dim,
                width,
                array(&logits),
                array(&out),
                cols / width,
                planes,
            );
        }
        Tensor::from_primitive(out)
    }

    fn gated_delta_rule(
        q: Tensor<Self, 3>,
        k: Tensor<Self, 3>,
        v: Tensor<Self, 3>,
        g: Tensor<Self, 2>,
        beta: Tensor<Self, 2>,
        state: Tensor<Self, 3>,
        parents: &[i32],
    ) -> (Tensor<Self, 3>, Tensor<Self, 3>) {
        let [n, key_heads, _] = q.dims();
        let heads = v.dims()[1];
        let walk = delta::depth_first(parents);
        // Saved columns per unit, in powers of two so that few kernel variants compile; trees
        // that branch deeper (never drafted) go to the reference, as do shapes and states the
        // kernel does not take.
        if n == 0 || walk.slots > DELTA_MAX_SLOTS || !delta_rule_fits::<F>(heads, key_heads, state.dtype()) {
            return crate::reference::gated_delta_rule(q, k, v, g, beta, state, parents);
        }
        let inputs = [cube(q), cube(k), cube(v), cube(g), cube(beta)];
        let parts = delta_parts(&inputs[0]);
        let (out, last) = delta_rule::<R, F>(inputs, cube(state), &walk, n - 1, parts);
        (float(out), float(last))
    }

    fn gated_delta_rule_along(
        q: Tensor<Self, 3>,
        k: Tensor<Self, 3>,
        v: Tensor<Self, 3>,
        g: Tensor<Self, 2>,
        beta: Tensor<Self, 2>,
        state: Tensor<Self, 3>,
        rows: &[usize],
    ) -> Tensor<Self, 3> {
        let [n, key_heads, _] = q.dims();
        let heads = v.dims()[1];
        let Some(&last_row) = rows.last() else {
            return state;
        };
        assert!(
            rows.iter().all(|&r| r < n),
            "gated_delta_rule_along: rows must lie in the block of {n}"
        );
        if !delta_rule_fits::<F>(heads, key_heads, state.dtype()) {
            return crate::reference::gated_delta_rule_along(q, k, v, g, beta, state, rows);
        }
        // The rows are read where they are: no gather of the five inputs.
        let inputs = [cube(q), cube(k), cube(v), cube(g), cube(beta)];
        let parts = delta_parts(&inputs[0]);
        let (_, last) = delta_rule::<R, F>(inputs, cube(state), &delta::along(rows), last_row, parts);
        float(last)
    }

    fn gdn_conv_commit(
        history: Tensor<Self, 2>,
        block: Tensor<Self, 2>,
        accepted: &[usize],
    ) -> Tensor<Self, 2> {
        let [kept, channels] = history.dims();
        let n = block.dims()[0];
        assert!(
            accepted.iter().all(|&a| a < n) && block.dims()[1] >= channels,
            "gdn_conv_commit: accepted rows must lie in the block of {n}, which holds the {channels} channels"
        );
        if kept == 0 {
            return history;
        }
        let rows: Vec<u32> = crate::reference::gdn_conv_commit_rows(kept, accepted)
            .into_iter()
            .map(|r| r as u32)
            .collect();
        // The block's rows (the input projection) are read in place.
        let (history, block) = (cube(history), row_view(block));
        let next = contiguous::<R, F, _>(&history, [kept, channels]);
        let (count, dim) = elementwise_grid(kept * channels);
        // SAFETY: `history` dense `[K − 1, C]`, `block` `n` rows of its stride holding at least `C`
        // columns, every row index below `K − 1 + n`, `next` dense.
        unsafe {
            gdn::conv_commit::launch_unchecked::<F, R>(
                &history.client,
                count,
                dim,
                array(&history),
                view_array(&block),
                upload::upload_words(&history.client, &history.device, &rows),
                array(&next),
                kept,
                channels,
                block.meta.strides()[0],
            );
        }
        float(next)
    }

    fn gdn_conv_qkv(
        history: Tensor<Self, 2>,
        block: Tensor<Self, 2>,
        windows: &[usize],
        weight: Tensor<Self, 2>,
        heads: GdnHeads,
    ) -> GdnConv<Self> {
        let [channels, kernel] = weight.dims();
        let n = windows.len() / kernel;
        let client = R::client(&block.device());
        let hardware = &client.properties().hardware;
        let plane = hardware.plane_size_max as usize;
        let planes = heads.key_dim.max(heads.value_dim).div_ceil(plane);
        if n == 0
            || n != block.dims()[0]
            || channels != heads.channels()
            || history.dims() != [kernel - 1, channels]
            || planes * plane > hardware.max_units_per_cube as usize
        {
            return crate::reference::gdn_conv_qkv(history, block, windows, weight, heads);
        }
        let GdnHeads {
            key_heads,
            value_heads,
            key_dim,
            value_dim,
        } = heads;
        // The block's rows (the input projection) are read in place.
        let (history, block, weight) = (cube(history), row_view(block), cube(weight));
        let q = contiguous::<R, F, _>(&history, [n, key_heads, key_dim]);
        let k = contiguous::<R, F, _>(&history, [n, key_heads, key_dim]);
        let v = contiguous::<R, F, _>(&history, [n, value_heads, value_dim]);
        let next = contiguous::<R, F, _>(&history, [kernel - 1, channels]);
        let windows: Vec<u32> = windows.iter().map(|&w| w as u32).collect();
        let slots = 2 * key_heads + value_heads;
        // SAFETY: `history` dense `[K − 1, C]`, `block` `n` rows of its stride holding at least `C`
        // columns, every window index below `K − 1 + n`, `weight` dense `[C, K]`, outputs dense; a
        // cube of `planes` planes covers the widest head.
        unsafe {
            gdn::conv_qkv::launch_unchecked::<F, R>(
                &client,
                CubeCount::Static(slots as u32, n as u32, 1),
                CubeDim::new_2d(plane as u32, planes as u32),
                array(&history),
                view_array(&block),
                upload::upload_words(&client, &block.device, &windows),
                array(&weight),
                array(&q),
                array(&k),
                array(&v),
                array(&next),
                key_heads,
                key_dim,
                value_dim,
                channels,
                block.meta.strides()[0],
                (key_dim as f32).powf(-0.5),
                crate::reference::GDN_L2_EPS as f32,
                kernel,
                planes,
            );
        }
        GdnConv {
            q: float(q),
            k: float(k),
            v: float(v),
            history: float(next),
        }
    }

    fn gdn_gates(
        proj: Tensor<Self, 2>,
        at: usize,
        a_log: Tensor<Self, 1>,
        dt_bias: Tensor<Self, 1>,
    ) -> (Tensor<Self, 2>, Tensor<Self, 2>) {
        let [rows, width] = proj.dims();
        let heads = a_log.dims()[0];
        assert!(
            at + 2 * heads <= width,
            "gdn_gates: columns {at}..{} past the projection's {width}",
            at + 2 * heads
        );
        if rows == 0 || heads == 0 {
            return crate::gdn_gates_sliced(proj, at, a_log, dt_bias);
        }
        // The `b` and `a` columns read in place from the projection.
        let proj = row_view(proj);
        let (a_log, dt_bias) = (cube(a_log), cube(dt_bias));
        let g = contiguous::<R, F, _>(&proj, [rows, heads]);
        let beta = contiguous::<R, F, _>(&proj, [rows, heads]);
        let len = rows * heads;
        let (count, dim) = elementwise_grid(len);
        // SAFETY: `proj` covers `rows` rows of its stride with columns `at..at + 2·heads` inside
        // them (checked above), `[heads]` vectors, dense outputs.
        unsafe {
            gdn::gates::launch_unchecked::<F, R>(
                &proj.client,
                count,
                dim,
                view_array(&proj),
                array(&a_log),
                array(&dt_bias),
                array(&g),
                array(&beta),
                len,
                heads,
                proj.meta.strides()[0],
                at,
            );
        }
        (float(g), float(beta))
    }

    fn gated_rms_norm(
        x: Tensor<Self, 2>,
        proj: Tensor<Self, 2>,
        z_at: usize,
        weight: Tensor<Self, 1>,
        eps: f64,
    ) -> Tensor<Self, 2> {
        let [rows, width] = x.dims();
        let dim = weight.dims()[0];
        assert!(
            z_at + width <= proj.dims()[1],
            "gated_rms_norm: columns {z_at}..{} past the projection's {}",
            z_at + width,
            proj.dims()[1]
        );
        if rows == 0 || dim == 0 || !width.is_multiple_of(dim) {
            return crate::gated_rms_norm_sliced(x, proj, z_at, weight, eps);
        }
        // `z` (columns of the input projection) is read in place.
        let (x, z, w) = (cube(x), row_view(proj), cube(weight));
        let y = contiguous::<R, F, _>(&x, [rows, width]);
        let (cube_dim, planes) = cube_of(&x.client, dim as u32);
        // SAFETY: dense `[rows, width]` x and y, `z` covering `rows` rows of its stride, a `[dim]`
        // weight; one cube per `dim`-wide group of a row.
        unsafe {
            gdn::gated_rms_norm_rows::launch_unchecked::<F, R>(
                &x.client,
                CubeCount::Static((width / dim) as u32, rows as u32, 1),
                cube_dim,
                array(&x),
                view_array(&z),
                array(&w),
                array(&y),
                dim,
                z.meta.strides()[0],
                z_at,
                eps as f32,
                planes,
            );
        }
        float(y)
    }
}

/// Whether [`delta::gated_delta_rule()`] takes these heads and this state type: value heads in
/// whole groups per key head, and a state in f32 (as the models keep it) or in the activations'
/// type. Otherwise the reference runs.
fn delta_rule_fits<F: FloatElement>(heads: usize, key_heads: usize, state_type: DType) -> bool {
    heads.is_multiple_of(key_heads) && (state_type == DType::F32 || state_type == F::dtype())
}

/// The units per state column [`KernelOps::gated_delta_rule`] takes for queries `q: [n,
/// key_heads, dk]` on their device (benchmarks mark it among the counts they compare).
pub fn gated_delta_rule_parts<R, F, I, BT>(q: &Tensor<CubeBackend<R, F, I, BT>, 3>) -> usize
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    delta_parts(&cube(q.clone()))
}

/// [`KernelOps::gated_delta_rule`] with `parts` units per state column (a power of two dividing
/// the key dimension and the device's smallest plane; benchmarks compare them, the trait takes
/// [`gated_delta_rule_parts`]). Panics on what the kernel does not take (the trait sends it to
/// the reference instead).
#[allow(clippy::type_complexity)]
pub fn gated_delta_rule_with<R, F, I, BT>(
    [q, k, v]: [Tensor<CubeBackend<R, F, I, BT>, 3>; 3],
    [g, beta]: [Tensor<CubeBackend<R, F, I, BT>, 2>; 2],
    state: Tensor<CubeBackend<R, F, I, BT>, 3>,
    parents: &[i32],
    parts: usize,
) -> (
    Tensor<CubeBackend<R, F, I, BT>, 3>,
    Tensor<CubeBackend<R, F, I, BT>, 3>,
)
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    let [n, key_heads, dk] = q.dims();
    let heads = v.dims()[1];
    let walk = delta::depth_first(parents);
    assert!(
        n > 0 && walk.slots <= DELTA_MAX_SLOTS && delta_rule_fits::<F>(heads, key_heads, state.dtype()),
        "gated_delta_rule_with: rows, tree or state type the kernel does not take"
    );
    let inputs = [cube(q), cube(k), cube(v), cube(g), cube(beta)];
    let plane = inputs[0].client.properties().hardware.plane_size_min as usize;
    assert!(
        delta_parts_fit(parts, dk, plane),
        "gated_delta_rule_with: {parts} units per column (key dimension {dk}, plane {plane})"
    );
    let (out, last) = delta_rule::<R, F>(inputs, cube(state), &walk, n - 1, parts);
    (float(out), float(last))
}

/// [`delta::gated_delta_rule()`] over `[q, k, v, g, beta]` from `state` (f32 or `F`, see
/// [`delta_rule_fits`]) along `walk`, `parts` units per state column: the outputs of the rows it
/// visits and the state after `last_row`.
fn delta_rule<R: CubeRuntime, F: FloatElement>(
    inputs: [CubeTensor<R>; 5],
    state: CubeTensor<R>,
    walk: &delta::Walk,
    last_row: usize,
    parts: usize,
) -> (CubeTensor<R>, CubeTensor<R>) {
    if state.dtype == DType::F32 {
        delta_rule_with_state::<R, F, f32>(inputs, state, walk, last_row, parts)
    } else {
        delta_rule_with_state::<R, F, F>(inputs, state, walk, last_row, parts)
    }
}

/// [`delta_rule`] with the state's type `S`.
fn delta_rule_with_state<R: CubeRuntime, F: FloatElement, S: FloatElement>(
    [q, k, v, g, beta]: [CubeTensor<R>; 5],
    state: CubeTensor<R>,
    walk: &delta::Walk,
    last_row: usize,
    parts: usize,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let [n, key_heads, dk] = q.meta.shape().dims::<3>();
    let [_, heads, dv] = v.meta.shape().dims::<3>();
    let client = q.client.clone();
    let out = contiguous::<R, F, _>(&v, [n, heads, dv]);
    let last = contiguous::<R, S, _>(&state, [heads, dk, dv]);
    let (count, dim) = elementwise_grid(heads * dv * parts);
    // SAFETY: dense inputs of the documented shapes, a walk of `n` rows whose slots are below
    // `slots`, dense outputs; `state` holds `S` values; `parts` divides `dk` and the plane, and
    // the cubes are whole planes.
    unsafe {
        delta::gated_delta_rule::launch_unchecked::<F, S, R>(
            &client,
            count,
            dim,
            array(&q),
            array(&k),
            array(&v),
            array(&g),
            array(&beta),
            array(&state),
            upload::upload_words(&client, &q.device, &walk.order),
            upload::upload_words(&client, &q.device, &walk.load),
            upload::upload_words(&client, &q.device, &walk.save),
            array(&out),
            array(&last),
            walk.order.len(),
            last_row,
            heads,
            key_heads,
            dv,
            dk,
            parts,
            walk.slots.next_power_of_two(),
        );
    }
    (out, last)
}

/// Units per state column in [`delta::gated_delta_rule()`] for queries `q: [n, key_heads, dk]`:
/// [`DELTA_PARTS`], or fewer where the smallest plane or `dk` is not a multiple of it (one unit
/// per column needs no shuffle).
fn delta_parts<R: CubeRuntime>(q: &CubeTensor<R>) -> usize {
    let dk = q.meta.shape().dims::<3>()[2];
    let plane = q.client.properties().hardware.plane_size_min as usize;
    let mut parts = DELTA_PARTS;
    while parts > 1 && !delta_parts_fit(parts, dk, plane) {
        parts /= 2;
    }
    parts
}

/// Whether [`delta::gated_delta_rule()`] can split a `dk`-entry column across `parts` units: a
/// power of two dividing `dk` and the plane (the units of a column shuffle within one plane).
fn delta_parts_fit(parts: usize, dk: usize, plane: usize) -> bool {
    parts.is_power_of_two() && dk.is_multiple_of(parts) && plane >= parts && plane.is_multiple_of(parts)
}

/// Units per state column of the delta rule: 16 split a 128-entry column into 8 products per
/// unit and a row's reduction into four shuffles. At Qwen3.6-27B's heads on an H100
/// (`self-test --sweep-delta`, docs/perf-notes.md, seventeenth session) 16 was the fastest for a
/// 65-row tree (106 µs against 127 with 8 and 148 with 32) and a 2048-row prefill (2.5 ms
/// against 2.9 and 3.3); one AR row took the same with 4–16.
const DELTA_PARTS: usize = 16;

/// Saved columns [`delta::gated_delta_rule()`] keeps per unit: one per branching row on a path
/// (a draft tree is at most 17 deep; a sequence needs none).
const DELTA_MAX_SLOTS: usize = 32;

/// [`KernelOps::qk_norm_rope_write`] of a projection `[n, width]` given as the f32 partial sums
/// of its `splits` k-slices (`[splits · n · width]`), as a k-sliced tensor-core QKV projection
/// leaves them: the decode path reaches this through
/// [`KernelOps::linear_qk_norm_rope_write`]; tests call it directly (`n` is the rotary rows').
#[allow(clippy::type_complexity)]
pub fn partials_qk_norm_rope_write<R, F, I, BT>(
    partial: Tensor<CubeBackend<R, F, I, BT>, 1>,
    splits: usize,
    rows: QkvRows<CubeBackend<R, F, I, BT>>,
    keys: Tensor<CubeBackend<R, F, I, BT>, 3>,
    values: Tensor<CubeBackend<R, F, I, BT>, 3>,
    at: usize,
) -> (
    Tensor<CubeBackend<R, F, I, BT>, 3>,
    Tensor<CubeBackend<R, F, I, BT>, 3>,
    Tensor<CubeBackend<R, F, I, BT>, 3>,
)
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    let n = rows.cos.dims()[0];
    let width = partial.dims()[0] / (splits * n);
    qk_rope(
        Product::Partials(cube(partial), splits),
        [n, width],
        rows,
        keys,
        values,
        at,
    )
}

/// [`KernelOps::qk_norm_rope_write`] of a projection `[n, width]` given as its rows or as the
/// partial sums of its k-slices ([`rope::qk_norm_rope_write_rows()`] adds them up).
#[allow(clippy::type_complexity)]
fn qk_rope<R, F, I, BT>(
    qkv: Product<R>,
    [n, width]: [usize; 2],
    rows: QkvRows<CubeBackend<R, F, I, BT>>,
    keys: Tensor<CubeBackend<R, F, I, BT>, 3>,
    values: Tensor<CubeBackend<R, F, I, BT>, 3>,
    at: usize,
) -> (
    Tensor<CubeBackend<R, F, I, BT>, 3>,
    Tensor<CubeBackend<R, F, I, BT>, 3>,
    Tensor<CubeBackend<R, F, I, BT>, 3>,
)
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    let HeadShape {
        heads,
        kv_heads,
        head_dim,
    } = rows.shape;
    let (keys, values) = (keys.into_primitive().tensor(), values.into_primitive().tensor());
    let (qkv, splits) = match qkv {
        Product::Partials(partial, splits) => {
            assert_eq!(
                partial.meta.shape().num_elements(),
                splits * n * width,
                "qk_rope: partial sums of {splits} slices of [{n}, {width}]"
            );
            (partial, splits)
        }
        Product::Rows(qkv) => (qkv, 1),
    };
    // In place when the caches are ours alone and share one layout (the decode loop's case);
    // otherwise the separate ops, which copy.
    if !caches_in_place(&keys, &values) {
        let qkv = if splits > 1 {
            sum_partials::<R, F>(&qkv, splits, [n, width], false)
        } else {
            qkv
        };
        return crate::reference::qk_norm_rope_write(float(qkv), rows, float(keys), float(values), at);
    }
    let half = rows.cos.dims()[1];
    let (cos, sin) = (cube(rows.cos), cube(rows.sin));
    let (q_norm, k_norm) = (
        cube(rows.q_norm.weight().clone()),
        cube(rows.k_norm.weight().clone()),
    );
    let queries = n - rows.context_rows;
    let q = contiguous::<R, F, _>(&cos, [queries, heads, head_dim]);
    let (head_stride, row_stride) = (keys.meta.strides()[0], keys.meta.strides()[1]);
    let plane = cos.client.properties().hardware.plane_size_max;
    // The two launches differ only in the type of `qkv` (`F` rows or f32 partial sums).
    macro_rules! launch_qk_rope {
        ($qkv_type:ty) => {
            rope::qk_norm_rope_write_rows::launch_unchecked::<F, $qkv_type, R>(
                &cos.client,
                CubeCount::Static(n as u32, (heads + kv_heads) as u32, 1),
                CubeDim::new_1d(plane),
                array(&qkv),
                array(&q_norm),
                array(&k_norm),
                array(&cos),
                array(&sin),
                array(&q),
                view_array(&keys),
                view_array(&values),
                width,
                rows.context_rows,
                rows.k_at,
                kv_heads * head_dim,
                half,
                head_stride,
                row_stride,
                at,
                rows.q_norm.eps() as f32,
                rows.k_norm.eps() as f32,
                n * width,
                splits,
                heads,
                head_dim,
                plane as usize,
            )
        };
    }
    // SAFETY: qkv is dense `[splits, n, width]` with q, k and v inside each row; rows
    // `at..at + n` lie inside the caches (the caller checks capacity); q is dense
    // `[queries, heads, head_dim]`.
    unsafe {
        if splits > 1 {
            launch_qk_rope!(f32);
        } else {
            launch_qk_rope!(F);
        }
    }
    (float(q), float(keys), float(values))
}

/// [`KernelOps::cached_attention`] on a CubeCL backend with the keys cut into about `splits`
/// slices (clamped to the 64-key steps there are) instead of the count that gives every
/// multiprocessor about two cubes — benchmarks compare split counts with it.
pub fn cached_attention_with<R, F, I, BT>(
    q: Tensor<CubeBackend<R, F, I, BT>, 3>,
    k_cache: Tensor<CubeBackend<R, F, I, BT>, 3>,
    v_cache: Tensor<CubeBackend<R, F, I, BT>, 3>,
    ctx: &AttentionContext<'_>,
    scale: f64,
    splits: Option<usize>,
) -> Tensor<CubeBackend<R, F, I, BT>, 3>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    let dims = q.dims();
    let (k, v) = (row_view(k_cache), row_view(v_cache));
    let (k, v) = if k.meta.strides() == v.meta.strides() {
        (k, v)
    } else {
        (into_contiguous(k), into_contiguous(v))
    };
    float(attention_launch::<R, F>(
        Queries::Rows(&cube(q)),
        dims,
        &k,
        &v,
        ctx,
        scale,
        splits,
    ))
}

/// The queries of an attention launch: their rows, or (an AR step on [`attention_mma`]) the QKV
/// projection row, which the kernel normalises and rotates itself, writing the new key and value
/// into the caches.
enum Queries<'a, R: CubeRuntime> {
    Rows(&'a CubeTensor<R>),
    Projected(&'a Projection<R>),
}

/// An AR step's QKV projection row and what its rotation reads, for [`attention_mma`]'s
/// `project`.
struct Projection<R: CubeRuntime> {
    qkv: CubeTensor<R>,
    /// `[q_norm, k_norm, cos, sin]`.
    norms_rotary: [CubeTensor<R>; 4],
    k_at: usize,
    half: usize,
    eps: [f32; 2],
}

/// Whether a layer's key and value caches can be written in place: ours alone (the decode loop's
/// case: no other tensor sees the writes), laid out alike, each row dense.
fn caches_in_place<R: CubeRuntime>(keys: &CubeTensor<R>, values: &CubeTensor<R>) -> bool {
    keys.can_mut()
        && values.can_mut()
        && keys.meta.strides() == values.meta.strides()
        && keys.meta.strides()[2] == 1
}

/// Whether [`attention_mma`] takes a layer of `head_dim` whose keys, values (and queries) load in
/// vectors of `width`.
fn mma_attention<R: CubeRuntime, F: FloatElement>(
    client: &ComputeClient<R>,
    width: usize,
    head_dim: usize,
) -> bool {
    width * size_of::<F>() == 16
        && head_dim.is_multiple_of(32)
        && head_dim <= attention_mma::MMA_MAX_HEAD_DIM
        && size_of::<F>() == 2
        && has_mma::<R, F>(client)
        && has_ldmatrix::<R, F>(client)
        && attention_mma::mma_shared_bytes(head_dim, size_of::<F>())
            <= client.properties().hardware.max_shared_memory_size
}

/// How [`attention_launch`] reads `rows` rows of `group` queries per KV head over the caches `k`,
/// `v` (and the queries `q` where it reads them as rows).
struct AttentionPlan {
    /// The vector width of the loads of `head_dim`-long rows: every key row of the caches stays
    /// aligned.
    width: usize,
    /// On [`attention_mma`].
    mma: bool,
    /// On [`attention_mma`] with the planes sharing the queries and splitting the keys (up to
    /// one plane's queries per KV head, as in an AR step).
    split_keys: bool,
}

impl AttentionPlan {
    fn new<R: CubeRuntime, F: FloatElement>(
        q: Option<&CubeTensor<R>>,
        k: &CubeTensor<R>,
        v: &CubeTensor<R>,
        rows: usize,
        group: usize,
        head_dim: usize,
    ) -> Self {
        let read: Vec<_> = q.into_iter().chain([k, v]).collect();
        let mut width = vector_width(&read, head_dim);
        if !k.meta.strides()[..2].iter().all(|s| s.is_multiple_of(width)) {
            width = 1;
        }
        let mma = mma_attention::<R, F>(&k.client, width, head_dim);
        let split_keys = mma && rows * group <= attention_mma::MMA_PLANE_QUERIES;
        Self {
            width,
            mma,
            split_keys,
        }
    }
}

/// The attention kernels' launches: the attention of `queries` (`[rows, q_heads, head_dim]`) over
/// caches `k`, `v` (equal strides, dense last dimension), its split combine where the keys are
/// split. [`Queries::Projected`] needs [`attention_mma`] with `split_keys` (one row).
#[allow(clippy::too_many_arguments)]
fn attention_launch<R: CubeRuntime, F: FloatElement>(
    queries: Queries<'_, R>,
    [rows, q_heads, head_dim]: [usize; 3],
    k: &CubeTensor<R>,
    v: &CubeTensor<R>,
    ctx: &AttentionContext<'_>,
    scale: f64,
    splits: Option<usize>,
) -> CubeTensor<R> {
    let kv_heads = k.meta.shape()[0];
    let (head_stride, row_stride) = (k.meta.strides()[0], k.meta.strides()[1]);
    let client = k.client.clone();
    let out = contiguous::<R, F, _>(k, [rows, q_heads, head_dim]);
    // Ancestor bits as little-endian u32 words; the other modes never read the buffer, so
    // one zero word stands in (uploaded once and kept: no runtime call per AR step and layer).
    let unread = || upload::upload_words(&client, &k.device, &[0]);
    let (mode, bits, words_per_row) = match ctx.visibility {
        Visibility::Causal => (attention::CAUSAL, unread(), 1),
        Visibility::Full => (attention::FULL, unread(), 1),
        Visibility::Tree(bits) => {
            let words32: Vec<u32> = bits
                .words()
                .iter()
                .flat_map(|&w| [w as u32, (w >> 32) as u32])
                .collect();
            (
                attention::TREE,
                upload::upload_words(&client, &k.device, &words32),
                2 * bits.words_per_row(),
            )
        }
    };
    let plane = client.properties().hardware.plane_size_max as usize;
    // Queries (as rows) and keys in vectors.
    let (q, project) = match queries {
        Queries::Rows(q) => (q, false),
        Queries::Projected(projection) => (&projection.qkv, true),
    };
    let group = q_heads / kv_heads;
    let AttentionPlan {
        width,
        mma,
        split_keys,
    } = AttentionPlan::new::<R, F>((!project).then_some(q), k, v, rows, group, head_dim);
    let wide = width * size_of::<F>() == 16;
    let kv_len = ctx.prefix_len + rows;
    let multiprocessors = multiprocessors(&client);
    let queries_n = rows * q_heads;
    // Tensor cores when the vectors are 16 bytes wide and the staged keys fit in shared
    // memory: `mma.sync` with fragments in registers up to head_dim 128 for every block,
    // AR's single row included, and WMMA tiles beyond, from 16 queries per KV head on.
    let max_shared = client.properties().hardware.max_shared_memory_size;
    let tiles = !mma
        && wide
        && rows * group >= 16
        && head_dim.is_multiple_of(16)
        && has_tensor_tiles::<R, F>(&client)
        && attention::tiles_shared_bytes(head_dim, size_of::<F>()) <= max_shared;
    assert!(
        !project || (split_keys && rows == 1),
        "attention: only one row on `attention_mma` normalises and rotates its own queries"
    );
    // Blocks of queries per KV head, and enough splits of the keys to give every
    // multiprocessor about two cubes.
    let (step, row_blocks) = if mma {
        (
            attention_mma::MMA_KEYS,
            (rows * group).div_ceil(if split_keys {
                attention_mma::MMA_PLANE_QUERIES
            } else {
                attention_mma::MMA_QUERIES
            }),
        )
    } else if tiles {
        (
            attention::TILE_KEYS,
            (rows * group).div_ceil(attention::TILE_QUERIES),
        )
    } else {
        let max_queries = attention::QUERY_STATE / head_dim;
        assert!(
            group <= max_queries,
            "attention: {group} query heads per KV head exceed the kernel's {max_queries} queries per cube"
        );
        (plane, rows.div_ceil(max_queries / group))
    };
    // Tensor-core cubes are long and fit two per multiprocessor (`attention_mma`: 221
    // registers per unit; `attention_tiles`: 97 registers and 74 KB of shared memory): at
    // most one wave of them (a second, partial wave cost up to half the launch at B = 64);
    // the others, at least one wave.
    let steps = kv_len.div_ceil(step);
    let blocks = kv_heads * row_blocks;
    let wanted = if let Some(splits) = splits {
        splits
    } else if mma || tiles {
        (2 * multiprocessors) / blocks
    } else {
        (2 * multiprocessors).div_ceil(blocks)
    }
    .clamp(1, steps);
    let keys_per_split = steps.div_ceil(wanted) * step;
    let splits = kv_len.div_ceil(keys_per_split);
    let partials = if splits > 1 { splits * queries_n } else { 1 };
    let part_acc = contiguous::<R, f32, _>(k, [partials, head_dim]);
    let part_ml = contiguous::<R, f32, _>(k, [partials, 2]);
    let cubes = CubeCount::Static(kv_heads as u32, splits as u32, row_blocks as u32);
    // An AR step's splits merged by the cube that finishes each KV head last (CUDA only: it
    // fences), a counter per KV head.
    let fold = mma
        && split_keys
        && splits > 1
        && blocks <= FOLD_COUNTERS
        && FOLD_COMBINE.load(Ordering::Relaxed)
        && fences(&client);
    // The tensor-core kernels take the same arguments but for `q` (32-bit words for `mma.sync`
    // fragments), their planes per cube and `attention_mma`'s own.
    macro_rules! launch_tensor_core_attention {
        ($($kernel:ident)::+, $q:expr, $planes:expr, [$($own:expr),*], [$($extra:expr),*]) => {
            $($kernel)::+::launch_unchecked::<F, R>(
                &client,
                cubes,
                CubeDim::new_2d(32, $planes as u32),
                width,
                $q,
                view_array(k),
                view_array(v),
                bits,
                array(&out),
                array(&part_acc),
                array(&part_ml),
                $($own,)*
                head_stride,
                row_stride,
                ctx.prefix_len,
                rows,
                words_per_row,
                ctx.window.unwrap_or(0),
                scale as f32,
                keys_per_split,
                splits,
                q_heads,
                kv_heads,
                head_dim,
                mode,
                $($extra),*
            )
        };
    }
    // Blocks of rows on CUDA: the hand-written loop of the same design and grid.
    let rows_kernel = mma
        && !split_keys
        && ATTENTION_ROWS.load(Ordering::Relaxed)
        && R::name(&client) == "cuda"
        && attention_rows::rows_head_dim(head_dim)
        && attention_rows::rows_shared_bytes(head_dim) <= max_shared;
    // SAFETY: q/out are `[rows, q_heads, head_dim]` (or, projected, qkv one row holding the
    // queries, keys and values, the norms `[head_dim]`, cos/sin `[half]`), k/v `[kv_heads,
    // capacity, head_dim]`, q/out dense, k/v with a dense last dimension and strides that are
    // multiples of the vector width; the block rows lie in the cache; the partial buffers hold
    // `splits · rows · q_heads` entries when there is more than one split; the fold's counters
    // are zero between launches (the last cube of each KV head resets its own).
    unsafe {
        if rows_kernel {
            attention_rows::attention_rows::launch_unchecked::<F, R>(
                &client,
                cubes,
                CubeDim::new_1d(attention_rows::ROWS_UNITS as u32),
                words(q),
                view_array(k),
                view_array(v),
                bits,
                array(&out),
                array(&part_acc),
                array(&part_ml),
                head_stride,
                row_stride,
                ctx.prefix_len,
                rows,
                words_per_row,
                ctx.window.unwrap_or(0),
                scale as f32,
                keys_per_split,
                q_heads,
                kv_heads,
                head_dim,
                mode,
                F::dtype() == DType::BF16,
            );
        } else if mma {
            // Without projection the kernel never reads the rotation: `q` stands in.
            let rotation = match queries {
                Queries::Rows(q) => attention_mma::RotationLaunch::new(
                    array(q),
                    array(q),
                    array(q),
                    array(q),
                    array(q),
                    0,
                    0,
                    0.0,
                    0.0,
                ),
                Queries::Projected(projection) => {
                    let Projection {
                        qkv,
                        norms_rotary: [q_norm, k_norm, cos, sin],
                        k_at,
                        half,
                        eps: [q_eps, k_eps],
                    } = projection;
                    attention_mma::RotationLaunch::new(
                        array(qkv),
                        array(q_norm),
                        array(k_norm),
                        array(cos),
                        array(sin),
                        *k_at,
                        *half,
                        *q_eps,
                        *k_eps,
                    )
                }
            };
            launch_tensor_core_attention!(
                attention_mma::attention_mma,
                words(q),
                attention_mma::MMA_QUERY_PLANES,
                [
                    rotation,
                    upload::upload_words(&client, &k.device, &[0; FOLD_COUNTERS])
                ],
                [split_keys, project, fold, FAST_EXP.load(Ordering::Relaxed)]
            );
        } else if tiles {
            launch_tensor_core_attention!(
                attention::attention_tiles,
                array(q),
                attention::TILE_PLANES,
                [],
                []
            );
        } else {
            attention::attention_splits::launch_unchecked::<F, R>(
                &client,
                cubes,
                CubeDim::new_2d(plane as u32, ATTENTION_PLANES),
                width,
                array(q),
                view_array(k),
                view_array(v),
                bits,
                array(&out),
                array(&part_acc),
                array(&part_ml),
                head_stride,
                row_stride,
                ctx.prefix_len,
                rows,
                words_per_row,
                ctx.window.unwrap_or(0),
                scale as f32,
                keys_per_split,
                attention::QUERY_STATE / head_dim / group,
                splits,
                q_heads,
                kv_heads,
                head_dim,
                plane,
                ATTENTION_PLANES as usize,
                mode,
            );
        }
        if splits > 1 && !fold {
            attention::attention_combine::launch_unchecked::<F, R>(
                &client,
                CubeCount::Static(queries_n.div_ceil(COMBINE_PLANES as usize) as u32, 1, 1),
                CubeDim::new_2d(plane as u32, COMBINE_PLANES),
                array(&part_acc),
                array(&part_ml),
                array(&out),
                queries_n,
                splits,
                head_dim,
                plane,
            );
        }
    }
    out
}

/// [`linear::linear_rows()`] for at most [`linear::MAX_ROWS`] rows: `x · Wᵀ`, or with `swiglu`
/// the activation of a fused gate/up weight (`[rows, n_out / 2]`).
fn rows_linear<R, F, I, BT>(
    x: Tensor<CubeBackend<R, F, I, BT>, 2>,
    weight: Tensor<CubeBackend<R, F, I, BT>, 2>,
    swiglu: bool,
) -> Tensor<CubeBackend<R, F, I, BT>, 2>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    linear_rows_with(x, weight, swiglu, linear::GEMV_K_PLANES)
}

/// The GEMV ([`linear::linear_rows()`], at most [`linear::MAX_ROWS`] rows) with `k_planes`
/// planes per output feature (a power of two; benchmarks compare them); with `swiglu`, `weight`
/// is a fused gate/up projection and the result `silu(gate) ⊙ up`.
pub fn linear_rows_with<R, F, I, BT>(
    x: Tensor<CubeBackend<R, F, I, BT>, 2>,
    weight: Tensor<CubeBackend<R, F, I, BT>, 2>,
    swiglu: bool,
    k_planes: usize,
) -> Tensor<CubeBackend<R, F, I, BT>, 2>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    let [rows, k] = x.dims();
    assert!(rows <= linear::MAX_ROWS, "linear_rows_with: {rows} rows");
    assert!(
        k_planes.is_power_of_two(),
        "linear_rows_with: {k_planes} planes per feature"
    );
    let n_out = weight.dims()[0] / if swiglu { 2 } else { 1 };
    let (x, w) = (cube(x), cube(weight));
    let y = contiguous::<R, F, _>(&x, [rows, n_out]);
    let width = vector_width(&[&x, &w], k);
    let plane = x.client.properties().hardware.plane_size_max;
    // A feature's planes share a cube.
    let planes = k_planes.max(GEMV_PLANES);
    let cubes = (n_out * k_planes).div_ceil(planes) as u32;
    let (count, dim) = (
        CubeCount::Static(cubes, 1, 1),
        CubeDim::new_2d(plane, planes as u32),
    );
    // SAFETY: both inputs are contiguous with the lengths given (W holds `2 · n_out` rows with
    // `swiglu`); the kernel guards its rows.
    unsafe {
        linear::linear_rows::launch_unchecked::<F, R>(
            &x.client,
            count,
            dim,
            width,
            array(&x),
            array(&w),
            array(&y),
            k / width,
            n_out,
            rows,
            swiglu,
            planes,
            k_planes,
        );
    }
    float(y)
}

/// The contiguous CubeCL tensor behind a float tensor.
fn cube<R, F, I, BT, const D: usize>(t: Tensor<CubeBackend<R, F, I, BT>, D>) -> CubeTensor<R>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    into_contiguous(t.into_primitive().tensor())
}

/// Wraps a kernel's output as a float tensor.
fn float<R, F, I, BT, const D: usize>(t: CubeTensor<R>) -> Tensor<CubeBackend<R, F, I, BT>, D>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// The CubeCL tensor behind a float tensor whose last dimension is dense (a row view, a pitched
/// buffer), made contiguous only when it is not.
fn row_view<R, F, I, BT, const D: usize>(t: Tensor<CubeBackend<R, F, I, BT>, D>) -> CubeTensor<R>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    let t = t.into_primitive().tensor();
    if t.meta.strides()[D - 1] == 1 {
        t
    } else {
        into_contiguous(t)
    }
}

/// [`activation::silu_mul()`] over row views (the halves of a fused gate/up projection, the gate
/// columns of a QKV projection are read in place): `silu(gate) ⊙ up`, or with `sigmoid`,
/// `up ⊙ sigmoid(gate)`.
fn gated_rows<R, F, I, BT>(
    gate: Tensor<CubeBackend<R, F, I, BT>, 2>,
    up: Tensor<CubeBackend<R, F, I, BT>, 2>,
    sigmoid: bool,
) -> Tensor<CubeBackend<R, F, I, BT>, 2>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    let [rows, cols] = gate.dims();
    assert_eq!(
        up.dims(),
        [rows, cols],
        "gated activation: the inputs differ in shape"
    );
    let (gate, up) = (row_view(gate), row_view(up));
    let (gate_stride, up_stride) = (gate.meta.strides()[0], up.meta.strides()[0]);
    let y = contiguous::<R, F, _>(&gate, [rows, cols]);
    let width = vector_width(&[&gate, &up, &y], gcd(cols, gcd(gate_stride, up_stride)));
    let len = rows * cols / width;
    let (count, dim) = elementwise_grid(len);
    // SAFETY: each view covers `rows` rows of its stride; `y` is dense `[rows, cols]`.
    unsafe {
        activation::silu_mul::launch_unchecked::<F, R>(
            &gate.client,
            count,
            dim,
            width,
            view_array(&gate),
            view_array(&up),
            array(&y),
            len,
            cols / width,
            gate_stride / width,
            up_stride / width,
            sigmoid,
        );
    }
    float(y)
}

/// `x · Wᵀ` on tensor cores ([`linear::linear_mma()`]) for 9–144 rows of `x`, or the inputs back
/// when the device has no `mma.sync` m16n8k16 for the float type (lavapipe; CUDA before sm_80)
/// or the sizes do not tile.
///
/// [`KernelOps::linear`] uses it for more than [`linear::MAX_ROWS`] rows unless
/// [`set_tensor_cores`] turned it off; `ddtree-bench self-test --device cuda` checks it against the
/// reference and measures its bandwidth.
#[allow(clippy::type_complexity)]
pub fn linear_tiled<R, F, I, BT>(
    x: Tensor<CubeBackend<R, F, I, BT>, 2>,
    weight: Tensor<CubeBackend<R, F, I, BT>, 2>,
) -> Result<
    Tensor<CubeBackend<R, F, I, BT>, 2>,
    (
        Tensor<CubeBackend<R, F, I, BT>, 2>,
        Tensor<CubeBackend<R, F, I, BT>, 2>,
    ),
>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    let (x, weight) = match linear_wgmma(x, weight, false) {
        Ok(y) => return Ok(y),
        Err(inputs) => inputs,
    };
    match mma_shape(&x, &weight) {
        Some(shape) => linear_tiled_with(x, weight, shape),
        None => Err((x, weight)),
    }
}

/// `x · weightᵀ` on warpgroup MMAs ([`wgmma::linear_wgmma()`]) — with `swiglu`, `silu(x · gateᵀ)
/// ⊙ (x · upᵀ)` from a fused gate/up weight (its gate rows, then its up rows) — its k-slices'
/// partial sums added up. `Err` gives the inputs back where it does not apply (turned off, not
/// sm_90, not 2-byte floats, or a shape it does not take).
#[allow(clippy::type_complexity)]
pub fn linear_wgmma<R, F, I, BT>(
    x: Tensor<CubeBackend<R, F, I, BT>, 2>,
    weight: Tensor<CubeBackend<R, F, I, BT>, 2>,
    swiglu: bool,
) -> Result<
    Tensor<CubeBackend<R, F, I, BT>, 2>,
    (
        Tensor<CubeBackend<R, F, I, BT>, 2>,
        Tensor<CubeBackend<R, F, I, BT>, 2>,
    ),
>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    let n_out = weight.dims()[0];
    let shape = [x.dims()[0], if swiglu { n_out / 2 } else { n_out }];
    let (x, w) = (cube(x), cube(weight));
    match launch_wgmma::<R, F>(&x, &w, swiglu) {
        Some(product) => Ok(float(product.into_rows::<F>(shape, swiglu))),
        None => Err((float(x), float(w))),
    }
}

/// Launches [`wgmma::linear_wgmma()`] (with `swiglu`, on a fused gate/up weight), or `None` where
/// it does not apply: turned off, not CUDA on sm_90 (TMA without sm_100's
/// additions), not 2-byte floats, rows or weight not 16-byte aligned, or a shape
/// [`wgmma::WgmmaShape::choose`] does not take.
fn launch_wgmma<R: CubeRuntime, F: FloatElement>(
    x: &CubeTensor<R>,
    w: &CubeTensor<R>,
    swiglu: bool,
) -> Option<Product<R>> {
    use cubecl::ir::features::Tma;
    let ([rows, k], [n_out, k_w]) = (x.meta.shape().dims::<2>(), w.meta.shape().dims::<2>());
    let client = x.client.clone();
    let tma = &client.properties().features.tma;
    let hopper = R::name(&client) == "cuda" && tma.contains(Tma::Base) && !tma.contains(Tma::Im2colWide);
    let kind = F::dtype();
    // `cube` made both contiguous; the tensor maps need 16-byte aligned starts.
    let aligned = |t: &CubeTensor<R>| t.handle.offset_start.unwrap_or(0).is_multiple_of(16);
    let shape = wgmma::WgmmaShape::choose(rows, n_out, k, multiprocessors(&client));
    let usable = WARPGROUP_MMA.load(Ordering::Relaxed)
        && TENSOR_CORES.load(Ordering::Relaxed)
        && hopper
        && matches!(kind, DType::BF16 | DType::F16)
        && k == k_w
        && aligned(x)
        && aligned(w)
        && (!swiglu || (n_out / 2).is_multiple_of(32));
    let shape = match shape {
        Some(shape)
            if usable && shape.shared_bytes() <= client.properties().hardware.max_shared_memory_size =>
        {
            shape
        }
        _ => return None,
    };
    let splits = shape.k_splits;
    let (y, partial) = Product::buffers::<F>(x, rows, n_out, splits, swiglu);
    let w_box = if swiglu { 32 } else { wgmma::CUBE_ROWS };
    let maps = wgmma::TileMapsLaunch::new(tile_map(w, n_out, k, w_box), tile_map(x, rows, k, shape.tokens));
    let cubes = CubeCount::Static((n_out / wgmma::CUBE_ROWS) as u32, splits as u32, 1);
    // SAFETY: the maps describe x's `rows` and W's `n_out` dense rows of k (checked above), y
    // holds `rows · y_cols` values with one split and partial `splits · rows · n_out` with
    // several; `choose` checked that the chunks tile k and the cubes n_out.
    unsafe {
        wgmma::linear_wgmma::launch_unchecked::<F, R>(
            &client,
            cubes,
            CubeDim::new_1d(128),
            maps,
            array(&y),
            array(&partial),
            rows,
            n_out,
            k,
            shape.tokens,
            splits,
            swiglu,
            kind == DType::BF16,
        );
    }
    Some(Product::written(y, partial, splits))
}

/// A dense `[rows, k]` tensor of 2-byte values as a tensor map of `[rows, k / 2]` 32-bit words,
/// copied in boxes of `box_rows` × 32 words (128 bytes, the 128-byte swizzle's row); rows past
/// `rows` read as zeros. Each copy's lines are promoted to 256 bytes in the L2, so a row's next
/// chunk is already there when its copy comes (cubecl's default promotes none: the prototype,
/// `tools/wgmma_linear.cu`, promotes 256).
fn tile_map<R: CubeRuntime>(
    t: &CubeTensor<R>,
    rows: usize,
    k: usize,
    box_rows: usize,
) -> TensorMapArg<R, Tiled> {
    // SAFETY: a dense `[rows, k]` tensor of 2-byte values is `[rows, k / 2]` words.
    let words = unsafe {
        TensorArg::from_raw_parts(
            t.handle.clone(),
            cubecl::zspace::strides![k / 2, 1],
            cubecl::zspace::shape![rows, k / 2],
        )
    };
    let tile_size = cubecl::zspace::shape![box_rows, 32];
    TensorMapArg::new(TiledArgs { tile_size }, words, u32::as_type_native_unchecked())
        .with_swizzle(TensorMapSwizzle::B128)
        .with_prefetch(TensorMapPrefetch::B256)
}

/// The launch shape [`linear_tiled`] picks for `x · weightᵀ` on their device
/// ([`linear::MmaShape::choose`] for its multiprocessors and shared memory).
pub fn mma_shape<R, F, I, BT>(
    x: &Tensor<CubeBackend<R, F, I, BT>, 2>,
    weight: &Tensor<CubeBackend<R, F, I, BT>, 2>,
) -> Option<linear::MmaShape>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    shape_on_device(x, weight, linear::MmaShape::choose)
}

/// The launch shape [`KernelOps::gate_up_silu`] picks for `x` and a fused gate/up weight on
/// their device ([`linear::MmaShape::choose_swiglu`]).
pub fn gate_up_mma_shape<R, F, I, BT>(
    x: &Tensor<CubeBackend<R, F, I, BT>, 2>,
    gate_up: &Tensor<CubeBackend<R, F, I, BT>, 2>,
) -> Option<linear::MmaShape>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    shape_on_device(x, gate_up, linear::MmaShape::choose_swiglu)
}

/// The launch shape `choose` ([`linear::MmaShape::choose`] or its SwiGLU variant) picks for
/// `x · weightᵀ` on their device's multiprocessors and shared memory.
fn shape_on_device<R, F, I, BT>(
    x: &Tensor<CubeBackend<R, F, I, BT>, 2>,
    weight: &Tensor<CubeBackend<R, F, I, BT>, 2>,
    choose: fn(usize, usize, usize, usize, usize) -> Option<linear::MmaShape>,
) -> Option<linear::MmaShape>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    let [rows, k] = x.dims();
    let client = R::client(&x.device());
    let shared = client.properties().hardware.max_shared_memory_size;
    choose(rows, weight.dims()[0], k, multiprocessors(&client), shared)
}

/// [`linear_tiled`] with an explicit launch shape (benchmarks compare shapes with it); `Err`
/// gives the inputs back when the shape does not [fit](linear::MmaShape::fits) the product or
/// the device lacks `mma.sync` m16n8k16 for the float type.
#[allow(clippy::type_complexity)]
pub fn linear_tiled_with<R, F, I, BT>(
    x: Tensor<CubeBackend<R, F, I, BT>, 2>,
    weight: Tensor<CubeBackend<R, F, I, BT>, 2>,
    shape: linear::MmaShape,
) -> Result<
    Tensor<CubeBackend<R, F, I, BT>, 2>,
    (
        Tensor<CubeBackend<R, F, I, BT>, 2>,
        Tensor<CubeBackend<R, F, I, BT>, 2>,
    ),
>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    tiled_with(x, weight, shape, false)
}

/// `silu(x · gateᵀ) ⊙ (x · upᵀ)` on tensor cores from a fused gate/up weight (its gate rows,
/// then its up rows) with an explicit launch shape, as [`linear_tiled_with`]; the shape needs two
/// feature tiles per plane (a plane's gate and up rows).
#[allow(clippy::type_complexity)]
pub fn gate_up_silu_tiled_with<R, F, I, BT>(
    x: Tensor<CubeBackend<R, F, I, BT>, 2>,
    gate_up: Tensor<CubeBackend<R, F, I, BT>, 2>,
    shape: linear::MmaShape,
) -> Result<
    Tensor<CubeBackend<R, F, I, BT>, 2>,
    (
        Tensor<CubeBackend<R, F, I, BT>, 2>,
        Tensor<CubeBackend<R, F, I, BT>, 2>,
    ),
>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    tiled_with(x, gate_up, shape, true)
}

/// [`launch_tiled`], its k-slices' partial sums added up (with `swiglu`, into the activation).
#[allow(clippy::type_complexity)]
fn tiled_with<R, F, I, BT>(
    x: Tensor<CubeBackend<R, F, I, BT>, 2>,
    weight: Tensor<CubeBackend<R, F, I, BT>, 2>,
    shape: linear::MmaShape,
    swiglu: bool,
) -> Result<
    Tensor<CubeBackend<R, F, I, BT>, 2>,
    (
        Tensor<CubeBackend<R, F, I, BT>, 2>,
        Tensor<CubeBackend<R, F, I, BT>, 2>,
    ),
>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    let n_out = weight.dims()[0];
    let shape_out = [x.dims()[0], if swiglu { n_out / 2 } else { n_out }];
    Ok(float(
        launch_tiled(x, weight, shape, swiglu)?.into_rows::<F>(shape_out, swiglu),
    ))
}

/// What a linear launch leaves for the next launch: its dense `F` rows, or the f32 partial sums
/// of its `splits` k-slices (`[splits, rows · n_out]`) for a launch that adds them up (the split
/// sum, or the residual add and norm).
enum Product<R: CubeRuntime> {
    Rows(CubeTensor<R>),
    Partials(CubeTensor<R>, usize),
}

impl<R: CubeRuntime> Product<R> {
    /// The buffers a linear launch writes, on `like`'s device: with one k-slice `y: [rows, n_out]`
    /// (with `swiglu`, `n_out / 2` wide), with several the f32 `partial: [splits · rows · n_out]`;
    /// the other is a one-element placeholder.
    fn buffers<F: FloatElement>(
        like: &CubeTensor<R>,
        rows: usize,
        n_out: usize,
        splits: usize,
        swiglu: bool,
    ) -> (CubeTensor<R>, CubeTensor<R>) {
        let y_cols = if swiglu { n_out / 2 } else { n_out };
        let y = contiguous::<R, F, _>(like, if splits > 1 { [1, 1] } else { [rows, y_cols] });
        let partial = contiguous::<R, f32, _>(like, [if splits > 1 { splits * rows * n_out } else { 1 }]);
        (y, partial)
    }

    /// What a launch into [`Product::buffers`] left: the one of the two it wrote.
    fn written(y: CubeTensor<R>, partial: CubeTensor<R>, splits: usize) -> Self {
        if splits > 1 {
            Product::Partials(partial, splits)
        } else {
            Product::Rows(y)
        }
    }

    /// The dense `shape` rows: as they are, or the partial sums added up ([`sum_partials`]; with
    /// `swiglu`, into the activation).
    fn into_rows<F: FloatElement>(self, shape: [usize; 2], swiglu: bool) -> CubeTensor<R> {
        match self {
            Product::Rows(y) => y,
            Product::Partials(partial, splits) => sum_partials::<R, F>(&partial, splits, shape, swiglu),
        }
    }
}

/// `x · weightᵀ` on tensor cores for a fused consumer: the dense rows, or a k-sliced launch's
/// partial sums; burn's matmul where the shape does not tile or the device lacks `mma.sync`.
fn tiled_product<R, F, I, BT>(
    x: Tensor<CubeBackend<R, F, I, BT>, 2>,
    weight: Tensor<CubeBackend<R, F, I, BT>, 2>,
) -> Product<R>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    let (x, weight) = (cube(x), cube(weight));
    if let Some(product) = launch_wgmma::<R, F>(&x, &weight, false) {
        return product;
    }
    let (x, weight) = (float::<R, F, I, BT, 2>(x), float(weight));
    let tiled = match mma_shape(&x, &weight) {
        Some(shape) => launch_tiled(x, weight, shape, false),
        None => Err((x, weight)),
    };
    tiled.unwrap_or_else(|(x, w)| Product::Rows(cube(crate::reference::linear(x, w))))
}

/// Launches [`linear::linear_mma()`] with `shape` (with `swiglu`, its SwiGLU variant on a fused
/// gate/up weight: the output is `[rows, n_out / 2]`), or gives the inputs back when the shape
/// does not fit the product, the rows are not 16-byte aligned or the device lacks `mma.sync`
/// m16n8k16 for the float type.
#[allow(clippy::type_complexity)]
fn launch_tiled<R, F, I, BT>(
    x: Tensor<CubeBackend<R, F, I, BT>, 2>,
    weight: Tensor<CubeBackend<R, F, I, BT>, 2>,
    shape: linear::MmaShape,
    swiglu: bool,
) -> Result<
    Product<R>,
    (
        Tensor<CubeBackend<R, F, I, BT>, 2>,
        Tensor<CubeBackend<R, F, I, BT>, 2>,
    ),
>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    let [rows, k] = x.dims();
    let n_out = weight.dims()[0];
    let client = R::client(&x.device());
    // The kernel reads pairs of 2-byte values as the 32-bit words of MMA fragments.
    let usable = has_mma::<R, F>(&client)
        && size_of::<F>() == 2
        && weight.dims()[1] == k
        && shape.fits(rows, n_out, k)
        && (!swiglu || shape.f_tiles == 2)
        && shape.shared_bytes() <= client.properties().hardware.max_shared_memory_size;
    if !usable {
        return Err((x, weight));
    }
    let (x, w) = (cube(x), cube(weight));
    // 16-byte loads need 16-byte aligned rows.
    let aligned = |t: &CubeTensor<R>| t.handle.offset_start.unwrap_or(0).is_multiple_of(16);
    if !aligned(&x) || !aligned(&w) {
        return Err((float(x), float(w)));
    }
    let splits = shape.k_splits;
    let (y, partial) = Product::buffers::<F>(&x, rows, n_out, splits, swiglu);
    let cubes = CubeCount::Static(shape.columns(n_out) as u32, splits as u32, 1);
    // SAFETY: x holds `rows` dense rows of k, W `n_out` dense rows of k, y `rows · n_out` with one
    // split, partial `splits · rows · n_out` with several; `fits` checked that the tiling divides
    // k and n_out.
    unsafe {
        linear::linear_mma::launch_unchecked::<F, R>(
            &client,
            cubes,
            CubeDim::new_2d(32, linear::MMA_PLANES as u32),
            4,
            words(&x),
            words(&w),
            array(&y),
            array(&partial),
            rows,
            n_out,
            k,
            shape.t_tiles,
            shape.f_tiles,
            splits,
            shape.steps,
            shape.stages,
            swiglu,
        );
    }
    Ok(Product::written(y, partial, splits))
}

/// `y = Σ_s partial[s]` ([`linear::linear_split_sum()`]; with `swiglu`, `silu(gate) ⊙ up` of
/// the summed halves) as a dense `shape` tensor.
fn sum_partials<R: CubeRuntime, F: FloatElement>(
    partial: &CubeTensor<R>,
    splits: usize,
    shape: [usize; 2],
    swiglu: bool,
) -> CubeTensor<R> {
    let y = contiguous::<R, F, _>(partial, shape);
    let len = shape[0] * shape[1];
    let (count, dim) = elementwise_grid(len);
    // SAFETY: partial holds `splits · len` values (twice that with `swiglu`), y `len`.
    unsafe {
        linear::linear_split_sum::launch_unchecked::<F, R>(
            &partial.client,
            count,
            dim,
            array(partial),
            array(&y),
            len,
            shape[1],
            splits,
            swiglu,
        );
    }
    y
}

/// `x + delta` and its RMSNorm ([`norm::add_rms_norm_rows()`], summing partial sums on the way).
#[allow(clippy::type_complexity)]
fn add_norm<R, F, I, BT>(
    x: Tensor<CubeBackend<R, F, I, BT>, 2>,
    delta: Product<R>,
    weight: Tensor<CubeBackend<R, F, I, BT>, 1>,
    eps: f64,
) -> (
    Tensor<CubeBackend<R, F, I, BT>, 2>,
    Tensor<CubeBackend<R, F, I, BT>, 2>,
)
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    let [rows, hidden] = x.dims();
    let (x, w) = (cube(x), cube(weight));
    let sum = contiguous::<R, F, _>(&x, [rows, hidden]);
    let y = contiguous::<R, F, _>(&x, [rows, hidden]);
    let (count, dim, planes) = cube_per_row(&x.client, rows, NORM_UNITS);
    // Partial sums take the width of the `F` rows: it sets which units sum which squares, so
    // they round exactly as the separate split sum and norm do. The f32 partials need twice its
    // alignment (fresh buffers have it; a caller's misaligned one is summed separately).
    let width = vector_width(&[&x, &w, &sum, &y], hidden);
    let (delta, splits) = match delta {
        Product::Partials(partial, splits)
            if partial
                .handle
                .offset_start
                .unwrap_or(0)
                .is_multiple_of((width * size_of::<f32>()) as u64) =>
        {
            assert_eq!(partial.dtype, DType::F32, "add_norm: partial sums are f32");
            assert_eq!(
                partial.meta.shape().num_elements(),
                splits * rows * hidden,
                "add_norm: partial sums of {splits} slices of [{rows}, {hidden}]"
            );
            (partial, splits)
        }
        Product::Partials(partial, splits) => {
            (sum_partials::<R, F>(&partial, splits, [rows, hidden], false), 1)
        }
        Product::Rows(delta) => (delta, 1),
    };
    let width = if splits > 1 {
        width
    } else {
        vector_width(&[&x, &delta, &w, &sum, &y], hidden)
    };
    // The two launches differ only in the type of `delta` (`F` rows or f32 partial sums).
    macro_rules! launch_add_rms_norm {
        ($delta_type:ty) => {
            norm::add_rms_norm_rows::launch_unchecked::<F, $delta_type, R>(
                &x.client,
                count,
                dim,
                width,
                array(&x),
                array(&delta),
                array(&w),
                array(&sum),
                array(&y),
                hidden / width,
                rows * hidden / width,
                1.0 / hidden as f32,
                eps as f32,
                splits,
                planes,
            )
        };
    }
    // SAFETY: contiguous buffers of `rows · hidden` (x, sum, y), `splits · rows · hidden` (delta)
    // and `hidden` (w) elements.
    unsafe {
        if splits > 1 {
            launch_add_rms_norm!(f32);
        } else {
            launch_add_rms_norm!(F);
        }
    }
    (float(sum), float(y))
}

/// `x + Σ_s partial[s]` and its RMSNorm, the partial sums of `splits` k-slices given as one f32
/// tensor `[splits · rows · hidden]` — what [`KernelOps::linear_add_rms_norm`] runs after a
/// k-sliced tensor-core linear, here for tests on devices without tensor cores.
#[allow(clippy::type_complexity)]
pub fn add_partials_rms_norm<R, F, I, BT>(
    x: Tensor<CubeBackend<R, F, I, BT>, 2>,
    partial: Tensor<CubeBackend<R, F, I, BT>, 1>,
    splits: usize,
    weight: Tensor<CubeBackend<R, F, I, BT>, 1>,
    eps: f64,
) -> (
    Tensor<CubeBackend<R, F, I, BT>, 2>,
    Tensor<CubeBackend<R, F, I, BT>, 2>,
)
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    add_norm(x, Product::Partials(cube(partial), splits), weight, eps)
}

/// The streaming multiprocessors of the device that holds `t` (64 where the runtime does not
/// say), as the launch shapes count them; benchmarks mark the shape [`linear_tiled`] picks.
pub fn multiprocessors_of<R, F, I, BT, const D: usize>(t: &Tensor<CubeBackend<R, F, I, BT>, D>) -> usize
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    multiprocessors(&R::client(&t.device()))
}

/// The device's streaming multiprocessors (64 where the runtime does not say): launch grids aim
/// for about two cubes on each.
fn multiprocessors<R: CubeRuntime>(client: &ComputeClient<R>) -> usize {
    client
        .properties()
        .hardware
        .num_streaming_multiprocessors
        .unwrap_or(64) as usize
}

/// Whether the device multiplies 16×16×16 tiles of `F` into f32 accumulators with planes of 32
/// (CUDA tensor cores through WMMA; not lavapipe).
fn has_tensor_tiles<R: CubeRuntime, F: FloatElement>(client: &ComputeClient<R>) -> bool {
    let tiles = f32_accumulated::<F>(16, 16, 16);
    client.properties().hardware.plane_size_max == 32 && client.features().matmul.cmma.contains(&tiles)
}

/// Whether the device runs `mma.sync` m16n8k16 on `F` with f32 accumulators and planes of 32,
/// and copies global to shared memory asynchronously (CUDA from sm_80; not lavapipe).
fn has_mma<R: CubeRuntime, F: FloatElement>(client: &ComputeClient<R>) -> bool {
    let mma = f32_accumulated::<F>(16, 8, 16);
    let features = client.features();
    client.properties().hardware.plane_size_max == 32
        && features.matmul.mma.contains(&mma)
        && features.copy_async
}

/// Whether the device loads `F` fragments from shared memory with `ldmatrix` (CUDA from sm_75).
fn has_ldmatrix<R: CubeRuntime, F: FloatElement>(client: &ComputeClient<R>) -> bool {
    let elem = F::as_type_native_unchecked().storage_type();
    client.features().matmul.ldmatrix.contains(&elem)
}

/// An `m × n × k` matrix product of `F` inputs into f32 accumulators.
fn f32_accumulated<F: FloatElement>(m: u32, n: u32, k: u32) -> cubecl::ir::features::MmaConfig {
    let elem = F::as_type_native_unchecked().storage_type();
    cubecl::ir::features::MmaConfig {
        a_type: elem,
        b_type: elem,
        cd_type: f32::as_type_native_unchecked().storage_type(),
        m,
        n,
        k,
    }
}

/// A tensor with a dense last dimension as an array argument spanning its last element.
fn view_array<R: CubeRuntime>(t: &CubeTensor<R>) -> ArrayArg<R> {
    let span = 1 + t
        .meta
        .shape()
        .iter()
        .zip(t.meta.strides().iter())
        .map(|(&n, &s)| (n.max(1) - 1) * s)
        .sum::<usize>();
    // SAFETY: the buffer holds every element the shape and strides address.
    unsafe { ArrayArg::from_raw_parts(t.handle.clone(), span) }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// A new, uninitialised, densely packed tensor of `E` on `like`'s device. (burn's own empty
/// tensors may pitch their rows on CUDA; the kernels write dense rows.)
fn contiguous<R: CubeRuntime, E: CubeElement, const D: usize>(
    like: &CubeTensor<R>,
    shape: [usize; D],
) -> CubeTensor<R> {
    let shape = Shape::new(shape);
    let handle = like.client.empty(shape.num_elements() * size_of::<E>());
    CubeTensor::new_contiguous(
        like.client.clone(),
        like.device.clone(),
        shape,
        handle,
        E::dtype(),
    )
}

/// A contiguous tensor as a kernel array argument of all its elements.
fn array<R: CubeRuntime>(t: &CubeTensor<R>) -> ArrayArg<R> {
    // SAFETY: callers pass contiguous tensors, whose buffer holds exactly `num_elements`.
    unsafe { ArrayArg::from_raw_parts(t.handle.clone(), t.meta.num_elements()) }
}

/// A contiguous tensor of 2-byte floats as an array of 32-bit words (pairs of values).
fn words<R: CubeRuntime>(t: &CubeTensor<R>) -> ArrayArg<R> {
    // SAFETY: callers pass contiguous tensors, whose buffer holds exactly `num_elements`.
    unsafe { ArrayArg::from_raw_parts(t.handle.clone(), t.meta.num_elements() * t.dtype.size() / 4) }
}

/// The widest vector the device loads well that divides `len` (a row length) and keeps every
/// buffer's start aligned.
fn vector_width<R: CubeRuntime>(tensors: &[&CubeTensor<R>], len: usize) -> usize {
    let elem = tensors[0].dtype.size();
    tensors[0]
        .client
        .io_optimized_vector_sizes(elem)
        .find(|&width| {
            len.is_multiple_of(width)
                && tensors.iter().all(|t| {
                    t.handle
                        .offset_start
                        .unwrap_or(0)
                        .is_multiple_of((width * elem) as u64)
                })
        })
        .unwrap_or(1)
}

/// One unit per element: cubes of [`ELEMENTWISE_CUBE`] units, enough for `len`.
fn elementwise_grid(len: usize) -> (CubeCount, CubeDim) {
    (
        CubeCount::Static((len as u32).div_ceil(ELEMENTWISE_CUBE), 1, 1),
        CubeDim::new_1d(ELEMENTWISE_CUBE),
    )
}

/// One cube per row of about `units` units (fewer where the device allows fewer): the grid, the
/// cube and its planes.
fn cube_per_row<R: CubeRuntime>(
    client: &ComputeClient<R>,
    rows: usize,
    units: u32,
) -> (CubeCount, CubeDim, usize) {
    let (dim, planes) = cube_of(client, units);
    (CubeCount::Static(rows as u32, 1, 1), dim, planes)
}

/// A cube of whole planes with about `units` units (at least one plane, at most the device's
/// largest cube), and its plane count.
fn cube_of<R: CubeRuntime>(client: &ComputeClient<R>, units: u32) -> (CubeDim, usize) {
    let hardware = &client.properties().hardware;
    let plane = hardware.plane_size_max;
    let planes = (units.min(hardware.max_units_per_cube) / plane).max(1);
    (CubeDim::new_2d(plane, planes), planes as usize)
}
