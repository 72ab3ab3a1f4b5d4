// The Qwen3.5/3.6 fixture checks, included by `qwen35_fixtures.rs` (burn's CPU backend) and
// `qwen35_fixtures_wgpu.rs` (the CubeCL kernels on wgpu) with their backend `B`.

use common::{Expected, fixture_dir, path_to, relative_error, to_f32};
use ddtree_qwen::{LoadOptions, Qwen35};
use ddtree_weights::GdnProjectionLayout;

const MODELS: [&str; 3] = ["qwen35-tiny", "qwen35-small-untied", "qwen3next-tiny"];
const TOLERANCE: f32 = 1e-4;

fn load(model: &str, capture_layers: Vec<usize>) -> Qwen35<B> {
    let options = LoadOptions {
        max_context: Some(256),
        capture_layers,
    };
    Qwen35::load_dir(fixture_dir(model), options, &Default::default()).unwrap()
}

/// Asserts `err ≤ TOLERANCE` and reports it (`--nocapture` shows the measured errors).
fn check(what: &str, err: f32) {
    println!("{what}: max relative error {err:.2e}");
    assert!(err <= TOLERANCE, "{what}: relative error {err}");
}

#[test]
fn configs_describe_the_three_layouts() {
    let tiny = load("qwen35-tiny", vec![]);
    let cfg = tiny.config();
    assert_eq!(cfg.full_attention_layers().collect::<Vec<_>>(), [3]);
    assert!(cfg.tie_word_embeddings && cfg.attn_output_gate);
    assert_eq!(cfg.linear_num_value_heads / cfg.linear_num_key_heads, 2);
    let small = load("qwen35-small-untied", vec![]);
    assert_eq!(small.config().full_attention_layers().collect::<Vec<_>>(), [3, 7]);
    assert!(!small.config().tie_word_embeddings);
    let next = load("qwen3next-tiny", vec![]);
    assert_eq!(next.config().gdn_layout, GdnProjectionLayout::FusedGrouped);
}

#[test]
fn prefill_logits_and_hidden_states_match_transformers() {
    for model_name in MODELS {
        let expected = Expected::load(model_name);
        let layers = load(model_name, vec![]).config().num_hidden_layers;
        for i in 0..expected.count("prompt", "input_ids") {
            let mut model = load(model_name, (0..layers).collect());
            let ids = expected.tokens(&format!("prompt{i}.input_ids"));
            let out = model.prefill(&ids).unwrap();
            let logits = to_f32(out.logits);
            let (want, _) = expected.floats(&format!("prompt{i}.logits"));
            check(
                &format!("{model_name} prompt{i} logits"),
                relative_error(&logits, &want),
            );
            // transformers' own f32 forward is ~1e-5 from its float64 one: compare with that too.
            let (exact, _) = expected.floats(&format!("prompt{i}.logits_f64"));
            check(
                &format!("{model_name} prompt{i} logits vs transformers float64"),
                relative_error(&logits, &exact),
            );
            let (final_hidden, _) = expected.floats(&format!("prompt{i}.final_hidden"));
            check(
                &format!("{model_name} prompt{i} final hidden"),
                relative_error(&to_f32(out.hidden), &final_hidden),
            );
            // hidden_states[L + 1] is layer L's output, except the last entry (final norm).
            let (hidden_states, shape) = expected.floats(&format!("prompt{i}.hidden_states"));
            let (t, h) = (shape[1], shape[2]);
            let (last_layer, _) = expected.floats(&format!("prompt{i}.last_layer_prenorm"));
            let features = to_f32(out.features.unwrap());
            let mut worst = 0f32;
            for layer in 0..layers {
                let want: Vec<f32> = if layer + 1 < layers {
                    hidden_states[(layer + 1) * t * h..(layer + 2) * t * h].to_vec()
                } else {
                    last_layer.clone()
                };
                let got: Vec<f32> = (0..t)
                    .flat_map(|row| features[(row * layers + layer) * h..][..h].to_vec())
                    .collect();
                worst = worst.max(relative_error(&got, &want));
            }
            check(&format!("{model_name} prompt{i} every layer's output"), worst);
        }
    }
}

#[test]
fn rotary_frequencies_are_partial_and_match_transformers() {
    for model_name in MODELS {
        let expected = Expected::load(model_name);
        let model = load(model_name, vec![]);
        let cfg = model.config();
        let (inv_freq, scaling) = cfg.rope.inv_freq(cfg.head_dim).unwrap();
        let (want, _) = expected.floats("rope.inv_freq");
        assert!(want.len() < cfg.head_dim / 2, "{model_name}: partial rotary");
        assert!(relative_error(&inv_freq, &want) <= 1e-6, "{model_name}");
        assert_eq!(scaling, 1.0);
    }
}

#[test]
fn chunked_prefill_and_cached_decode_match_transformers() {
    for model_name in MODELS {
        let expected = Expected::load(model_name);
        let ids = expected.tokens("prompt2.input_ids");
        let (full, shape) = expected.floats("prompt2.logits");
        let vocab = shape[1];
        let prefix = expected.ids("decode.prefix_len")[0] as usize;
        let (decoded, _) = expected.floats("decode.logits");

        let mut model = load(model_name, vec![]);
        let split = prefix / 3;
        let first = model.prefill(&ids[..split]).unwrap();
        check(
            &format!("{model_name} first chunk"),
            relative_error(&to_f32(first.logits), &full[..split * vocab]),
        );
        let second = model.prefill(&ids[split..prefix]).unwrap();
        check(
            &format!("{model_name} second chunk"),
            relative_error(&to_f32(second.logits), &full[split * vocab..prefix * vocab]),
        );
        let mut worst = 0f32;
        for (step, &token) in ids[prefix..].iter().enumerate() {
            let got = to_f32(model.decode(token).unwrap().logits);
            worst = worst.max(relative_error(&got, &decoded[step * vocab..(step + 1) * vocab]));
        }
        check(&format!("{model_name} cached decode steps"), worst);
        assert_eq!(model.committed_len(), ids.len());
    }
}

#[test]
fn tree_verify_matches_each_nodes_path_run_by_transformers() {
    for model_name in MODELS {
        let expected = Expected::load(model_name);
        let cases = expected.count("tree", "tree_ids");
        assert!(cases >= 4, "{model_name}: fixture has {cases} trees");
        for j in 0..cases {
            let tree = expected.tree(j);
            let mut model = load(model_name, vec![]);
            model.prefill(&tree.prefix).unwrap();
            let got = to_f32(model.verify(&tree.block()).unwrap().logits);
            let (want, _) = expected.floats(&format!("tree{j}.path_logits"));
            check(
                &format!("{model_name} tree{j} ({} nodes)", tree.tokens.len()),
                relative_error(&got, &want),
            );
        }
    }
}

/// Each recorded tree verified, its deepest path committed (the recurrent state replayed along
/// it, the conv rows and KV rows kept), then two more tokens: the same logits as the prefix and
/// the path run as one sequence (which the checks above hold to transformers).
#[test]
fn committed_tree_path_continues_as_the_sequence() {
    for model_name in MODELS {
        let expected = Expected::load(model_name);
        for j in 0..expected.count("tree", "tree_ids") {
            let tree = expected.tree(j);
            let mut model = load(model_name, vec![]);
            model.prefill(&tree.prefix).unwrap();
            model.verify(&tree.block()).unwrap();
            let deepest = (0..tree.tokens.len()).max_by_key(|&i| (tree.depths[i], i)).unwrap();
            let accepted = path_to(&tree.parents, deepest);
            model.commit(&accepted).unwrap();
            let next = [tree.tokens[0], tree.tokens[deepest]];
            let got = to_f32(model.prefill(&next).unwrap().logits);
            let mut sequence = tree.prefix.clone();
            sequence.extend(accepted.iter().map(|&i| tree.tokens[i]));
            sequence.extend(next);
            let mut reference = load(model_name, vec![]);
            let want = to_f32(reference.prefill(&sequence).unwrap().logits);
            check(
                &format!("{model_name} tree{j}: path {accepted:?} committed, then 2 tokens"),
                relative_error(&got, &want[want.len() - got.len()..]),
            );
        }
    }
}

#[test]
fn greedy_continuations_match_transformers_generate() {
    for model_name in MODELS {
        let expected = Expected::load(model_name);
        let cases = expected.count("greedy", "prompt_ids");
        assert!(cases >= 2, "{model_name}: fixture has {cases} greedy cases");
        for k in 0..cases {
            let prompt = expected.tokens(&format!("greedy{k}.prompt_ids"));
            let want = expected.tokens(&format!("greedy{k}.output_ids"));
            let mut model = load(model_name, vec![]);
            let mut out = model.prefill(&prompt).unwrap();
            let mut generated = Vec::new();
            while generated.len() < want.len() {
                let next = model.argmax_last(&out);
                generated.push(next);
                out = model.decode(next).unwrap();
            }
            assert_eq!(generated, want, "{model_name} greedy{k}");
        }
    }
}
