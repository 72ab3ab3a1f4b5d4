//! Who may attend to whom: the visibility rules of prefill, decode, tree verify and drafting,
//! expressed without a dense float mask.

/// Ancestor bit sets of a block of query rows: row `i` may see block row `j` iff bit `j` of row
/// `i` is set. Rows are `words_per_row` little-endian `u64` words (bit `j` lives in word `j / 64`,
/// position `j % 64`), so a GPU kernel can consume the same buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AncestorBits<'a> {
    words: &'a [u64],
    words_per_row: usize,
}

impl<'a> AncestorBits<'a> {
    /// Wraps `words` laid out as `rows × words_per_row`. Returns `None` if `words_per_row` is 0 or
    /// does not divide `words.len()`.
    pub fn new(words: &'a [u64], words_per_row: usize) -> Option<Self> {
        if words_per_row == 0 || !words.len().is_multiple_of(words_per_row) {
            return None;
        }
        Some(Self { words, words_per_row })
    }

    /// Number of rows described.
    pub fn rows(&self) -> usize {
        self.words.len() / self.words_per_row
    }

    /// Words per row.
    pub fn words_per_row(&self) -> usize {
        self.words_per_row
    }

    /// The raw words, row-major.
    pub fn words(&self) -> &'a [u64] {
        self.words
    }

    /// Whether row `row` may see block row `col`.
    pub fn sees(&self, row: usize, col: usize) -> bool {
        let word = col / 64;
        if word >= self.words_per_row {
            return false;
        }
        self.words[row * self.words_per_row + word] >> (col % 64) & 1 == 1
    }
}

/// How the query rows of one block see the rows of the same block. Every query row always sees
/// the whole committed prefix (subject to [`AttentionContext::window`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visibility<'a> {
    /// Row `i` sees block rows `0..=i` (prefill, decode, a chain).
    Causal,
    /// Every row sees every block row (the DFlash drafter's full-attention layers).
    Full,
    /// Row `i` sees the block rows whose bit is set: its ancestors and itself (tree verify).
    Tree(AncestorBits<'a>),
}

/// Where a block of query rows sits in a KV cache and what it may see.
///
/// The block's own keys/values occupy cache rows `prefix_len..prefix_len + rows`, written before
/// the attention call. Query row `i` has cache position `prefix_len + i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionContext<'a> {
    /// Committed cache rows visible to every query row.
    pub prefix_len: usize,
    /// Visibility inside the block.
    pub visibility: Visibility<'a>,
    /// Sliding window: when set, the query at cache row `p` sees only cache rows `> p - window`
    /// (the drafter's sliding-attention layers, whose block rows are contiguous in the cache).
    pub window: Option<usize>,
}

impl AttentionContext<'_> {
    /// A causal block after `prefix_len` committed rows.
    pub fn causal(prefix_len: usize) -> Self {
        Self {
            prefix_len,
            visibility: Visibility::Causal,
            window: None,
        }
    }

    /// Whether block row `row` may see cache row `key` (`key < prefix_len + rows`).
    pub fn sees(&self, row: usize, key: usize) -> bool {
        let query_pos = self.prefix_len + row;
        if let Some(window) = self.window
            && key + window <= query_pos
        {
            return false;
        }
        if key < self.prefix_len {
            return true;
        }
        let col = key - self.prefix_len;
        match self.visibility {
            Visibility::Causal => col <= row,
            Visibility::Full => true,
            Visibility::Tree(bits) => bits.sees(row, col),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ancestor_bits_cross_word_boundaries() {
        // Row 0 sees 0; row 1 sees 0, 1, 64, 127 (two words per row).
        let words = [1u64, 0, 0b11, 1 | 1 << 63];
        let bits = AncestorBits::new(&words, 2).unwrap();
        assert_eq!(bits.rows(), 2);
        assert!(bits.sees(0, 0) && !bits.sees(0, 1) && !bits.sees(0, 64));
        assert!(bits.sees(1, 0) && bits.sees(1, 1) && !bits.sees(1, 2));
        assert!(bits.sees(1, 64) && bits.sees(1, 127) && !bits.sees(1, 65));
        assert!(!bits.sees(1, 128), "columns past the row's words are invisible");
        assert!(AncestorBits::new(&words, 3).is_none());
        assert!(AncestorBits::new(&words, 0).is_none());
    }

    #[test]
    fn context_rules() {
        let causal = AttentionContext::causal(3);
        assert!(causal.sees(0, 0) && causal.sees(0, 2) && causal.sees(0, 3));
        assert!(!causal.sees(0, 4) && causal.sees(1, 4));

        let words = [0b01u64, 0b11, 0b101];
        let tree = AttentionContext {
            prefix_len: 2,
            visibility: Visibility::Tree(AncestorBits::new(&words, 1).unwrap()),
            window: None,
        };
        // Row 2 sees the prefix, the root (block row 0) and itself, not its sibling (row 1).
        assert!(tree.sees(2, 0) && tree.sees(2, 1) && tree.sees(2, 2));
        assert!(!tree.sees(2, 3) && tree.sees(2, 4));

        let windowed = AttentionContext {
            prefix_len: 4,
            visibility: Visibility::Full,
            window: Some(2),
        };
        // Query row 0 is at position 4: it sees positions 3..; the block is fully visible.
        assert!(!windowed.sees(0, 2) && windowed.sees(0, 3) && windowed.sees(0, 5));
    }
}
