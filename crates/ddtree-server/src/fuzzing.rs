//! The entry point shared by the `request_body` fuzz target and the corpus-replay test, so both
//! exercise exactly the same code. Not part of the stable API.

use std::sync::OnceLock;

use tokenizers::Tokenizer;

use crate::model::{ModelSource, load_tokenizer};
use crate::reasoning::ReasoningSplitter;
use crate::template::ChatTemplate;
use crate::validate::{Limits, chat_request, completion_request, parse_object};

struct Fixture {
    tokenizer: Tokenizer,
    template: ChatTemplate,
    limits: Limits,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let (tokenizer, template, _) =
            load_tokenizer(&ModelSource::demo()).expect("the demo tokenizer loads");
        Fixture {
            tokenizer,
            template: template.expect("the demo model has a chat template"),
            limits: Limits {
                served_model: "qwen3-tiny-tied".into(),
                accept_any_model: false,
                max_tree_budget: 256,
                vocab_size: 1024,
                block_size: 16,
                strict: false,
            },
        }
    })
}

/// Parses `data` as a chat and as a text completions body; for accepted chat bodies, renders
/// the template and tokenizes. Every rejection must be a 4xx with an OpenAI body, never a
/// panic. Returns whether the chat body was accepted and rendered.
pub fn request_body(data: &[u8]) -> bool {
    let f = fixture();
    let body = match parse_object(data) {
        Ok(b) => b,
        Err(e) => {
            assert!(e.status.is_client_error(), "{e}");
            let _ = e.body();
            return false;
        }
    };
    if let Err(e) = completion_request(&body, &f.limits) {
        assert!(e.status.is_client_error(), "{e}");
    }
    let request = match chat_request(&body, &f.limits) {
        Ok(r) => r,
        Err(e) => {
            assert!(e.status.is_client_error(), "{e}");
            let _ = e.body();
            return false;
        }
    };
    match f.template.render(
        &request.messages,
        request.add_generation_prompt,
        &request.template_kwargs,
    ) {
        Ok(text) => {
            let ids = f
                .tokenizer
                .encode(text.as_str(), false)
                .map(|e| e.get_ids().len());
            assert!(ids.is_ok());
            let _ = ReasoningSplitter::for_prompt(&text);
            true
        }
        Err(e) => {
            assert!(e.status.is_client_error(), "{e}");
            false
        }
    }
}
