//! The `<think>…</think>` split of Qwen3 / Qwen3.5 output into `reasoning_content` and
//! `content`, fed with arbitrary text pieces (a piece may hold several tokens, and a tag may be
//! split across pieces or sit in the middle of one).
//!
//! The starting state comes from the rendered prompt ([`ReasoningSplitter::for_prompt`]): a
//! prompt that ends with an open `<think>` (Qwen3.5, or a template that pre-opens the block)
//! starts in reasoning; otherwise the output may open the block itself with a leading `<think>`
//! (Qwen3), and anything else is content. Output cut before `</think>` stays reasoning.

/// The tag that opens a reasoning block.
pub const THINK_START: &str = "<think>";
/// The tag that closes it.
pub const THINK_END: &str = "</think>";

/// Where the splitter is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// At the start of the output: a leading `<think>` opens reasoning, anything else is content.
    Start,
    /// Inside the reasoning block.
    Reasoning,
    /// After the reasoning block (or with none).
    Content,
}

/// Text split into the two channels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// Reasoning text.
    pub reasoning: String,
    /// Answer text.
    pub content: String,
}

impl Split {
    /// Whether both channels are empty.
    pub fn is_empty(&self) -> bool {
        self.reasoning.is_empty() && self.content.is_empty()
    }

    /// Appends another split.
    pub fn append(&mut self, other: Split) {
        self.reasoning.push_str(&other.reasoning);
        self.content.push_str(&other.content);
    }
}

/// Incremental reasoning splitter.
#[derive(Clone, Debug)]
pub struct ReasoningSplitter {
    state: State,
    held: String,
}

impl ReasoningSplitter {
    /// A splitter starting in `state`.
    pub fn new(state: State) -> Self {
        Self {
            state,
            held: String::new(),
        }
    }

    /// A splitter whose start depends on the rendered prompt: reasoning when the prompt ends
    /// with an opening `<think>` (trailing whitespace aside: Qwen3.5 and templates that pre-open
    /// the block), else [`State::Start`]. A `<think>` elsewhere (in a user message, or closed
    /// by `enable_thinking: false`) does not count.
    pub fn for_prompt(prompt: &str) -> Self {
        let inside = prompt.trim_end().ends_with(THINK_START);
        Self::new(if inside { State::Reasoning } else { State::Start })
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Feeds a piece of text; returns what is final in each channel.
    pub fn push(&mut self, text: &str) -> Split {
        let mut out = Split::default();
        self.held.push_str(text);
        loop {
            match self.state {
                State::Start => {
                    if let Some(rest) = self.held.strip_prefix(THINK_START) {
                        self.held = rest.to_string();
                        self.state = State::Reasoning;
                    } else if THINK_START.starts_with(self.held.as_str()) {
                        // Empty, or a proper prefix of the tag: wait for more.
                        return out;
                    } else {
                        self.state = State::Content;
                    }
                }
                State::Reasoning => {
                    if let Some(at) = self.held.find(THINK_END) {
                        out.reasoning.push_str(&self.held[..at]);
                        self.held = self.held[at + THINK_END.len()..].to_string();
                        self.state = State::Content;
                    } else {
                        let keep = partial_suffix(&self.held, THINK_END);
                        let cut = self.held.len() - keep;
                        out.reasoning.push_str(&self.held[..cut]);
                        self.held.drain(..cut);
                        return out;
                    }
                }
                State::Content => {
                    out.content.push_str(&self.held);
                    self.held.clear();
                    return out;
                }
            }
        }
    }

    /// Releases what is held at the end of the output: a partial tag is text of the current
    /// channel (reasoning inside the block, content otherwise).
    pub fn finish(&mut self) -> Split {
        let held = std::mem::take(&mut self.held);
        match self.state {
            State::Reasoning => Split {
                reasoning: held,
                content: String::new(),
            },
            State::Start | State::Content => Split {
                reasoning: String::new(),
                content: held,
            },
        }
    }
}

/// Length of the longest proper prefix of `tag` that `text` ends with.
fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&n| text.ends_with(&tag[..n]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(start: State, pieces: &[&str]) -> Split {
        let mut s = ReasoningSplitter::new(start);
        let mut out = Split::default();
        for p in pieces {
            out.append(s.push(p));
        }
        out.append(s.finish());
        out
    }

    #[test]
    fn end_tag_inside_one_multi_token_delta_splits_that_delta() {
        let mut s = ReasoningSplitter::new(State::Reasoning);
        let d = s.push("so 2+2=4. done.</think>\n\nThe answer");
        assert_eq!(d.reasoning, "so 2+2=4. done.");
        assert_eq!(d.content, "\n\nThe answer");
        assert_eq!(s.state(), State::Content);
        assert_eq!(s.push(" is 4.").content, " is 4.");
    }

    #[test]
    fn tags_split_across_pieces_are_recognised() {
        let got = split_all(
            State::Start,
            &["<th", "ink>\nplan", " steps</", "thi", "nk>\n\nhi"],
        );
        assert_eq!(got.reasoning, "\nplan steps");
        assert_eq!(got.content, "\n\nhi");
    }

    #[test]
    fn a_held_partial_tag_is_released_when_it_turns_out_not_to_be_one() {
        let mut s = ReasoningSplitter::new(State::Reasoning);
        assert_eq!(s.push("a </th").reasoning, "a ");
        assert_eq!(s.push("ing").reasoning, "</thing");
        let mut s = ReasoningSplitter::new(State::Start);
        assert_eq!(s.push("<t").content, "");
        assert_eq!(s.push("able>").content, "<table>");
    }

    #[test]
    fn truncated_reasoning_stays_reasoning_and_no_tag_is_content() {
        assert_eq!(
            split_all(State::Start, &["<think>still thinking </thi"]),
            Split {
                reasoning: "still thinking </thi".into(),
                content: String::new()
            }
        );
        assert_eq!(
            split_all(State::Start, &["Hello", " there"]),
            Split {
                reasoning: String::new(),
                content: "Hello there".into()
            }
        );
    }

    #[test]
    fn the_prompt_decides_the_starting_state() {
        assert_eq!(
            ReasoningSplitter::for_prompt("<|im_start|>assistant\n").state(),
            State::Start
        );
        assert_eq!(
            ReasoningSplitter::for_prompt("<|im_start|>assistant\n<think>\n").state(),
            State::Reasoning
        );
        assert_eq!(
            ReasoningSplitter::for_prompt("<|im_start|>assistant\n<think>\n\n</think>\n\n").state(),
            State::Start
        );
        assert_eq!(
            ReasoningSplitter::for_prompt(
                "<|im_start|>user\nwhat is <think>?<|im_end|>\n<|im_start|>assistant\n"
            )
            .state(),
            State::Start
        );
    }
}
