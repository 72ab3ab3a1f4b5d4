// The Qwen3 fixture checks, included by `qwen3_fixtures.rs` (burn's CPU backend) and
// `qwen3_fixtures_wgpu.rs` (the CubeCL kernels on wgpu) with their backend `B`.

use common::{Expected, fixture_dir, relative_error, to_f32};
use ddtree_qwen::{LoadOptions, Qwen3};

const MODELS: [&str; 2] = ["qwen3-tiny-tied", "qwen3-tiny-untied"];
const TOLERANCE: f32 = 1e-4;

fn load(model: &str, capture_layers: Vec<usize>) -> Qwen3<B> {
    let options = LoadOptions {
        max_context: Some(256),
        capture_layers,
    };
    Qwen3::load_dir(fixture_dir(model), options, &Default::default()).unwrap()
}

#[test]
fn prefill_logits_and_hidden_states_match_transformers() {
    for model_name in MODELS {
        let expected = Expected::load(model_name);
        let layers = load(model_name, vec![]).config().num_hidden_layers;
        let prompts = expected.count("prompt", "input_ids");
        assert!(prompts >= 3, "{model_name}: fixture has {prompts} prompts");
        for i in 0..prompts {
            let mut model = load(model_name, (0..layers).collect());
            let ids = expected.tokens(&format!("prompt{i}.input_ids"));
            let out = model.prefill(&ids).unwrap();

            let (want, _) = expected.floats(&format!("prompt{i}.logits"));
            let err = relative_error(&to_f32(out.logits), &want);
            assert!(
                err <= TOLERANCE,
                "{model_name} prompt{i} logits: relative error {err}"
            );

            let (final_hidden, _) = expected.floats(&format!("prompt{i}.final_hidden"));
            let err = relative_error(&to_f32(out.hidden), &final_hidden);
            assert!(
                err <= TOLERANCE,
                "{model_name} prompt{i} final hidden: relative error {err}"
            );

            // hidden_states[L + 1] is layer L's output, except the last entry, which transformers
            // records after the final norm (the raw last layer is `last_layer_prenorm`). Our
            // features are the layers' outputs concatenated along the hidden dim.
            let (hidden_states, shape) = expected.floats(&format!("prompt{i}.hidden_states"));
            let (t, h) = (shape[1], shape[2]);
            let (last_layer, _) = expected.floats(&format!("prompt{i}.last_layer_prenorm"));
            let features = to_f32(out.features.unwrap());
            for layer in 0..layers {
                let want: Vec<f32> = if layer + 1 < layers {
                    hidden_states[(layer + 1) * t * h..(layer + 2) * t * h].to_vec()
                } else {
                    last_layer.clone()
                };
                let got: Vec<f32> = (0..t)
                    .flat_map(|row| features[(row * layers + layer) * h..][..h].to_vec())
                    .collect();
                let err = relative_error(&got, &want);
                assert!(
                    err <= TOLERANCE,
                    "{model_name} prompt{i} layer {layer}: relative error {err}"
                );
            }
        }
    }
}

#[test]
fn rotary_frequencies_match_transformers() {
    for model_name in MODELS {
        let expected = Expected::load(model_name);
        let model = load(model_name, vec![]);
        let cfg = model.config();
        let (inv_freq, scaling) = cfg.rope.inv_freq(cfg.head_dim).unwrap();
        let (want, _) = expected.floats("rope.inv_freq");
        let err = relative_error(&inv_freq, &want);
        assert!(err <= 1e-6, "{model_name}: inv_freq relative error {err}");
        let json: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(fixture_dir(model_name).join("expected.json")).unwrap(),
        )
        .unwrap();
        let want_scaling = json["rope"]["attention_scaling"]
            .as_f64()
            .expect("rope.attention_scaling recorded");
        assert!(
            (scaling as f64 - want_scaling).abs() < 1e-6,
            "{model_name}: {scaling} vs {want_scaling}"
        );
    }
}

#[test]
fn chunked_prefill_and_decode_match_the_full_forward() {
    for model_name in MODELS {
        let expected = Expected::load(model_name);
        let ids = expected.tokens("prompt2.input_ids");
        let (want, shape) = expected.floats("prompt2.logits");
        let vocab = shape[1];
        let mut model = load(model_name, vec![]);
        let split = ids.len() / 3;
        let first = model.prefill(&ids[..split]).unwrap();
        let err = relative_error(&to_f32(first.logits), &want[..split * vocab]);
        assert!(err <= TOLERANCE, "{model_name} first chunk: {err}");
        let second = model.prefill(&ids[split..ids.len() - 1]).unwrap();
        let err = relative_error(
            &to_f32(second.logits),
            &want[split * vocab..(ids.len() - 1) * vocab],
        );
        assert!(err <= TOLERANCE, "{model_name} second chunk: {err}");
        let last = model.decode(ids[ids.len() - 1]).unwrap();
        let err = relative_error(&to_f32(last.logits), &want[(ids.len() - 1) * vocab..]);
        assert!(err <= TOLERANCE, "{model_name} decode: {err}");
        assert_eq!(model.committed_len(), ids.len());
    }
}

#[test]
fn tree_verify_matches_transformers_masked_forward() {
    for model_name in MODELS {
        let expected = Expected::load(model_name);
        let cases = expected.count("tree", "tree_ids");
        assert!(cases >= 3, "{model_name}: fixture has {cases} trees");
        for j in 0..cases {
            let tree = expected.tree(j);
            let mut model = load(model_name, vec![]);
            model.prefill(&tree.prefix).unwrap();
            let got = to_f32(model.verify(&tree.block()).unwrap().logits);
            let (want, _) = expected.floats(&format!("tree{j}.logits"));
            let err = relative_error(&got, &want);
            assert!(err <= TOLERANCE, "{model_name} tree{j}: relative error {err}");
            let (path, _) = expected.floats(&format!("tree{j}.path_logits"));
            let err = relative_error(&got, &path);
            assert!(
                err <= TOLERANCE,
                "{model_name} tree{j} vs path forwards: relative error {err}"
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
