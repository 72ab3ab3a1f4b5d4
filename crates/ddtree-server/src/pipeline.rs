//! Tokens → text deltas for one request: incremental detokenization, stop strings, then the
//! reasoning split. Runs inside the engine's per-round callback, so a stop string ends the
//! generation within the round that completed it.

use tokenizers::Tokenizer;

use crate::detok::IncrementalDecoder;
use crate::reasoning::{ReasoningSplitter, Split, State};
use crate::stop::StopMatcher;

/// How a request's text is produced.
#[derive(Clone, Debug, Default)]
pub struct TextOptions {
    /// Stop strings.
    pub stop: Vec<String>,
    /// Split reasoning, starting in this state (`None`: raw text, all content).
    pub reasoning: Option<State>,
    /// Token ids whose text is never shown (the stop tokens: they end the output).
    pub hidden: Vec<u32>,
}

/// The per-request text state.
#[derive(Debug)]
pub struct TextPipeline {
    detok: IncrementalDecoder,
    stop: StopMatcher,
    splitter: Option<ReasoningSplitter>,
    hidden: Vec<u32>,
    emitted: usize,
    reasoning_tokens: usize,
    stop_matched: bool,
}

impl TextPipeline {
    /// A pipeline for `options`.
    pub fn new(options: &TextOptions) -> Self {
        Self {
            detok: IncrementalDecoder::new(true),
            stop: StopMatcher::new(&options.stop),
            splitter: options.reasoning.map(ReasoningSplitter::new),
            hidden: options.hidden.clone(),
            emitted: 0,
            reasoning_tokens: 0,
            stop_matched: false,
        }
    }

    /// Tokens taken into the output so far (the token that completed a stop string included,
    /// nothing after it).
    pub fn emitted(&self) -> usize {
        self.emitted
    }

    /// Tokens produced while the reasoning block was open (`None` for raw text).
    pub fn reasoning_tokens(&self) -> Option<usize> {
        self.splitter.as_ref().map(|_| self.reasoning_tokens)
    }

    /// Whether a stop string ended the output.
    pub fn stop_matched(&self) -> bool {
        self.stop_matched
    }

    /// Takes a chunk of tokens; appends the final text to `out`. Returns true when a stop string
    /// matched (the rest of the chunk is dropped).
    pub fn push(&mut self, tokenizer: &Tokenizer, tokens: &[u32], out: &mut Split) -> bool {
        for &id in tokens {
            if self.stop_matched {
                break;
            }
            self.emitted += 1;
            let was_reasoning = self.in_reasoning();
            if !self.hidden.contains(&id) {
                let text = self.detok.push(tokenizer, id);
                self.feed(&text, out);
            }
            if was_reasoning || self.in_reasoning() {
                self.reasoning_tokens += 1;
            }
        }
        self.stop_matched
    }

    /// Ends the output: releases held-back text (an incomplete character, a partial stop
    /// string, a partial tag).
    pub fn finish(&mut self, tokenizer: &Tokenizer, out: &mut Split) {
        if !self.stop_matched {
            let tail = self.detok.flush(tokenizer);
            self.feed(&tail, out);
        }
        if !self.stop_matched {
            let held = self.stop.flush();
            self.route(&held, out);
        }
        if let Some(s) = &mut self.splitter {
            out.append(s.finish());
        }
    }

    fn in_reasoning(&self) -> bool {
        self.splitter
            .as_ref()
            .is_some_and(|s| s.state() == State::Reasoning)
    }

    fn feed(&mut self, text: &str, out: &mut Split) {
        if text.is_empty() {
            return;
        }
        let released = self.stop.push(text);
        self.stop_matched |= released.matched.is_some();
        self.route(&released.text, out);
    }

    fn route(&mut self, text: &str, out: &mut Split) {
        match &mut self.splitter {
            Some(s) => out.append(s.push(text)),
            None => out.content.push_str(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokenizer() -> Tokenizer {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/tokenizer/tokenizer.json"
        );
        Tokenizer::from_file(path).unwrap()
    }

    fn ids(tok: &Tokenizer, text: &str) -> Vec<u32> {
        tok.encode(text, false).unwrap().get_ids().to_vec()
    }

    #[test]
    fn reasoning_and_a_stop_string_across_multi_token_chunks() {
        let tok = tokenizer();
        let all = ids(&tok, "<think>\nadd them</think>\n\nIt is 4. END more text");
        let end = tok.token_to_id("</think>").unwrap();
        let at = all.iter().position(|&t| t == end).unwrap();
        let options = TextOptions {
            stop: vec![" END".into()],
            reasoning: Some(State::Start),
            hidden: vec![],
        };
        let mut p = TextPipeline::new(&options);
        let mut out = Split::default();
        // One chunk spans the end of the reasoning and the start of the answer.
        assert!(!p.push(&tok, &all[..at - 1], &mut out));
        assert!(!p.push(&tok, &all[at - 1..at + 3], &mut out));
        let stopped = p.push(&tok, &all[at + 3..], &mut out);
        assert!(stopped);
        p.finish(&tok, &mut out);
        assert_eq!(out.reasoning, "\nadd them");
        assert_eq!(out.content, "\n\nIt is 4.");
        let through_stop = ids(&tok, "<think>\nadd them</think>\n\nIt is 4. END").len();
        assert_eq!(p.emitted(), through_stop);
        assert!(p.reasoning_tokens().unwrap() >= 1 && p.reasoning_tokens().unwrap() <= at + 1);
    }

    #[test]
    fn hidden_stop_tokens_count_but_show_no_text() {
        let tok = tokenizer();
        let eos = tok.token_to_id("<|im_end|>").unwrap();
        let mut chunk = ids(&tok, "Hi there");
        chunk.push(eos);
        let mut p = TextPipeline::new(&TextOptions {
            hidden: vec![eos],
            ..TextOptions::default()
        });
        let mut out = Split::default();
        assert!(!p.push(&tok, &chunk, &mut out));
        p.finish(&tok, &mut out);
        assert_eq!(out.content, "Hi there");
        assert_eq!(p.emitted(), chunk.len());
        assert_eq!(p.reasoning_tokens(), None);
    }
}
