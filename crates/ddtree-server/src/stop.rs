//! Stop strings matched on the decoded text, across token and round boundaries.
//!
//! Text is pushed as it is decoded; the matcher releases only text that can no longer be part
//! of a match: a suffix that is a prefix of some stop string is held back until the next push
//! shows whether the stop string completes. On a match, the text before it is released and
//! everything from the stop string on is dropped.

/// Incremental stop-string matcher.
#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    pending: String,
    matched: Option<usize>,
}

/// What one push released.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Released {
    /// Text that is final (no stop string can start in it).
    pub text: String,
    /// Which stop string matched (index into the list), if one did in this push.
    pub matched: Option<usize>,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            pending: String::new(),
            matched: None,
        }
    }

    /// Whether a stop string has matched (nothing is released after that).
    pub fn is_stopped(&self) -> bool {
        self.matched.is_some()
    }

    /// Appends decoded text and returns what became final.
    pub fn push(&mut self, text: &str) -> Released {
        if self.matched.is_some() {
            return Released::default();
        }
        self.pending.push_str(text);
        // The earliest complete match wins; among matches at one position, the longest.
        let hit = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                self.pending
                    .find(s.as_str())
                    .map(|at| (at, std::cmp::Reverse(s.len()), i))
            })
            .min();
        if let Some((at, _, i)) = hit {
            self.matched = Some(i);
            let text = self.pending[..at].to_string();
            self.pending.clear();
            return Released {
                text,
                matched: Some(i),
            };
        }
        let hold = self.held_suffix_start();
        let text = self.pending[..hold].to_string();
        self.pending.drain(..hold);
        Released { text, matched: None }
    }

    /// Releases whatever is held back (the generation ended without completing a stop string).
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }

    /// The start of the longest suffix of `pending` that is a proper prefix of a stop string.
    fn held_suffix_start(&self) -> usize {
        let p = &self.pending;
        p.char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                self.stops
                    .iter()
                    .any(|s| s.len() > p.len() - i && s.starts_with(&p[i..]))
            })
            .unwrap_or(p.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, Option<usize>) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut m = StopMatcher::new(&stops);
        let mut out = String::new();
        for p in pieces {
            let r = m.push(p);
            out.push_str(&r.text);
            if r.matched.is_some() {
                return (out, r.matched);
            }
        }
        out.push_str(&m.flush());
        (out, None)
    }

    #[test]
    fn a_stop_string_split_across_pushes_is_found() {
        assert_eq!(
            run(&["STOP"], &["abc S", "T", "OP def"]),
            ("abc ".into(), Some(0))
        );
        assert_eq!(run(&["\n\n"], &["line\n", "\nnext"]), ("line".into(), Some(0)));
    }

    #[test]
    fn partial_matches_are_held_back_then_released() {
        let stops = vec!["STOP".to_string()];
        let mut m = StopMatcher::new(&stops);
        assert_eq!(m.push("abc ST").text, "abc ");
        assert_eq!(m.push("x").text, "STx");
        assert_eq!(m.push("S").text, "");
        assert_eq!(m.flush(), "S");
    }

    #[test]
    fn the_earliest_match_wins_and_nothing_follows_it() {
        assert_eq!(run(&["world", "lo w"], &["hello world"]), ("hel".into(), Some(1)));
        let stops = vec!["b".to_string()];
        let mut m = StopMatcher::new(&stops);
        assert_eq!(m.push("abc").matched, Some(0));
        assert!(m.is_stopped());
        assert_eq!(m.push("more"), Released::default());
        assert_eq!(m.flush(), "");
    }

    #[test]
    fn no_stops_releases_everything_and_utf8_boundaries_hold() {
        assert_eq!(run(&[], &["héllo ", "wörld"]), ("héllo wörld".into(), None));
        // The held suffix starts on a character boundary even when the stop begins with a
        // multi-byte character.
        assert_eq!(run(&["éx"], &["caf", "é", "!"]), ("café!".into(), None));
        assert_eq!(run(&["éx"], &["café", "x"]), ("caf".into(), Some(0)));
    }
}
