//! Incremental detokenization that never splits a UTF-8 character.
//!
//! Byte-level BPE tokens can end in the middle of a multi-byte character; decoding such a token
//! alone yields U+FFFD. The decoder keeps a short window of ids (from `prefix` to the end),
//! decodes it, and releases only the new text past the previously decoded prefix, and only when
//! it does not end in a replacement character (the rest of the character is still to come).

use tokenizers::Tokenizer;

/// Streams text out of a growing sequence of token ids.
#[derive(Clone, Debug, Default)]
pub struct IncrementalDecoder {
    ids: Vec<u32>,
    /// Start of the decode window.
    prefix: usize,
    /// End of the ids whose text has been released.
    read: usize,
    skip_special: bool,
}

impl IncrementalDecoder {
    /// A decoder; `skip_special` drops special tokens (`<|im_end|>`, …) from the text.
    pub fn new(skip_special: bool) -> Self {
        Self {
            skip_special,
            ..Self::default()
        }
    }

    /// Appends a token and returns the text it completes (possibly empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> String {
        self.ids.push(id);
        let decode = |ids: &[u32]| tokenizer.decode(ids, self.skip_special).unwrap_or_default();
        let before = decode(&self.ids[self.prefix..self.read]);
        let now = decode(&self.ids[self.prefix..]);
        if now.len() > before.len() && !now.ends_with('\u{FFFD}') && now.is_char_boundary(before.len()) {
            let fresh = now[before.len()..].to_string();
            self.prefix = self.read;
            self.read = self.ids.len();
            fresh
        } else {
            String::new()
        }
    }

    /// The text still held back (an incomplete character at the end of the output), decoded
    /// as it is: called once the generation is over.
    pub fn flush(&mut self, tokenizer: &Tokenizer) -> String {
        let decode = |ids: &[u32]| tokenizer.decode(ids, self.skip_special).unwrap_or_default();
        let before = decode(&self.ids[self.prefix..self.read]);
        let now = decode(&self.ids[self.prefix..]);
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        match now.get(before.len()..) {
            Some(rest) if now.starts_with(&before) => rest.to_string(),
            _ => String::new(),
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

    #[test]
    fn multi_byte_characters_are_never_split_and_the_text_adds_up() {
        let tok = tokenizer();
        let text = "Héllo “wörld” — 你好 🌍 done";
        let ids = tok.encode(text, false).unwrap().get_ids().to_vec();
        let mut d = IncrementalDecoder::new(true);
        let mut pieces = Vec::new();
        for &id in &ids {
            pieces.push(d.push(&tok, id));
        }
        pieces.push(d.flush(&tok));
        assert!(pieces.iter().all(|p| !p.contains('\u{FFFD}')), "{pieces:?}");
        assert_eq!(pieces.concat(), text);
        // 🌍 is four bytes, and this vocabulary has no merge for it: at least one token
        // completed no character and released nothing.
        assert!(ids.len() > text.split(' ').count());
        assert!(pieces[..ids.len()].iter().any(String::is_empty), "{pieces:?}");
    }

    #[test]
    fn special_tokens_are_skipped_and_an_incomplete_tail_is_flushed() {
        let tok = tokenizer();
        let im_end = tok.token_to_id("<|im_end|>").unwrap();
        let mut d = IncrementalDecoder::new(true);
        let mut out = String::new();
        for id in tok.encode("ok", false).unwrap().get_ids() {
            out.push_str(&d.push(&tok, *id));
        }
        out.push_str(&d.push(&tok, im_end));
        assert_eq!(out, "ok");
        // The first byte of a 4-byte character alone: held, then flushed as U+FFFD.
        let bytes = tok.encode("🌍", false).unwrap().get_ids().to_vec();
        assert!(bytes.len() > 1);
        let mut d = IncrementalDecoder::new(true);
        assert_eq!(d.push(&tok, bytes[0]), "");
        assert_eq!(d.flush(&tok), "\u{FFFD}");
    }
}
