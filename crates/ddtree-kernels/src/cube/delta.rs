//! The gated delta rule of Gated DeltaNet over parent-linked rows (a sequence or a draft tree).
//! Reference: [`crate::reference::gated_delta_rule`].

use cubecl::prelude::*;

/// How a row of [`gated_delta_rule()`] finds its parent's column: still in registers (the row
/// right before it in the walk), the input state (a root), or saved slot `s` (`FROM_SLOT + s`).
pub const FROM_PREVIOUS: u32 = 0;
/// See [`FROM_PREVIOUS`].
pub const FROM_STATE: u32 = 1;
/// See [`FROM_PREVIOUS`].
pub const FROM_SLOT: u32 = 2;
/// A row whose column no later row needs saved ([`Walk::save`]).
pub const NO_SLOT: u32 = u32::MAX;

/// `parts` units per (value head `h`, state column `j`), each holding `dk / parts` entries of
/// the column: every column of a head's state `S: [dk, dv]` evolves on its own —
///
/// `S'[:, j] = e^g S[:, j] + k · β (v_j − e^g S[:, j]ᵀ k)`, `out_j = S'[:, j]ᵀ q` —
///
/// and `out_j = e^g S[:, j]ᵀ q + β (v_j − …) kᵀq`, so each row needs one reduction across the
/// column's units, of three partial sums at once (`Sᵀk`, `Sᵀq`, `kᵀq`, by `plane_shuffle_xor`).
/// The units walk the rows in depth-first `order`, each continuing the column its `load` entry
/// names ([`FROM_PREVIOUS`], [`FROM_STATE`] or a slot) and saving its own into slot `save` when a
/// later row needs it (a row with several children): `slots · dk / parts` local values per unit,
/// none for a sequence. One launch for the whole tree, where the reference issues a dozen tensor
/// ops per row. Arithmetic in f32. Splitting the column keeps the serial part of a row short
/// (`dk / parts` products, `log2 parts` shuffles) and gives the device `parts` times the units.
///
/// `q, k: [n, key_heads, dk]` (value head `h` reads key head `h / (heads / key_heads)`),
/// `v, out: [n, heads, dv]`, `g, beta: [n, heads]`, `state, last: [heads, dk, dv]`, all dense;
/// the walk visits `steps` rows (all `n`, or a path of them: a commit's replay reads the
/// accepted rows in place) and `last` receives the state after row `last_row`. The state has
/// its own type `S`: f32 keeps the recurrence exact across launches (an AR step's state then
/// matches a verify's bit for bit). `parts` is a power of two dividing `dk`, at most the plane
/// size; launch `heads · dv · parts` units in cubes of whole planes.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_rule<F: Float, S: Float>(
    q: &Array<F>,
    k: &Array<F>,
    v: &Array<F>,
    g: &Array<F>,
    beta: &Array<F>,
    state: &Array<S>,
    order: &Array<u32>,
    load: &Array<u32>,
    save: &Array<u32>,
    out: &mut Array<F>,
    last: &mut Array<S>,
    steps: usize,
    last_row: usize,
    heads: usize,
    key_heads: usize,
    dv: usize,
    #[comptime] dk: usize,
    #[comptime] parts: usize,
    #[comptime] slots: usize,
) {
    let width = comptime!(dk / parts);
    let units = heads * dv * parts;
    // Every unit of a plane takes part in the shuffles: one past the end redoes the last
    // column's work and writes nothing.
    let active = ABSOLUTE_POS < units;
    let unit = if active { ABSOLUTE_POS } else { units - 1 };
    let part = unit % parts;
    let h = unit / parts / dv;
    let j = unit / parts % dv;
    let kh = h / (heads / key_heads);
    let first = part * width;
    let mut saved = Array::<f32>::new(comptime!(slots.max(1) * width));
    let mut column = Array::<f32>::new(width);
    let mut key = Array::<f32>::new(width);
    for i in 0..steps {
        let row = order[i] as usize;
        let from = load[i];
        if from == FROM_STATE {
            #[unroll]
            for e in 0..width {
                column[e] = f32::cast_from(state[(h * dk + first + e) * dv + j]);
            }
        } else if from >= FROM_SLOT {
            let slot = (from - FROM_SLOT) as usize * width;
            #[unroll]
            for e in 0..width {
                column[e] = saved[slot + e];
            }
        }
        let at = (row * key_heads + kh) * dk + first;
        let mut sk = 0.0f32;
        let mut sq = 0.0f32;
        let mut kq = 0.0f32;
        #[unroll]
        for e in 0..width {
            let ke = f32::cast_from(k[at + e]);
            let qe = f32::cast_from(q[at + e]);
            key[e] = ke;
            sk += column[e] * ke;
            sq += column[e] * qe;
            kq += ke * qe;
        }
        let mut mask = 1u32;
        #[unroll]
        for _ in 0..comptime!(parts.trailing_zeros() as usize) {
            sk += plane_shuffle_xor(sk, mask);
            sq += plane_shuffle_xor(sq, mask);
            kq += plane_shuffle_xor(kq, mask);
            mask *= 2;
        }
        let decay = f32::exp(f32::cast_from(g[row * heads + h]));
        let delta = f32::cast_from(beta[row * heads + h])
            * (f32::cast_from(v[(row * heads + h) * dv + j]) - decay * sk);
        let to = save[i];
        #[unroll]
        for e in 0..width {
            let s = column[e] * decay + key[e] * delta;
            column[e] = s;
            if to != NO_SLOT {
                saved[to as usize * width + e] = s;
            }
            if row == last_row && active {
                last[(h * dk + first + e) * dv + j] = S::cast_from(s);
            }
        }
        if part == 0 && active {
            out[(row * heads + h) * dv + j] = F::cast_from(decay * sq + delta * kq);
        }
    }
}

/// The walk of [`gated_delta_rule()`] over parent-linked rows.
#[derive(Debug, PartialEq, Eq)]
pub struct Walk {
    /// Rows in depth-first order, children in increasing order.
    pub order: Vec<u32>,
    /// Where each visited row finds its parent's column ([`FROM_PREVIOUS`], [`FROM_STATE`],
    /// `FROM_SLOT + s`).
    pub load: Vec<u32>,
    /// The slot each visited row saves its column into, or [`NO_SLOT`].
    pub save: Vec<u32>,
    /// Slots in use at once: the most branching rows on one path.
    pub slots: usize,
}

/// The walk for `parents` (`parents[r]` is `-1` for a root, else an earlier row). A row with
/// several children saves its column in the slot numbered by the branching rows above it; its
/// first child follows it in the walk and continues the column in registers, the others load
/// the slot — which no row of the subtree between overwrites, being lower in the tree.
pub fn depth_first(parents: &[i32]) -> Walk {
    let n = parents.len();
    let (children, roots) = crate::reference::tree_links(parents);
    let mut stack: Vec<_> = roots.into_iter().map(|row| (row, FROM_STATE, 0u32)).collect();
    let mut walk = Walk {
        order: Vec::with_capacity(n),
        load: Vec::with_capacity(n),
        save: Vec::with_capacity(n),
        slots: 0,
    };
    // (row, where it loads from, branching rows above it)
    while let Some((row, load, branching)) = stack.pop() {
        walk.order.push(row as u32);
        walk.load.push(load);
        let kids = &children[row];
        let save = if kids.len() > 1 { branching } else { NO_SLOT };
        walk.save.push(save);
        if save != NO_SLOT {
            walk.slots = walk.slots.max(save as usize + 1);
        }
        let below = branching + u32::from(kids.len() > 1);
        // Children were pushed in decreasing row order, so the first child pops next.
        let first = kids.last().copied();
        stack.extend(kids.iter().map(|&c| {
            let from = if Some(c) == first {
                FROM_PREVIOUS
            } else {
                FROM_SLOT + save
            };
            (c, from, below)
        }));
    }
    walk
}

/// The walk along `rows` as a chain: the first row continues the input state, each later one
/// the row before it in `rows` (a commit's replay of an accepted path, read in place).
pub fn along(rows: &[usize]) -> Walk {
    Walk {
        order: rows.iter().map(|&r| r as u32).collect(),
        load: (0..rows.len())
            .map(|i| if i == 0 { FROM_STATE } else { FROM_PREVIOUS })
            .collect(),
        save: vec![NO_SLOT; rows.len()],
        slots: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row once, each after its parent; a first child continues its parent, later
    /// children load the parent's slot; a sequence needs no slot.
    #[test]
    fn depth_first_saves_only_branching_rows() {
        let tree = [-1, 0, 0, 1, 2, 3, -1, 6, 1];
        let walk = depth_first(&tree);
        assert_eq!(walk.order, [0, 1, 3, 5, 8, 2, 4, 6, 7]);
        let (p, s, none) = (FROM_PREVIOUS, FROM_STATE, NO_SLOT);
        // Rows 0 (children 1, 2) and 1 (children 3, 8) branch: slots 0 and 1.
        assert_eq!(walk.load, [s, p, p, p, FROM_SLOT + 1, FROM_SLOT, p, s, p]);
        assert_eq!(walk.save, [0, 1, none, none, none, none, none, none, none]);
        assert_eq!(walk.slots, 2);
        let chain = depth_first(&[-1, 0, 1, 2]);
        assert_eq!(chain.order, [0, 1, 2, 3]);
        assert_eq!(chain.load, [s, p, p, p]);
        assert_eq!((chain.save, chain.slots), (vec![none; 4], 0));
    }

    /// A path walks its rows as the chain a sequence of them would: the depth-first walk of a
    /// chain, with the rows renamed.
    #[test]
    fn a_path_walks_as_a_chain() {
        let path = along(&[0, 2, 5]);
        let chain = depth_first(&[-1, 0, 1]);
        assert_eq!(path.order, [0, 2, 5]);
        assert_eq!(
            (&path.load, &path.save, path.slots),
            (&chain.load, &chain.save, chain.slots)
        );
    }
}
