//! The fixture chat template renders exactly what Hugging Face `apply_chat_template` rendered
//! (fixtures/tokenizer/chat_template_goldens.json, recorded with transformers), tokenizes to the
//! recorded ids, and rejects the recorded error cases with a 400.

use ddtree_server::model::{ModelSource, load_tokenizer};
use ddtree_server::validate::{Limits, chat_request};
use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = format!("{}/../../fixtures/tokenizer/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn limits() -> Limits {
    Limits {
        served_model: "m".into(),
        accept_any_model: false,
        max_tree_budget: 64,
        vocab_size: 1024,
        block_size: 16,
        strict: false,
    }
}

fn source() -> ModelSource {
    ModelSource {
        target: format!("{}/../../fixtures/tokenizer", env!("CARGO_MANIFEST_DIR")).into(),
        ..ModelSource::demo()
    }
}

/// The request body a client would send for a golden case.
fn body(case: &Value) -> serde_json::Map<String, Value> {
    let mut body = json!({
        "messages": case["messages"],
        "add_generation_prompt": case["add_generation_prompt"],
    });
    if let Some(t) = case.get("enable_thinking") {
        body["chat_template_kwargs"] = json!({ "enable_thinking": t });
    }
    body.as_object().unwrap().clone()
}

#[test]
fn renders_match_transformers_byte_for_byte() {
    let (tokenizer, template, _) = load_tokenizer(&source()).unwrap();
    let template = template.expect("the fixture has a chat template");
    let goldens = fixture("chat_template_goldens.json");
    let cases = goldens.as_array().unwrap();
    assert_eq!(cases.len(), 13);
    for (i, case) in cases.iter().enumerate() {
        let request = chat_request(&body(case), &limits()).unwrap_or_else(|e| panic!("case {i}: {e}"));
        let rendered = template
            .render(
                &request.messages,
                request.add_generation_prompt,
                &request.template_kwargs,
            )
            .unwrap_or_else(|e| panic!("case {i}: {e}"));
        assert_eq!(rendered, case["rendered"].as_str().unwrap(), "case {i}");
        let ids: Vec<u64> = tokenizer
            .encode(rendered.as_str(), false)
            .unwrap()
            .get_ids()
            .iter()
            .map(|&t| u64::from(t))
            .collect();
        let expected: Vec<u64> = case["token_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(ids, expected, "case {i}");
    }
}

#[test]
fn template_errors_are_400s_with_the_template_message() {
    let (_, template, _) = load_tokenizer(&source()).unwrap();
    let template = template.unwrap();
    let errors = fixture("chat_template_errors.json");
    let cases = errors.as_array().unwrap();
    assert_eq!(cases.len(), 2);
    for case in cases {
        let request = chat_request(&body(case), &limits()).unwrap();
        let e = template
            .render(
                &request.messages,
                request.add_generation_prompt,
                &request.template_kwargs,
            )
            .unwrap_err();
        assert_eq!(e.status.as_u16(), 400);
        assert_eq!(e.code, "template_error");
        let want = case["error_contains"].as_str().unwrap();
        assert!(
            e.message.contains(want),
            "{:?} does not contain {want:?}",
            e.message
        );
    }
}
