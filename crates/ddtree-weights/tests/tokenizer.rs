//! Tokenizer files: tokenizer.json, chat templates, special tokens.

mod common;

use common::{TempDir, assert_names};
use ddtree_weights::{Error, TokenizerFiles};

const TOKENIZER_JSON: &str = r#"{
  "version": "1.0",
  "truncation": null,
  "padding": null,
  "added_tokens": [
    {"id": 3, "content": "<|im_end|>", "single_word": false, "lstrip": false, "rstrip": false,
     "normalized": false, "special": true},
    {"id": 4, "content": "<|endoftext|>", "single_word": false, "lstrip": false, "rstrip": false,
     "normalized": false, "special": true}
  ],
  "normalizer": null,
  "pre_tokenizer": {"type": "Whitespace"},
  "post_processor": null,
  "decoder": null,
  "model": {"type": "WordLevel",
            "vocab": {"<unk>": 0, "hello": 1, "world": 2, "<|im_end|>": 3, "<|endoftext|>": 4},
            "unk_token": "<unk>"}
}"#;

fn model_dir(tag: &str, tokenizer_config: Option<&str>) -> TempDir {
    let dir = TempDir::new(tag);
    dir.write("tokenizer.json", TOKENIZER_JSON);
    if let Some(cfg) = tokenizer_config {
        dir.write("tokenizer_config.json", cfg);
    }
    dir
}

#[test]
fn qwen_style_tokenizer_config() {
    let dir = model_dir(
        "tok",
        Some(
            r#"{"add_bos_token": false, "bos_token": null, "eos_token": "<|im_end|>",
                "pad_token": {"__type": "AddedToken", "content": "<|endoftext|>", "special": true},
                "chat_template": "{% for m in messages %}{{ m.content }}<|im_end|>{% endfor %}",
                "model_max_length": 131072}"#,
        ),
    );
    let t = TokenizerFiles::load(dir.path()).unwrap();
    let enc = t.tokenizer.encode("hello world", false).unwrap();
    assert_eq!(enc.get_ids(), [1, 2]);
    let eos = t.eos_token.as_ref().unwrap();
    assert_eq!((eos.content.as_str(), eos.id), ("<|im_end|>", 3));
    assert_eq!(t.pad_token.as_ref().unwrap().id, 4);
    assert_eq!(t.bos_token, None);
    assert!(
        t.require_chat_template()
            .unwrap()
            .contains("{% for m in messages %}")
    );
}

#[test]
fn chat_template_sources_in_priority_order() {
    // A list of named templates: "default" is chosen.
    let dir = model_dir(
        "tpl-list",
        Some(
            r#"{"chat_template": [{"name": "tool_use", "template": "TOOLS"},
                                  {"name": "default", "template": "DEFAULT"}]}"#,
        ),
    );
    assert_eq!(
        TokenizerFiles::load(dir.path()).unwrap().chat_template.as_deref(),
        Some("DEFAULT")
    );
    // chat_template.json beats tokenizer_config.json …
    dir.write("chat_template.json", r#"{"chat_template": "FROM JSON"}"#);
    assert_eq!(
        TokenizerFiles::load(dir.path()).unwrap().chat_template.as_deref(),
        Some("FROM JSON")
    );
    // … and chat_template.jinja beats both.
    dir.write("chat_template.jinja", "FROM JINJA {{ messages }}");
    assert_eq!(
        TokenizerFiles::load(dir.path()).unwrap().chat_template.as_deref(),
        Some("FROM JINJA {{ messages }}")
    );

    let dir = model_dir(
        "tpl-nodefault",
        Some(r#"{"chat_template": [{"name": "rag", "template": "R"}]}"#),
    );
    let err = TokenizerFiles::load(dir.path()).unwrap_err();
    assert!(
        matches!(err, Error::ConfigInvalid { ref key, .. } if key == "chat_template"),
        "{err}"
    );
    assert_names(&err, &["default", "rag", "tokenizer_config.json"]);
}

#[test]
fn no_chat_template() {
    let dir = model_dir("tpl-none", Some(r#"{"eos_token": "<|endoftext|>"}"#));
    let t = TokenizerFiles::load(dir.path()).unwrap();
    assert_eq!(t.chat_template, None);
    assert_eq!(t.eos_token.as_ref().unwrap().id, 4);
    let err = t.require_chat_template().unwrap_err();
    assert!(matches!(err, Error::NoChatTemplate { .. }), "{err}");
    assert_names(&err, &[dir.path().to_str().unwrap(), "chat_template.jinja"]);

    // Without tokenizer_config.json at all: no special tokens, no template, still loads.
    let dir = model_dir("tpl-nocfg", None);
    let t = TokenizerFiles::load(dir.path()).unwrap();
    assert!(t.eos_token.is_none() && t.chat_template.is_none());
}

#[test]
fn broken_tokenizer_files() {
    let dir = TempDir::new("tok-missing");
    let err = TokenizerFiles::load(dir.path()).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert_names(&err, &["tokenizer.json"]);

    dir.write("tokenizer.json", r#"{"model": {"type": "NoSuchModel"}}"#);
    let err = TokenizerFiles::load(dir.path()).unwrap_err();
    assert!(matches!(err, Error::Tokenizer { .. }), "{err}");
    assert_names(&err, &["tokenizer.json"]);

    let dir = model_dir("tok-unknown-special", Some(r#"{"eos_token": "</s>"}"#));
    let err = TokenizerFiles::load(dir.path()).unwrap_err();
    assert!(
        matches!(err, Error::ConfigInvalid { ref key, .. } if key == "eos_token"),
        "{err}"
    );
    assert_names(&err, &["</s>", "tokenizer_config.json"]);

    let dir = model_dir("tok-bad-special", Some(r#"{"eos_token": 5}"#));
    let err = TokenizerFiles::load(dir.path()).unwrap_err();
    assert!(matches!(err, Error::ConfigWrongType { .. }), "{err}");
}
