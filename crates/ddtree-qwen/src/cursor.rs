//! Bookkeeping shared by every target: how many cache rows are committed, and the block that was
//! verified but not yet committed.

use crate::error::{Error, Result};

/// The committed prefix length and the pending (verified, uncommitted) block of a target's cache.
#[derive(Clone, Debug)]
pub(crate) struct Cursor {
    committed: usize,
    pending: usize,
    capacity: usize,
}

impl Cursor {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            committed: 0,
            pending: 0,
            capacity,
        }
    }

    pub(crate) fn committed(&self) -> usize {
        self.committed
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Starts a block of `n` rows after the committed prefix, dropping any uncommitted block.
    /// Returns the first cache row of the block.
    pub(crate) fn begin(&mut self, n: usize) -> Result<usize> {
        self.pending = 0;
        if n == 0 {
            return Err(Error::EmptyBlock);
        }
        if self.committed + n > self.capacity {
            return Err(Error::ContextFull {
                committed: self.committed,
                requested: n,
                capacity: self.capacity,
            });
        }
        self.pending = n;
        Ok(self.committed)
    }

    /// Checks `accepted` against the pending block: non-empty, strictly increasing, in range.
    pub(crate) fn check_commit(&self, accepted: &[usize]) -> Result<()> {
        if self.pending == 0 {
            return Err(Error::InvalidCommit("no verified block is pending".into()));
        }
        if accepted.is_empty() {
            return Err(Error::InvalidCommit(
                "the accepted path is empty (it always holds the root, node 0)".into(),
            ));
        }
        if accepted.windows(2).any(|w| w[0] >= w[1]) {
            return Err(Error::InvalidCommit(format!(
                "accepted node ids must be strictly increasing, got {accepted:?}"
            )));
        }
        if let Some(&last) = accepted.last()
            && last >= self.pending
        {
            return Err(Error::InvalidCommit(format!(
                "node {last} is outside the verified block of {} nodes",
                self.pending
            )));
        }
        Ok(())
    }

    /// Commits `count` rows of the pending block (after [`Self::check_commit`]).
    pub(crate) fn advance(&mut self, count: usize) {
        self.committed += count;
        self.pending = 0;
    }

    /// Forgets everything after the first `len` committed rows.
    pub(crate) fn truncate(&mut self, len: usize) {
        self.committed = self.committed.min(len);
        self.pending = 0;
    }
}

/// Whether `accepted` is `0, 1, 2, …` (no cache row has to move).
pub(crate) fn is_identity(accepted: &[usize]) -> bool {
    accepted.iter().enumerate().all(|(i, &a)| i == a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_commits() {
        let mut cursor = Cursor::new(10);
        assert!(matches!(cursor.begin(0), Err(Error::EmptyBlock)));
        assert_eq!(cursor.begin(4).unwrap(), 0);
        cursor.check_commit(&[0, 2, 3]).unwrap();
        cursor.advance(3);
        assert_eq!(cursor.committed(), 3);
        assert!(
            cursor.check_commit(&[0]).is_err(),
            "nothing pending after a commit"
        );

        assert_eq!(cursor.begin(5).unwrap(), 3);
        assert!(cursor.check_commit(&[]).is_err());
        assert!(cursor.check_commit(&[0, 0]).is_err());
        assert!(cursor.check_commit(&[2, 1]).is_err());
        assert!(cursor.check_commit(&[0, 5]).is_err());
        assert!(matches!(
            cursor.begin(8),
            Err(Error::ContextFull {
                committed: 3,
                requested: 8,
                capacity: 10
            })
        ));
        assert!(
            cursor.check_commit(&[0]).is_err(),
            "a failed begin drops the pending block"
        );
        cursor.truncate(1);
        assert_eq!(cursor.committed(), 1);
        assert!(is_identity(&[0, 1, 2]) && !is_identity(&[0, 2]));
    }
}
