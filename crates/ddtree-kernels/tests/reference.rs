//! The reference ops against straightforward scalar loops written from the definitions.

use burn_ndarray::NdArray;
use burn_tensor::{Tensor, TensorData};
use ddtree_kernels::{AncestorBits, AttentionContext, KernelOps, Visibility, reference};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type B = NdArray<f64>;

fn random(rng: &mut StdRng, len: usize) -> Vec<f64> {
    (0..len).map(|_| rng.random_range(-1.0..1.0)).collect()
}

fn tensor<const D: usize>(values: &[f64], shape: [usize; D]) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(values.to_vec(), shape), &Default::default())
}

fn values<const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data().to_vec::<f64>().unwrap()
}

fn assert_close(actual: &[f64], expected: &[f64], tol: f64) {
    assert_eq!(actual.len(), expected.len());
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!((a - e).abs() <= tol * (1.0 + e.abs()), "element {i}: {a} vs {e}");
    }
}

#[test]
fn rms_norm_matches_definition() {
    let mut rng = StdRng::seed_from_u64(1);
    let (rows, dim, eps) = (3, 8, 1e-6);
    let x = random(&mut rng, rows * dim);
    let w = random(&mut rng, dim);
    let mut expected = Vec::new();
    for r in 0..rows {
        let row = &x[r * dim..(r + 1) * dim];
        let rms = (row.iter().map(|v| v * v).sum::<f64>() / dim as f64 + eps).sqrt();
        expected.extend(row.iter().zip(&w).map(|(v, w)| v / rms * w));
    }
    let got = values(B::rms_norm(tensor(&x, [rows, dim]), tensor(&w, [dim]), eps));
    assert_close(&got, &expected, 1e-12);
}

#[test]
fn linear_and_silu_mul_match_definition() {
    let mut rng = StdRng::seed_from_u64(2);
    let (rows, inp, out) = (2, 5, 3);
    let x = random(&mut rng, rows * inp);
    let w = random(&mut rng, out * inp);
    let mut expected = vec![0.0; rows * out];
    for r in 0..rows {
        for o in 0..out {
            expected[r * out + o] = (0..inp).map(|i| x[r * inp + i] * w[o * inp + i]).sum();
        }
    }
    let got = values(<B as KernelOps>::linear(
        tensor(&x, [rows, inp]),
        tensor(&w, [out, inp]),
    ));
    assert_close(&got, &expected, 1e-12);

    let gate = random(&mut rng, 6);
    let up = random(&mut rng, 6);
    let expected: Vec<f64> = gate
        .iter()
        .zip(&up)
        .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
        .collect();
    let got = values(B::silu_mul(tensor(&gate, [2, 3]), tensor(&up, [2, 3])));
    assert_close(&got, &expected, 1e-12);
}

#[test]
fn rope_rotates_pairs_i_and_i_plus_half_and_passes_the_rest() {
    let mut rng = StdRng::seed_from_u64(3);
    let (rows, heads, head_dim, half) = (2, 3, 10, 3); // rotary dim 6 of 10: partial
    let x = random(&mut rng, rows * heads * head_dim);
    let angles = random(&mut rng, rows * half);
    let cos: Vec<f64> = angles.iter().map(|a| a.cos()).collect();
    let sin: Vec<f64> = angles.iter().map(|a| a.sin()).collect();
    let mut expected = x.clone();
    for r in 0..rows {
        for h in 0..heads {
            let base = (r * heads + h) * head_dim;
            for i in 0..half {
                let (c, s) = (cos[r * half + i], sin[r * half + i]);
                let (a, b) = (x[base + i], x[base + i + half]);
                expected[base + i] = a * c - b * s;
                expected[base + i + half] = b * c + a * s;
            }
        }
    }
    let got = values(B::rope(
        tensor(&x, [rows, heads, head_dim]),
        tensor(&cos, [rows, half]),
        tensor(&sin, [rows, half]),
    ));
    assert_close(&got, &expected, 1e-12);
}

/// Attention by the definition: per query head, softmax over the visible keys of its kv head.
fn naive_attention(
    q: &[f64],
    keys: &[f64],
    vals: &[f64],
    [n, q_heads, kv_heads, head_dim, capacity]: [usize; 5],
    ctx: &AttentionContext<'_>,
) -> Vec<f64> {
    let group = q_heads / kv_heads;
    let scale = 1.0 / (head_dim as f64).sqrt();
    let mut out = vec![0.0; n * q_heads * head_dim];
    for row in 0..n {
        for h in 0..q_heads {
            let kvh = h / group;
            let qv = &q[(row * q_heads + h) * head_dim..][..head_dim];
            let visible: Vec<usize> = (0..ctx.prefix_len + n).filter(|&k| ctx.sees(row, k)).collect();
            let scores: Vec<f64> = visible
                .iter()
                .map(|&k| {
                    let kv = &keys[(kvh * capacity + k) * head_dim..][..head_dim];
                    qv.iter().zip(kv).map(|(a, b)| a * b).sum::<f64>() * scale
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            for (w, &k) in weights.iter().zip(&visible) {
                let vv = &vals[(kvh * capacity + k) * head_dim..][..head_dim];
                for d in 0..head_dim {
                    out[(row * q_heads + h) * head_dim + d] += w / total * vv[d];
                }
            }
        }
    }
    out
}

#[test]
fn attention_matches_definition_for_causal_full_tree_and_window() {
    let mut rng = StdRng::seed_from_u64(4);
    let (n, q_heads, kv_heads, head_dim, capacity, prefix) = (5, 4, 2, 8, 12, 4);
    let q = random(&mut rng, n * q_heads * head_dim);
    let keys = random(&mut rng, kv_heads * capacity * head_dim);
    let vals = random(&mut rng, kv_heads * capacity * head_dim);
    // Tree: 0 root; 1, 2 children of 0; 3 child of 1; 4 child of 2.
    let words = [0b00001u64, 0b00011, 0b00101, 0b01011, 0b10101];
    let tree = Visibility::Tree(AncestorBits::new(&words, 1).unwrap());
    for (visibility, window) in [
        (Visibility::Causal, None),
        (Visibility::Full, None),
        (tree, None),
        (Visibility::Full, Some(3)),
    ] {
        let ctx = AttentionContext {
            prefix_len: prefix,
            visibility,
            window,
        };
        let expected = naive_attention(&q, &keys, &vals, [n, q_heads, kv_heads, head_dim, capacity], &ctx);
        let got = values(B::cached_attention(
            tensor(&q, [n, q_heads, head_dim]),
            tensor(&keys, [kv_heads, capacity, head_dim]),
            tensor(&vals, [kv_heads, capacity, head_dim]),
            &ctx,
            1.0 / (head_dim as f64).sqrt(),
        ));
        assert_close(&got, &expected, 1e-12);
    }
}

#[test]
fn cache_rows_are_written_and_compacted() {
    let (kv_heads, capacity, head_dim) = (2, 6, 3);
    let cache = tensor(
        &vec![0.0; kv_heads * capacity * head_dim],
        [kv_heads, capacity, head_dim],
    );
    // Rows [n=4, kv_heads, head_dim] with value 100·row + 10·head + d.
    let rows: Vec<f64> = (0..4)
        .flat_map(|r| {
            (0..kv_heads).flat_map(move |h| (0..head_dim).map(move |d| (100 * r + 10 * h + d) as f64))
        })
        .collect();
    let cache = B::write_cache_rows(cache, tensor(&rows, [4, kv_heads, head_dim]), 1);
    let (cache, _) = B::compact_kv_rows(vec![(cache.clone(), cache)], 1, &[0, 2, 3]).remove(0);
    let got = values(cache);
    for h in 0..kv_heads {
        for (slot, source_row) in [(1, 0), (2, 2), (3, 3), (4, 3)] {
            for d in 0..head_dim {
                let expected = (100 * source_row + 10 * h + d) as f64;
                assert_eq!(
                    got[(h * capacity + slot) * head_dim + d],
                    expected,
                    "head {h} slot {slot}"
                );
            }
        }
        assert_eq!(got[(h * capacity) * head_dim], 0.0, "row 0 untouched");
    }
}

#[test]
fn argmax_and_top_k_log_softmax_match_definition() {
    let logits = [
        0.5, 2.0, -1.0, 2.0, 0.0, /* row 2 */ 3.0, 1.0, 4.0, 1.5, -2.0,
    ];
    let ids = B::argmax(tensor(&logits, [2, 5]));
    assert_eq!(
        ids.into_data().to_vec::<i64>().unwrap(),
        vec![1, 2],
        "first maximum on ties"
    );

    let (vals, idx) = B::top_k_log_softmax(tensor(&logits, [2, 5]), 3);
    let vals = values(vals);
    let idx = idx.into_data().to_vec::<i64>().unwrap();
    for r in 0..2 {
        let row = &logits[r * 5..(r + 1) * 5];
        let lse = row.iter().map(|v| v.exp()).sum::<f64>().ln();
        let mut order: Vec<usize> = (0..5).collect();
        order.sort_by(|&a, &b| row[b].partial_cmp(&row[a]).unwrap());
        for k in 0..3 {
            assert!((vals[r * 3 + k] - (row[order[k]] - lse)).abs() < 1e-12);
            assert_eq!(row[idx[r * 3 + k] as usize], row[order[k]]);
        }
    }
}

#[test]
fn gate_norm_and_activation_ops_match_definition() {
    let mut rng = StdRng::seed_from_u64(5);
    let (rows, dim, eps) = (3, 6, 1e-6);
    let x = random(&mut rng, rows * dim);
    let z = random(&mut rng, rows * dim);
    let w = random(&mut rng, dim);
    let sigmoid = |v: f64| 1.0 / (1.0 + (-v).exp());

    let expected: Vec<f64> = x.iter().zip(&z).map(|(x, z)| x * sigmoid(*z)).collect();
    let got = values(B::sigmoid_mul(tensor(&x, [rows, dim]), tensor(&z, [rows, dim])));
    assert_close(&got, &expected, 1e-12);

    let mut l2 = Vec::new();
    let mut gated = Vec::new();
    for r in 0..rows {
        let row = &x[r * dim..(r + 1) * dim];
        let norm = (row.iter().map(|v| v * v).sum::<f64>() + eps).sqrt();
        l2.extend(row.iter().map(|v| v / norm));
        let rms = (row.iter().map(|v| v * v).sum::<f64>() / dim as f64 + eps).sqrt();
        for d in 0..dim {
            let zv = z[r * dim + d];
            gated.push(row[d] / rms * w[d] * zv * sigmoid(zv));
        }
    }
    assert_close(
        &values(reference::l2_norm(tensor(&x, [rows, dim]), eps)),
        &l2,
        1e-12,
    );
    let got = B::gated_rms_norm(
        tensor(&x, [rows, dim]),
        tensor(&z, [rows, dim]),
        0,
        tensor(&w, [dim]),
        eps,
    );
    assert_close(&values(got), &gated, 1e-12);
}

#[test]
fn gdn_gates_match_definition_across_the_softplus_threshold() {
    let mut rng = StdRng::seed_from_u64(6);
    let heads = 4;
    // Row 1 pushes a + dt_bias past 20 (softplus is linear there) and far below 0.
    let mut a = random(&mut rng, heads);
    a.extend([25.0, -30.0, 19.5, 0.0]);
    let b = random(&mut rng, 2 * heads);
    let a_log = random(&mut rng, heads);
    let dt_bias = random(&mut rng, heads);
    let softplus = |v: f64| if v > 20.0 { v } else { v.exp().ln_1p() };
    let mut g = Vec::new();
    let mut beta = Vec::new();
    for r in 0..2 {
        for h in 0..heads {
            g.push(-a_log[h].exp() * softplus(a[r * heads + h] + dt_bias[h]));
            beta.push(1.0 / (1.0 + (-b[r * heads + h]).exp()));
        }
    }
    // The projection's rows as the layer has them: `b`, then `a`.
    let proj = Tensor::cat(vec![tensor(&b, [2, heads]), tensor(&a, [2, heads])], 1);
    let (got_g, got_beta) = B::gdn_gates(proj, 0, tensor(&a_log, [heads]), tensor(&dt_bias, [heads]));
    assert_close(&values(got_g), &g, 1e-12);
    assert_close(&values(got_beta), &beta, 1e-12);
}

#[test]
fn causal_conv1d_matches_definition_over_gathered_windows() {
    let mut rng = StdRng::seed_from_u64(7);
    let (m, channels, kernel) = (7, 5, 4);
    let rows = random(&mut rng, m * channels);
    let weight = random(&mut rng, channels * kernel);
    // Three windows: a contiguous one, one with repeats, one in arbitrary order.
    let windows = [0, 1, 2, 3, 2, 2, 5, 6, 6, 0, 4, 1];
    let n = windows.len() / kernel;
    let mut expected = Vec::new();
    for i in 0..n {
        for c in 0..channels {
            let s: f64 = (0..kernel)
                .map(|j| weight[c * kernel + j] * rows[windows[i * kernel + j] * channels + c])
                .sum();
            expected.push(s / (1.0 + (-s).exp()));
        }
    }
    let got = reference::causal_conv1d(
        tensor(&rows, [m, channels]),
        &windows,
        tensor(&weight, [channels, kernel]),
    );
    assert_close(&values(got), &expected, 1e-12);
}

/// One gated delta rule step by the definition, on a `[Hv, Dk, Dv]` state; returns the output.
#[allow(clippy::too_many_arguments)]
fn naive_delta_step(
    s: &mut [f64],
    q: &[f64],
    k: &[f64],
    v: &[f64],
    g: &[f64],
    beta: &[f64],
    [key_heads, heads, dk, dv]: [usize; 4],
) -> Vec<f64> {
    let mut out = vec![0.0; heads * dv];
    for h in 0..heads {
        let kh = h / (heads / key_heads);
        let (qh, khv) = (&q[kh * dk..][..dk], &k[kh * dk..][..dk]);
        let st = &mut s[h * dk * dv..][..dk * dv];
        st.iter_mut().for_each(|x| *x *= g[h].exp());
        for j in 0..dv {
            let predicted: f64 = (0..dk).map(|i| st[i * dv + j] * khv[i]).sum();
            let delta = beta[h] * (v[h * dv + j] - predicted);
            for i in 0..dk {
                st[i * dv + j] += khv[i] * delta;
            }
            out[h * dv + j] = (0..dk).map(|i| st[i * dv + j] * qh[i]).sum();
        }
    }
    out
}

#[test]
fn gated_delta_rule_gives_every_row_the_state_of_its_own_path() {
    let mut rng = StdRng::seed_from_u64(8);
    let dims @ [key_heads, heads, dk, dv] = [2, 4, 3, 5];
    // A tree with siblings and a second root, and a chain.
    let tree = [-1, 0, 0, 1, 2, 3, -1, 6, 1];
    let chain = [-1, 0, 1, 2, 3];
    for parents in [&tree[..], &chain[..]] {
        let n = parents.len();
        let q = random(&mut rng, n * key_heads * dk);
        let k = random(&mut rng, n * key_heads * dk);
        let v = random(&mut rng, n * heads * dv);
        let g: Vec<f64> = random(&mut rng, n * heads).iter().map(|x| x - 0.5).collect();
        let beta: Vec<f64> = random(&mut rng, n * heads)
            .iter()
            .map(|x| (x + 1.0) / 2.0)
            .collect();
        let state = random(&mut rng, heads * dk * dv);

        let mut states: Vec<Vec<f64>> = Vec::new();
        let mut expected = Vec::new();
        for row in 0..n {
            let mut s = match parents[row] {
                -1 => state.clone(),
                p => states[p as usize].clone(),
            };
            let at = |x: &[f64], w: usize| x[row * w..(row + 1) * w].to_vec();
            expected.extend(naive_delta_step(
                &mut s,
                &at(&q, key_heads * dk),
                &at(&k, key_heads * dk),
                &at(&v, heads * dv),
                &at(&g, heads),
                &at(&beta, heads),
                dims,
            ));
            states.push(s);
        }
        let (out, last) = B::gated_delta_rule(
            tensor(&q, [n, key_heads, dk]),
            tensor(&k, [n, key_heads, dk]),
            tensor(&v, [n, heads, dv]),
            tensor(&g, [n, heads]),
            tensor(&beta, [n, heads]),
            tensor(&state, [heads, dk, dv]),
            parents,
        );
        assert_close(&values(out), &expected, 1e-12);
        assert_close(&values(last), &states[n - 1], 1e-12);
    }
}

#[test]
fn gated_attention_multiplies_by_the_sigmoid_of_each_heads_gate_rows() {
    use ddtree_kernels::nn::{Attention, HeadShape, KvCache, RmsNorm};
    let mut rng = StdRng::seed_from_u64(9);
    let shape = HeadShape {
        heads: 2,
        kv_heads: 1,
        head_dim: 4,
    };
    let (n, width) = (3, 8); // hidden = heads · head_dim (o_proj, not applied here, the identity)
    let device = Default::default();
    let query_w = random(&mut rng, width * width);
    let gate_w = random(&mut rng, width * width);
    let kv_w = random(&mut rng, 2 * 4 * width);
    let x = random(&mut rng, n * width);
    // The checkpoint layout: per head, its query rows then its gate rows.
    let interleaved: Vec<f64> = (0..shape.heads)
        .flat_map(|h| {
            let rows = h * 4 * width..(h + 1) * 4 * width;
            query_w[rows.clone()]
                .iter()
                .chain(&gate_w[rows])
                .copied()
                .collect::<Vec<_>>()
        })
        .collect();
    let identity: Vec<f64> = (0..width * width)
        .map(|i| if i / width == i % width { 1.0 } else { 0.0 })
        .collect();
    let norm = || RmsNorm::new(tensor(&[1.0; 4], [4]), 1e-6);
    let weights = |q: &[f64], rows: usize| {
        [
            tensor(q, [rows, width]),
            tensor(&kv_w[..4 * width], [4, width]),
            tensor(&kv_w[4 * width..], [4, width]),
            tensor(&identity, [width, width]),
        ]
    };
    let cache = || KvCache::<B>::new(1, 8, 4, &device);
    let mut plain = Attention::new(weights(&query_w, width), norm(), norm(), shape, cache());
    let mut gated = Attention::new_gated(weights(&interleaved, 2 * width), norm(), norm(), shape, cache());
    let (cos, sin) = (tensor(&[1.0; 6], [n, 2]), tensor(&[0.0; 6], [n, 2]));
    let ctx = AttentionContext::causal(0);
    let x = tensor(&x, [n, width]);
    let attn = values(plain.attend(x.clone(), cos.clone(), sin.clone(), &ctx, 0));
    let got = values(gated.attend(x.clone(), cos, sin, &ctx, 0));
    let gate = values(<B as KernelOps>::linear(x, tensor(&gate_w, [width, width])));
    let expected: Vec<f64> = attn
        .iter()
        .zip(&gate)
        .map(|(a, g)| a / (1.0 + (-g).exp()))
        .collect();
    assert_close(&got, &expected, 1e-12);
}
