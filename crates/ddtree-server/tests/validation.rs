//! Request validation: every bad input of serving-anchors.md §6.3 that is decided from the body
//! alone gives a 400 naming the field with a string code; good bodies parse to what they say.

use ddtree_server::validate::{ChatRequest, Limits};
use ddtree_server::validate::{ModeRequest, Prompt, chat_request, completion_request, parse_object};
use serde_json::{Value, json};

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

fn chat(extra: Value) -> Result<ChatRequest, ddtree_server::error::ApiError> {
    let mut body = json!({"messages": [{"role": "user", "content": "hi"}]});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    chat_request(body.as_object().unwrap(), &limits())
}

fn rejects(extra: Value, code: &str, param: &str) {
    let e = chat(extra.clone()).expect_err(&format!("{extra} must be rejected"));
    assert_eq!(e.status.as_u16(), 400, "{extra}");
    assert_eq!(e.code, code, "{extra}: {e}");
    assert_eq!(e.param.as_deref(), Some(param), "{extra}: {e}");
    assert!(!e.message.is_empty());
}

#[test]
fn bodies_that_are_not_json_objects() {
    for (raw, code) in [
        (&b"{"[..], "invalid_json"),
        (b"", "invalid_json"),
        (b"[]", "invalid_body"),
        (b"\"s\"", "invalid_body"),
        (b"1", "invalid_body"),
        (b"null", "invalid_body"),
        (b"{\"a\":1e999}", "invalid_json"),
    ] {
        let e = parse_object(raw).unwrap_err();
        assert_eq!((e.status.as_u16(), e.code), (400, code), "{raw:?}");
    }
    assert!(parse_object(b"{}").unwrap().is_empty());
}

#[test]
fn messages_and_content() {
    let bad = |messages: Value, code: &str, param: &str| {
        let e = chat_request(json!({ "messages": messages }).as_object().unwrap(), &limits()).unwrap_err();
        assert_eq!(
            (e.code, e.param.as_deref()),
            (code, Some(param)),
            "{messages}: {e}"
        );
    };
    let e = chat_request(json!({}).as_object().unwrap(), &limits()).unwrap_err();
    assert_eq!(
        (e.code, e.param.as_deref()),
        ("missing_required_parameter", Some("messages"))
    );
    bad(json!(null), "missing_required_parameter", "messages");
    bad(json!("hi"), "invalid_type", "messages");
    bad(json!([]), "invalid_value", "messages");
    bad(json!([1]), "invalid_type", "messages[0]");
    bad(
        json!([{"content": "x"}]),
        "missing_required_parameter",
        "messages[0].role",
    );
    bad(
        json!([{"role": true, "content": "x"}]),
        "invalid_type",
        "messages[0].role",
    );
    bad(
        json!([{"role": "robot", "content": "x"}]),
        "invalid_value",
        "messages[0].role",
    );
    bad(
        json!([{"role": "user"}]),
        "missing_required_parameter",
        "messages[0].content",
    );
    bad(
        json!([{"role": "user", "content": 3}]),
        "invalid_type",
        "messages[0].content",
    );
    bad(
        json!([{"role": "user", "content": [{"type": "text"}]}]),
        "missing_required_parameter",
        "messages[0].content[0].text",
    );
    bad(
        json!([{"role": "user", "content": [{"type": "x", "text": "a"}]}]),
        "invalid_value",
        "messages[0].content[0].type",
    );
    bad(
        json!([{"role": "user", "content": [{"type": "input_audio"}]}]),
        "unsupported_parameter",
        "messages[0].content[0].type",
    );
    bad(
        json!([{"role": "user", "content": "a", "reasoning": "r"}]),
        "invalid_value",
        "messages[0].reasoning",
    );
    bad(
        json!([{"role": "assistant", "content": "a", "tool_calls": [{"id": "1"}]}]),
        "unsupported_parameter",
        "messages[0].tool_calls",
    );

    let ok = chat_request(
        json!({"messages": [
            {"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": null, "reasoning": "r"},
        ]})
        .as_object()
        .unwrap(),
        &limits(),
    )
    .unwrap();
    assert_eq!(ok.messages[0].content.as_deref(), Some("a\nb"));
    assert_eq!(ok.messages[1].content, None);
    assert_eq!(ok.messages[1].reasoning_content.as_deref(), Some("r"));
    assert!(ok.add_generation_prompt && ok.separate_reasoning);
}

#[test]
fn token_limits() {
    rejects(json!({"max_tokens": 1.5}), "invalid_type", "max_tokens");
    rejects(json!({"max_tokens": "3"}), "invalid_type", "max_tokens");
    rejects(json!({"max_tokens": 0}), "invalid_value", "max_tokens");
    rejects(
        json!({"max_completion_tokens": -1}),
        "invalid_value",
        "max_completion_tokens",
    );
    rejects(
        json!({"max_tokens": 3, "max_completion_tokens": 4}),
        "invalid_value",
        "max_completion_tokens",
    );
    assert_eq!(
        chat(json!({"max_tokens": 3, "max_completion_tokens": 3}))
            .unwrap()
            .common
            .max_tokens,
        Some(3)
    );
    assert_eq!(
        chat(json!({"max_completion_tokens": 9}))
            .unwrap()
            .common
            .max_tokens,
        Some(9)
    );
    assert_eq!(chat(json!({})).unwrap().common.max_tokens, None);
}

#[test]
fn sampling_ranges() {
    for t in [-0.01, 2.01, 100.0] {
        rejects(json!({ "temperature": t }), "invalid_value", "temperature");
    }
    rejects(json!({"temperature": "1"}), "invalid_type", "temperature");
    for p in [0.0, -0.5, 1.01] {
        rejects(json!({ "top_p": p }), "invalid_value", "top_p");
    }
    rejects(json!({"top_k": -2}), "invalid_value", "top_k");
    rejects(json!({"top_k": 2.5}), "invalid_type", "top_k");
    rejects(json!({"min_p": 1.5}), "invalid_value", "min_p");
    rejects(json!({"min_p": 0.05}), "unsupported_parameter", "min_p");
    rejects(
        json!({"presence_penalty": -2.5}),
        "invalid_value",
        "presence_penalty",
    );
    rejects(
        json!({"frequency_penalty": 1}),
        "unsupported_parameter",
        "frequency_penalty",
    );
    rejects(
        json!({"repetition_penalty": 1.1}),
        "unsupported_parameter",
        "repetition_penalty",
    );
    rejects(json!({"seed": "1"}), "invalid_type", "seed");
    rejects(json!({"seed": 1.5}), "invalid_value", "seed");
    let e = chat_request(
        &parse_object(br#"{"messages":[{"role":"user","content":"x"}],"seed":18446744073709551616}"#)
            .unwrap(),
        &limits(),
    )
    .unwrap_err();
    assert_eq!((e.code, e.param.as_deref()), ("invalid_value", Some("seed")));
    let r = chat(json!({"temperature": 2, "top_p": 1, "top_k": -1, "seed": -1, "min_p": 0})).unwrap();
    assert_eq!(
        (r.common.temperature, r.common.top_p, r.common.top_k),
        (Some(2.0), Some(1.0), Some(0))
    );
    assert_eq!(r.common.seed, Some(u64::MAX));
    assert_eq!(
        chat(json!({"seed": u64::MAX})).unwrap().common.seed,
        Some(u64::MAX)
    );
}

#[test]
fn choices_stops_and_streaming() {
    rejects(json!({"n": 0}), "invalid_value", "n");
    rejects(json!({"n": 3}), "unsupported_parameter", "n");
    rejects(json!({"stop": 1}), "invalid_type", "stop");
    rejects(json!({"stop": [null]}), "invalid_type", "stop[0]");
    rejects(json!({"stop": ["a", ""]}), "invalid_value", "stop");
    rejects(json!({"stop": vec!["x"; 17]}), "invalid_value", "stop");
    rejects(
        json!({"stop_token_ids": [1024]}),
        "invalid_value",
        "stop_token_ids[0]",
    );
    rejects(
        json!({"stop_token_ids": [-1]}),
        "invalid_value",
        "stop_token_ids[0]",
    );
    rejects(json!({"stop_token_ids": 5}), "invalid_type", "stop_token_ids");
    let e = chat(json!({"stop_token_ids": [5000]})).unwrap_err();
    assert!(e.message.contains("1024"), "{}", e.message);
    rejects(json!({"stream": 1}), "invalid_type", "stream");
    rejects(
        json!({"stream_options": {"include_usage": true}}),
        "invalid_value",
        "stream_options",
    );
    rejects(
        json!({"stream": false, "stream_options": {}}),
        "invalid_value",
        "stream_options",
    );
    rejects(
        json!({"stream": true, "stream_options": {"include_usage": "y"}}),
        "invalid_type",
        "stream_options.include_usage",
    );
    rejects(
        json!({"stream": true, "stream_options": 3}),
        "invalid_type",
        "stream_options",
    );
    let r = chat(json!({"stream": true, "stream_options": {"include_usage": true}, "stop": "END"})).unwrap();
    assert!(r.common.stream && r.common.include_usage);
    assert_eq!(r.common.stop, ["END"]);
}

#[test]
fn unsupported_features() {
    rejects(json!({"logprobs": true}), "unsupported_parameter", "logprobs");
    rejects(
        json!({"top_logprobs": 2}),
        "unsupported_parameter",
        "top_logprobs",
    );
    rejects(
        json!({"logit_bias": {"5": 1}}),
        "unsupported_parameter",
        "logit_bias",
    );
    rejects(
        json!({"response_format": {"type": "json_schema"}}),
        "unsupported_parameter",
        "response_format",
    );
    rejects(
        json!({"tools": [{"type": "function"}]}),
        "unsupported_parameter",
        "tools",
    );
    rejects(
        json!({"tool_choice": {"type": "function"}}),
        "unsupported_parameter",
        "tool_choice",
    );
    assert!(chat(json!({"logprobs": false, "tools": [], "tool_choice": "none", "response_format": {"type": "text"}})).is_ok());
}

#[test]
fn template_kwargs_and_reasoning_effort() {
    rejects(
        json!({"chat_template_kwargs": "x"}),
        "invalid_type",
        "chat_template_kwargs",
    );
    rejects(
        json!({"chat_template_kwargs": {"enable_thinking": 0}}),
        "invalid_type",
        "chat_template_kwargs.enable_thinking",
    );
    rejects(
        json!({"reasoning_effort": "max"}),
        "invalid_value",
        "reasoning_effort",
    );
    rejects(
        json!({"reasoning_effort": "none", "chat_template_kwargs": {"enable_thinking": true}}),
        "invalid_value",
        "reasoning_effort",
    );
    let r = chat(json!({"reasoning_effort": "none"})).unwrap();
    assert_eq!(r.template_kwargs["enable_thinking"], json!(false));
    let r = chat(
        json!({"chat_template_kwargs": {"enable_thinking": true, "x": [1]}, "add_generation_prompt": false}),
    )
    .unwrap();
    assert_eq!(r.template_kwargs["x"], json!([1]));
    assert!(!r.add_generation_prompt);
}

#[test]
fn ddtree_extensions() {
    for b in [json!(-1), json!(65), json!(1.5), json!("tree"), json!(true)] {
        rejects(json!({ "tree_budget": b }), "invalid_value", "tree_budget");
    }
    rejects(json!({"block_size": 8}), "invalid_value", "block_size");
    assert_eq!(
        chat(json!({"tree_budget": 0})).unwrap().common.mode,
        Some(ModeRequest::Tree(0))
    );
    assert_eq!(
        chat(json!({"tree_budget": 64})).unwrap().common.mode,
        Some(ModeRequest::Tree(64))
    );
    assert_eq!(
        chat(json!({"tree_budget": "chain"})).unwrap().common.mode,
        Some(ModeRequest::Chain)
    );
    assert!(
        chat(json!({"block_size": 16, "ignore_eos": true}))
            .unwrap()
            .common
            .ignore_eos
    );
}

#[test]
fn unknown_fields_are_collected_or_rejected_in_strict_mode() {
    let r = chat(json!({"user": "u", "vendor_x": 1})).unwrap();
    assert_eq!(r.common.unknown, ["vendor_x"]);
    let strict = Limits {
        strict: true,
        ..limits()
    };
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "vendor_x": 1});
    let e = chat_request(body.as_object().unwrap(), &strict).unwrap_err();
    assert_eq!(
        (e.code, e.param.as_deref()),
        ("unknown_parameter", Some("vendor_x"))
    );
    rejects(json!({"model": 5}), "invalid_type", "model");
}

#[test]
fn completion_prompts() {
    let parse = |v: Value| completion_request(v.as_object().unwrap(), &limits());
    assert_eq!(
        parse(json!({"prompt": "abc"})).unwrap().prompt,
        Prompt::Text("abc".into())
    );
    assert_eq!(
        parse(json!({"prompt": ["abc"]})).unwrap().prompt,
        Prompt::Text("abc".into())
    );
    assert_eq!(
        parse(json!({"prompt": [1, 2]})).unwrap().prompt,
        Prompt::Tokens(vec![1, 2])
    );
    assert_eq!(
        parse(json!({"prompt": [[1, 2]]})).unwrap().prompt,
        Prompt::Tokens(vec![1, 2])
    );
    for (body, code, param) in [
        (json!({}), "missing_required_parameter", "prompt"),
        (json!({"prompt": ""}), "invalid_value", "prompt"),
        (json!({"prompt": []}), "invalid_value", "prompt"),
        (json!({"prompt": [1, 1024]}), "invalid_value", "prompt[1]"),
        (json!({"prompt": [1, "a"]}), "invalid_type", "prompt[1]"),
        (json!({"prompt": 5}), "invalid_type", "prompt"),
        (json!({"prompt": ["a", "b"]}), "unsupported_parameter", "prompt"),
        (
            json!({"prompt": "a", "echo": true}),
            "unsupported_parameter",
            "echo",
        ),
        (
            json!({"prompt": "a", "suffix": "b"}),
            "unsupported_parameter",
            "suffix",
        ),
        (
            json!({"prompt": "a", "best_of": 2}),
            "unsupported_parameter",
            "best_of",
        ),
    ] {
        let e = parse(body.clone()).unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.code, e.param.as_deref()),
            (400, code, Some(param)),
            "{body}"
        );
    }
}
