//! The CubeCL top-k log-softmax kernels against the plain-burn reference, on cubecl's wgpu
//! runtime (lavapipe in CI). The reference runs on the CPU backend in f32 from the same inputs
//! (rounded to f16 for the f16 backend). Ids must also follow the kernel's tie rule exactly
//! (equal values: the lower column first), checked against a host sort. A kernel that did not
//! run leaves zeros or garbage, so every case compares values.
#![cfg(feature = "wgpu")]

use burn_cubecl::CubeBackend;
use burn_cubecl::element::FloatElement;
use burn_ndarray::NdArray;
use burn_tensor::backend::Backend;
use burn_tensor::{Int, Tensor, TensorData, TensorPrimitive};
use burn_wgpu::{WgpuDevice, WgpuRuntime};
use ddtree_kernels::cube::top_k::top_k_log_softmax;
use ddtree_kernels::{KernelOps, host_f32, host_ids};
use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type Cpu = NdArray<f32>;

fn values(seed: u64, len: usize, scale: f32) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.random_range(-scale..scale)).collect()
}

fn tensor<B: Backend>(data: &[f32], shape: [usize; 2], device: &B::Device) -> Tensor<B, 2> {
    Tensor::from_data(TensorData::new(data.to_vec(), shape), device)
}

/// The kernel on `CubeBackend<WgpuRuntime, F, i32, u32>`: (values as f32, ids).
fn gpu_top_k<F: FloatElement>(logits: &[f32], rows: usize, cols: usize, k: usize) -> (Vec<f32>, Vec<u32>) {
    type B<F> = CubeBackend<WgpuRuntime, F, i32, u32>;
    // burn 0.21 creates float tensors in the device's default dtype (f32), whatever the backend's
    // `F`: ask for `F` explicitly.
    let data = TensorData::new(logits.to_vec(), [rows, cols]);
    let x = Tensor::<B<F>, 2>::from_data(data, (&WgpuDevice::default(), F::dtype()));
    assert_eq!(x.dtype(), F::dtype());
    let (v, i) = top_k_log_softmax::<WgpuRuntime, F, i32>(x.into_primitive().tensor(), k);
    let v: Tensor<B<F>, 2> = Tensor::from_primitive(TensorPrimitive::Float(v));
    let i: Tensor<B<F>, 2, Int> = Tensor::from_primitive(i);
    assert_eq!(v.dims(), [rows, k]);
    assert_eq!(i.dims(), [rows, k]);
    (host_f32(v), host_ids(i))
}

/// Each row's `k` best columns: larger value first, lower column first among equal values.
fn sorted_ids(logits: &[f32], rows: usize, cols: usize, k: usize) -> Vec<u32> {
    let mut out = Vec::with_capacity(rows * k);
    for row in logits.chunks(cols).take(rows) {
        let mut ids: Vec<u32> = (0..cols as u32).collect();
        ids.sort_by(|&a, &b| {
            let (va, vb) = (row[a as usize], row[b as usize]);
            vb.partial_cmp(&va).expect("no NaN in the tests").then(a.cmp(&b))
        });
        out.extend_from_slice(&ids[..k]);
    }
    out
}

/// Compares the kernel with the reference for one backend's inputs (already rounded to its
/// float type): values within `tol` of the largest |value|, ids equal to the reference wherever
/// its values are not tied (one extra reference column shows ties at the k-th place) and equal
/// to the host sort everywhere.
fn check(
    case: &str,
    logits: &[f32],
    rows: usize,
    cols: usize,
    k: usize,
    got: (Vec<f32>, Vec<u32>),
    tol: f32,
) {
    let (got_v, got_i) = got;
    let k_ref = (k + 1).min(cols);
    let (want_v, want_i) = Cpu::top_k_log_softmax(tensor(logits, [rows, cols], &Default::default()), k_ref);
    let (want_v, want_i) = (host_f32(want_v), host_ids(want_i));
    let scale = want_v.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    for row in 0..rows {
        let want_v = &want_v[row * k_ref..(row + 1) * k_ref];
        let want_i = &want_i[row * k_ref..(row + 1) * k_ref];
        let got_v = &got_v[row * k..(row + 1) * k];
        let got_i = &got_i[row * k..(row + 1) * k];
        for j in 0..k {
            let err = (got_v[j] - want_v[j]).abs() / scale;
            assert!(
                err <= tol,
                "{case}: row {row} place {j}: value {} vs reference {} (relative error {err})",
                got_v[j],
                want_v[j]
            );
            let tied = (j > 0 && want_v[j - 1] == want_v[j]) || (j + 1 < k_ref && want_v[j + 1] == want_v[j]);
            if !tied {
                assert_eq!(got_i[j], want_i[j], "{case}: row {row} place {j}: id");
            }
        }
    }
    assert_eq!(
        got_i,
        sorted_ids(logits, rows, cols, k),
        "{case}: ids against the host sort"
    );
}

/// Runs one case on f32 and on f16.
fn check_both(case: &str, logits: &[f32], rows: usize, cols: usize, k: usize) {
    check(
        &format!("f32 {case}"),
        logits,
        rows,
        cols,
        k,
        gpu_top_k::<f32>(logits, rows, cols, k),
        1e-5,
    );
    let rounded: Vec<f32> = logits.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
    check(
        &format!("f16 {case}"),
        &rounded,
        rows,
        cols,
        k,
        gpu_top_k::<f16>(&rounded, rows, cols, k),
        4e-3,
    );
}

/// Random logits: one chunk, two chunks with a short tail, ten chunks at the drafter's k, and k
/// close to the row length (most of the candidates are padding).
#[test]
fn top_k_matches_reference() {
    for (rows, cols, k) in [
        (1, 1000, 1),
        (3, 5000, 8),
        (15, 40000, 64),
        (2, 300, 256),
        (1, 37, 37),
    ] {
        let logits = values(rows as u64 * 31 + k as u64, rows * cols, 8.0);
        check_both(&format!("[{rows}, {cols}] k={k}"), &logits, rows, cols, k);
    }
}

/// Rows that stress the ordering and the normaliser: a maximum in the last column, many equal
/// values (the lower column first, within a chunk and across chunks), very negative logits,
/// equal logits of different sign of zero, and a row whose 16 best columns are all one unit's
/// (stage 1's units hold columns `unit + 256·j` of a 4096-column chunk), so that unit runs out
/// of columns before the `k` rounds end.
#[test]
fn top_k_edge_rows() {
    let (rows, cols, k) = (6, 9000, 24);
    let mut logits = values(77, rows * cols, 4.0);
    // Row 0: the maximum in the last column (in the third, short chunk).
    logits[cols - 1] = 12.0;
    logits[cols - 2] = 11.0;
    // Row 1: everything equal but a few larger values, two of them tied across chunks.
    let row1 = &mut logits[cols..2 * cols];
    row1.fill(-1.0);
    row1[8000] = 3.0;
    row1[4100] = 2.0;
    row1[7] = 2.0;
    row1[4095] = 2.0;
    row1[4096] = 0.5;
    // Row 2: very negative logits around −1e4, some exactly −1e4.
    let row2 = &mut logits[2 * cols..3 * cols];
    for (c, v) in row2.iter_mut().enumerate() {
        *v = if c % 97 == 0 { -1e4 } else { -1e4 - v.abs() };
    }
    // Row 3: all equal (the first k columns win).
    logits[3 * cols..4 * cols].fill(0.25);
    // Row 4: zeros of both signs tie (lower column first), below a few positive values.
    let row4 = &mut logits[4 * cols..5 * cols];
    row4.fill(-3.0);
    for c in (0..cols).step_by(500) {
        row4[c] = if c % 1000 == 0 { -0.0 } else { 0.0 };
    }
    row4[4321] = 1.0;
    // Row 5: unit 5's sixteen columns first, then the one other value above the rest.
    let row5 = &mut logits[5 * cols..6 * cols];
    row5.fill(-2.0);
    let unit5: Vec<u32> = (0..16).map(|j| 5 + 256 * j).collect();
    for (j, &c) in unit5.iter().enumerate() {
        row5[c as usize] = 6.0 - 0.25 * j as f32;
    }
    row5[100] = 1.0;
    check_both("edge rows", &logits, rows, cols, k);
    let (_, ids) = gpu_top_k::<f32>(&logits, rows, cols, k);
    assert_eq!(
        &ids[..2],
        &[cols as u32 - 1, cols as u32 - 2],
        "row 0: the last columns"
    );
    assert_eq!(
        &ids[k..k + 6],
        &[8000, 7, 4095, 4100, 4096, 0],
        "row 1: ties by column"
    );
    assert_eq!(
        &ids[3 * k..4 * k],
        &(0..k as u32).collect::<Vec<_>>(),
        "row 3: all equal"
    );
    assert_eq!(&ids[4 * k..4 * k + 3], &[4321, 0, 500], "row 4: ±0 tie by column");
    let mut row5 = unit5;
    row5.extend([100, 0, 1]);
    assert_eq!(
        &ids[5 * k..5 * k + 19],
        &row5[..],
        "row 5: one unit's columns, then the others"
    );
}

/// More chunks than a cube has units (> 2²⁰ columns): stage 2 merges several lists per unit.
/// The best values sit in the last chunks, with a tie between chunk 0 and chunk 256, which the
/// same unit merges.
#[test]
fn top_k_many_chunks() {
    let (rows, cols, k) = (1, 1_050_000, 6);
    let mut logits = values(5, rows * cols, 3.0);
    logits[cols - 1] = 9.0;
    logits[1_048_577] = 8.0;
    logits[3] = 7.5;
    logits[256 * 4096 + 3] = 7.5;
    check_both("many chunks", &logits, rows, cols, k);
    let (_, ids) = gpu_top_k::<f32>(&logits, rows, cols, k);
    assert_eq!(&ids[..4], &[cols as u32 - 1, 1_048_577, 3, 256 * 4096 + 3]);
}
