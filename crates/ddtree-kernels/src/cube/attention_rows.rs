//! Attention of a block of rows (tree verify, drafter blocks) on CUDA, its main loop written in
//! CUDA C++ ([`ROWS_BODY`], the file `attention_rows.cu` beside this one). The grid,
//! visibility and outputs of [`super::attention_mma::attention_mma()`] without `split_keys`,
//! which it replaces on CUDA for `head_dim` 64 and 128. Reference:
//! [`crate::reference::cached_attention`]; the standalone prototype it follows, with its own f32
//! reference and timings: `tools/tree_attention.cu`.
//!
//! Why beside `attention_mma`: the same design — four warps of 16 queries, 64-key steps on
//! `mma.sync`, the online softmax on the accumulator fragments, each weight as a high and a low
//! 2-byte part — took 30.6 µs per Qwen3-8B verify layer from cubecl's code and 22 µs (with the
//! split combine) written by hand (docs/perf-notes.md, twenty-ninth session). The hand-written
//! loop swizzles the staged rows instead of padding them, waits with `cp.async.wait_group` and one
//! barrier instead of a spinning mbarrier per stage, folds the scale into base-2 exponentials
//! and packs its conversions; cubecl 0.10's IR expresses neither the swizzled `ldmatrix`
//! addresses as immediates nor `wait_group`. As in [`super::wgmma`], cubecl declares the kernel,
//! its buffers and its shared memory; the run-time scalars reach the C++ through the first words
//! of that shared memory.

use cubecl::ir::{Variable, VariableKind};
use cubecl::prelude::*;
use std::fmt::Write;

use super::attention::{CAUSAL, FULL, TREE};

/// The loop's C++ (every unit runs it), after the prologue [`rows_source`] writes.
pub const ROWS_BODY: &str = include_str!("attention_rows.cu");

/// Queries per cube of [`attention_rows()`]: four warps of 16.
pub const ROWS_QUERIES: usize = 64;
/// Keys per step of [`attention_rows()`] (its splits start at multiples of it).
pub const ROWS_KEYS: usize = 64;
/// Units per cube of [`attention_rows()`].
pub const ROWS_UNITS: usize = 128;
/// Words of run-time scalars at the start of the shared memory.
const PARAMS: usize = 16;

/// Whether [`attention_rows()`] takes `head_dim`: its staged rows are whole swizzle patterns
/// (eight 16-byte chunks or more) and its fragments fit the registers.
pub fn rows_head_dim(head_dim: usize) -> bool {
    head_dim == 64 || head_dim == 128
}

/// Shared memory of an [`attention_rows()`] cube for `head_dim` (2-byte floats): the scalars,
/// 256 bytes of alignment, the cube's queries and two stages of [`ROWS_KEYS`] keys and values.
pub fn rows_shared_bytes(head_dim: usize) -> usize {
    let row = 2 * head_dim;
    4 * PARAMS + 256 + ROWS_QUERIES * row + 2 * 2 * ROWS_KEYS * row
}

/// The name cubecl's C++ back end gives a buffer or a shared memory.
fn cpp_name(variable: &Variable) -> String {
    match variable.kind {
        VariableKind::GlobalInputArray(id) | VariableKind::GlobalOutputArray(id) => format!("buffer_{id}"),
        VariableKind::SharedArray { id, .. } => format!("shared_memory_{id}"),
        other => panic!("attention_rows: expected a buffer or a shared memory, got {other:?}"),
    }
}

/// The C++ names of what the loop reads and writes.
pub struct RowsNames {
    /// `q`, `k`, `v`, `bits`, `out`, `part_acc`, `part_ml` (as [`attention_rows()`] takes them).
    pub buffers: [String; 7],
    /// The shared memory, its first words the run-time scalars.
    pub shared: String,
}

/// The loop as it goes into the kernel's comment path: a prologue of its constants and names,
/// then [`ROWS_BODY`] in a block of its own. `mode` is [`CAUSAL`], [`FULL`] or [`TREE`].
pub fn rows_source(
    names: &RowsNames,
    head_dim: usize,
    q_heads: usize,
    group: usize,
    mode: u32,
    bf16: bool,
) -> String {
    assert!(rows_head_dim(head_dim), "attention_rows: head_dim {head_dim}");
    assert!(
        matches!(mode, CAUSAL | FULL | TREE),
        "attention_rows: mode {mode}"
    );
    let [q, k, v, bits, out, part_o, part_ml] = &names.buffers;
    let shared = &names.shared;
    let mut s = String::new();
    // The comment path prints the text between `/*` and `*/`: close it first, reopen it last.
    let _ = write!(
        s,
        "block-row attention (ddtree_kernels::cube::attention_rows)\n*/ {{
constexpr int TA_HEAD_DIM = {head_dim}, TA_GROUP = {group}, TA_Q_HEADS = {q_heads}, TA_MODE = {mode};
constexpr bool TA_BF16 = {bf16};
const unsigned char *ta_q = (const unsigned char *)({q});
const unsigned char *ta_k = (const unsigned char *)({k});
const unsigned char *ta_v = (const unsigned char *)({v});
const unsigned *ta_bits = (const unsigned *)({bits});
unsigned char *ta_out = (unsigned char *)({out});
float *ta_part_o = (float *)({part_o});
float *ta_part_ml = (float *)({part_ml});
const unsigned *ta_par = (const unsigned *)({shared});
const unsigned ta_smem = (unsigned)__cvta_generic_to_shared({shared}) + {params}u;
{ROWS_BODY}}} /* end of the block-row attention",
        params = 4 * PARAMS,
    );
    s
}

/// [`rows_source`] written into the kernel. Its arguments are read at expansion only, hence
/// unused in the host-side function the macro also generates.
#[cube]
#[allow(unused_variables, clippy::too_many_arguments)]
fn rows_loop<F: Float>(
    q: &Array<u32>,
    k: &Array<F>,
    v: &Array<F>,
    bits: &Array<u32>,
    out: &Array<F>,
    part_acc: &Array<f32>,
    part_ml: &Array<f32>,
    shared: &SharedMemory<u32>,
    #[comptime] head_dim: usize,
    #[comptime] q_heads: usize,
    #[comptime] group: usize,
    #[comptime] mode: u32,
    #[comptime] bf16: bool,
) {
    intrinsic!(|scope| {
        let names = RowsNames {
            buffers: [
                cpp_name(&q.expand),
                cpp_name(&k.expand),
                cpp_name(&v.expand),
                cpp_name(&bits.expand),
                cpp_name(&out.expand),
                cpp_name(&part_acc.expand),
                cpp_name(&part_ml.expand),
            ],
            shared: cpp_name(&shared.expand),
        };
        let source = rows_source(&names, head_dim, q_heads, group, mode, bf16);
        cubecl::frontend::cube_comment::expand(scope, &source)
    })
}

/// Attention over the committed prefix plus the block's rows for one KV head, [`ROWS_QUERIES`]
/// of its queries (numbered `j = row · group + head_in_group`) and one split of the keys: the
/// launch grid and outputs of [`super::attention_mma::attention_mma()`] without `split_keys`, and
/// its arguments less `rotation`, `counters` and `splits` (the grid's y), `k`/`v` as arrays of
/// `F`. Launch with `CubeCount =
/// (kv_heads, splits, ⌈rows · group / 64⌉)`, `CubeDim = 128`, `F` bf16 (`bf16`) or f16, `head_dim`
/// 64 or 128, `keys_per_split` a multiple of [`ROWS_KEYS`], every row of `q`, `k` and `v` 16-byte
/// aligned. CUDA on sm_80 and later only.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn attention_rows<F: Float>(
    q: &Array<u32>,
    k: &Array<F>,
    v: &Array<F>,
    bits: &Array<u32>,
    out: &mut Array<F>,
    part_acc: &mut Array<f32>,
    part_ml: &mut Array<f32>,
    head_stride: usize,
    row_stride: usize,
    prefix_len: usize,
    rows: usize,
    words: usize,
    window: usize,
    scale: f32,
    keys_per_split: usize,
    #[comptime] q_heads: usize,
    #[comptime] kv_heads: usize,
    #[comptime] head_dim: usize,
    #[comptime] mode: u32,
    #[comptime] bf16: bool,
) {
    let mut shared = SharedMemory::<u32>::new(comptime!(rows_shared_bytes(head_dim) / 4));
    if UNIT_POS == 0 {
        shared[0] = u32::cast_from(prefix_len);
        shared[1] = u32::cast_from(rows);
        shared[2] = u32::cast_from(words);
        shared[3] = u32::cast_from(window);
        shared[4] = u32::reinterpret(scale);
        shared[5] = u32::cast_from(keys_per_split);
        shared[6] = u32::cast_from(head_stride);
        shared[7] = u32::cast_from(row_stride);
    }
    sync_cube();
    rows_loop::<F>(
        q,
        k,
        v,
        bits,
        out,
        part_acc,
        part_ml,
        &shared,
        head_dim,
        q_heads,
        comptime!(q_heads / kv_heads),
        mode,
        bf16,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> RowsNames {
        RowsNames {
            buffers: std::array::from_fn(|i| format!("buffer_{i}")),
            shared: "shared_memory_0".into(),
        }
    }

    /// The C++ opens and closes the comment path once and names what the kernel declares.
    #[test]
    fn source_fits_the_comment_and_names_its_buffers() {
        let source = rows_source(&names(), 128, 32, 4, TREE, true);
        assert!(source.starts_with("block-row attention"));
        assert!(source.contains("\n*/ {"));
        assert!(source.ends_with("/* end of the block-row attention"));
        assert_eq!(source.matches("*/").count(), 1);
        assert_eq!(source.matches("/*").count(), 1);
        assert!(source.contains("TA_HEAD_DIM = 128, TA_GROUP = 4, TA_Q_HEADS = 32, TA_MODE = 2;"));
        assert!(source.contains("TA_BF16 = true;"));
        assert!(source.contains("(const unsigned char *)(buffer_0)"));
        assert!(source.contains("(float *)(buffer_6)"));
        assert!(source.contains("__cvta_generic_to_shared(shared_memory_0) + 64u"));
        assert!(rows_source(&names(), 64, 24, 6, CAUSAL, false).contains("TA_BF16 = false;"));
    }

    /// The launch shares `attention_mma`'s grid and splits.
    #[test]
    fn grid_is_attention_mma_s() {
        use super::super::attention_mma::{MMA_KEYS, MMA_QUERIES};
        assert_eq!(ROWS_QUERIES, MMA_QUERIES);
        assert_eq!(ROWS_KEYS, MMA_KEYS);
        assert_eq!(ROWS_UNITS, 2 * ROWS_QUERIES);
    }

    /// Two cubes fit a multiprocessor's 227 KB at head_dim 128, and the stages start aligned.
    #[test]
    fn shared_memory_fits_two_cubes() {
        assert!(2 * rows_shared_bytes(128) <= 227 * 1024);
        assert_eq!(rows_shared_bytes(128) % 4, 0);
        assert!(rows_head_dim(64) && rows_head_dim(128));
        assert!(!rows_head_dim(32) && !rows_head_dim(256) && !rows_head_dim(96));
    }
}
