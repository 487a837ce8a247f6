//! An index read in part, for a store whose index is fetched on demand: the
//! caller asks which index blocks a read needs ([`Metadata::index_blocks`]),
//! fetches them however it likes, has each checked against `index.sum` as it
//! comes in ([`Metadata::check_index_block`]), and reads through a view of the
//! store over the blocks it holds ([`Metadata::with_blocks`]). A view is built
//! from checked blocks only, so its entries need no further look, and a block
//! evicted and fetched again is checked again.

use std::ops::Range;

use rustc_hash::FxHashMap;

use crate::error::{Error, Result};
use crate::format::INDEX_BLOCK_BYTES;
use crate::meta::Metadata;
use crate::source::IndexSource;

/// One block of a store's index, checked against the store's `index.sum`. Made
/// only by [`Metadata::check_index_block`]; `B` is whatever holds the bytes.
#[derive(Clone, Debug)]
pub struct CheckedBlock<B> {
    /// The store's header checksum: a view refuses another store's blocks.
    store: u64,
    block: usize,
    bytes: B,
}

impl<B: AsRef<[u8]>> CheckedBlock<B> {
    /// The block's number in the index.
    pub fn block(&self) -> usize {
        self.block
    }

    /// The block's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.bytes.as_ref()
    }
}

/// The index of a store whose blocks are fetched on demand, before any is: it
/// holds nothing, so opening reads no part of the index, and every read goes
/// through a view over checked blocks.
#[derive(Clone, Copy, Debug)]
pub struct NotFetched {
    /// Bytes of the whole index.
    pub len: u64,
}

impl IndexSource for NotFetched {
    fn len(&self) -> u64 {
        self.len
    }

    fn bytes(&self, _range: Range<usize>) -> Option<&[u8]> {
        None
    }
}

/// Checked index blocks a read needs: its index source. An entry that crosses
/// from one held block into the next is joined once, when the view is made.
/// Both lists are sorted, so that finding an entry's block is a binary search
/// over the read's own blocks, not a hash per entry.
pub struct HeldBlocks<B> {
    len: u64,
    /// Blocks by number.
    blocks: Vec<(usize, B)>,
    /// Entries across a block boundary, by their first byte.
    joined: Vec<(usize, Box<[u8]>)>,
}

impl<B: AsRef<[u8]> + Send + Sync> IndexSource for HeldBlocks<B> {
    fn len(&self) -> u64 {
        self.len
    }

    #[inline]
    fn bytes(&self, range: Range<usize>) -> Option<&[u8]> {
        held_bytes(
            range,
            |b| {
                let k = self.blocks.binary_search_by_key(&b, |x| x.0).ok()?;
                Some(self.blocks[k].1.as_ref())
            },
            |start| {
                let k = self.joined.binary_search_by_key(&start, |j| j.0).ok()?;
                Some(&self.joined[k].1[..])
            },
        )
    }
}

/// Bytes `range` of an index held in blocks: from the one block they lie in
/// (`block` finds it by number), or from the entry joined across two (`joined`
/// finds it by its first byte).
#[inline]
fn held_bytes<'a>(
    range: Range<usize>,
    block: impl FnOnce(usize) -> Option<&'a [u8]>,
    joined: impl FnOnce(usize) -> Option<&'a [u8]>,
) -> Option<&'a [u8]> {
    let first = range.start / INDEX_BLOCK_BYTES;
    let last = range.end.checked_sub(1)? / INDEX_BLOCK_BYTES;
    if first == last {
        let at = first * INDEX_BLOCK_BYTES;
        return block(first)?.get(range.start - at..range.end - at);
    }
    joined(range.start).filter(|b| b.len() == range.len())
}

/// The entry of `es` bytes that crosses the start of block `edge`, if one
/// does: its first byte and its bytes, from the end of block `edge - 1`
/// (`head`) and the start of block `edge` (`tail`).
fn crossing_entry(edge: usize, es: usize, head: &[u8], tail: &[u8]) -> Option<(usize, Box<[u8]>)> {
    let at = edge.checked_mul(INDEX_BLOCK_BYTES)?;
    let start = at / es * es;
    if edge == 0 || start == at {
        return None;
    }
    let a = head.get(start - (edge - 1) * INDEX_BLOCK_BYTES..)?;
    let z = tail.get(..start + es - at)?;
    Some((start, [a, z].concat().into_boxed_slice()))
}

impl<I: IndexSource> Metadata<I> {
    /// The index blocks the entries of the records at `idx` lie in, sorted and
    /// each once; positions past the end are refused as a gather refuses them.
    pub fn index_blocks(&self, idx: &[u64]) -> Result<Vec<usize>> {
        self.check_positions(idx)?;
        let mut out = Vec::with_capacity(idx.len().min(1 << 16));
        for &i in idx {
            let (first, last) = self.entry_blocks(i);
            out.push(first);
            if last != first {
                out.push(last);
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// The first and last index block the entry of record `i` lies in (the
    /// same block but for an entry across a block boundary). `i` must be a
    /// position of the store, checked before.
    #[inline]
    pub fn entry_blocks(&self, i: u64) -> (usize, usize) {
        let es = self.core().entry_size as u64;
        let bs = INDEX_BLOCK_BYTES as u64;
        // Positions are below the record count, so their entries lie inside
        // an index whose size the header checked.
        let at = i.saturating_mul(es);
        (
            (at / bs) as usize,
            (at.saturating_add(es - 1) / bs) as usize,
        )
    }

    /// The index blocks the entries of the records in `range` lie in.
    pub fn index_blocks_in(&self, range: &Range<u64>) -> Result<Range<usize>> {
        self.check_range(range)?;
        if range.is_empty() {
            return Ok(0..0);
        }
        let es = self.core().entry_size as u64;
        let bs = INDEX_BLOCK_BYTES as u64;
        let first = range.start * es / bs;
        let last = (range.end * es - 1) / bs;
        Ok(first as usize..last as usize + 1)
    }

    /// Index blocks in the whole index.
    pub fn index_block_count(&self) -> usize {
        (self.info().header().index_size as usize).div_ceil(INDEX_BLOCK_BYTES)
    }

    /// Byte range of index block `block` in `index.bin`: what to fetch for it.
    /// Empty past the end of the index.
    pub fn index_block_range(&self, block: usize) -> Range<u64> {
        let r = self.index_block_bytes(block);
        r.start as u64..r.end as u64
    }

    /// Checks `bytes`, read as index block `block`, against `index.sum`
    /// exactly as a local read checks a block: a damaged or replaced block is an
    /// error naming the index and the block.
    pub fn check_index_block<B: AsRef<[u8]>>(
        &self,
        block: usize,
        bytes: B,
    ) -> Result<CheckedBlock<B>> {
        if self.info().header().version < 2 {
            return Err(Error::InvalidArgument(
                "a version 1 store has no block checksums; its index is read whole".into(),
            ));
        }
        self.check_block_sum(block, bytes.as_ref())?;
        Ok(CheckedBlock {
            store: self.info().header().checksum,
            block,
            bytes,
        })
    }

    /// A view of this store whose index is `blocks`: it reads the records
    /// whose entries lie in them (asking for another is an internal error, not
    /// a wrong record). Blocks of another store are refused.
    pub fn with_blocks<B: AsRef<[u8]> + Send + Sync>(
        &self,
        blocks: impl IntoIterator<Item = CheckedBlock<B>>,
    ) -> Result<Metadata<HeldBlocks<B>>> {
        let id = self.info().header().checksum;
        let mut held = Vec::new();
        for b in blocks {
            if b.store != id {
                return Err(Error::Internal(format!(
                    "index block {} of another store was given",
                    b.block
                )));
            }
            held.push((b.block, b.bytes));
        }
        // Callers hand blocks in order; a block given twice is the same checked
        // bytes, kept once.
        if !held.is_sorted_by_key(|b| b.0) {
            held.sort_by_key(|b| b.0);
        }
        held.dedup_by_key(|b| b.0);
        let es = self.core().entry_size;
        let joined = held
            .windows(2)
            .filter(|pair| pair[1].0 == pair[0].0 + 1)
            .filter_map(|pair| {
                crossing_entry(pair[1].0, es, pair[0].1.as_ref(), pair[1].1.as_ref())
            })
            .collect();
        Ok(self.rebind(HeldBlocks {
            len: self.info().header().index_size,
            blocks: held,
            joined,
        }))
    }
}

/// Checked index blocks of one store kept between reads: a set blocks join
/// and leave one at a time, read through [`Metadata::over_held`] with no
/// per-read view to build. Blocks are found by number in a table of every
/// block number up to the highest held (four bytes each: under 1.5 MiB for
/// a billion Dense records), not by hashing, as a read of tiny records looks
/// one up per record; and an entry that crosses from one held block into the
/// next is joined when the second of the two comes in, so a read finds every
/// entry in one lookup.
pub struct HeldIndex<B> {
    store: u64,
    len: u64,
    entry_size: usize,
    /// The place in `blocks` of each block number, `NOT_HELD` for none.
    places: Vec<u32>,
    blocks: Vec<CheckedBlock<B>>,
    /// Entries across a block boundary, by their first byte.
    joined: FxHashMap<usize, Box<[u8]>>,
}

const NOT_HELD: u32 = u32::MAX;

impl<B: AsRef<[u8]>> HeldIndex<B> {
    /// An empty set for the store of `meta`.
    pub fn new<I: IndexSource>(meta: &Metadata<I>) -> HeldIndex<B> {
        HeldIndex {
            store: meta.info().header().checksum,
            len: meta.info().header().index_size,
            entry_size: meta.core().entry_size,
            places: Vec::new(),
            blocks: Vec::new(),
            joined: FxHashMap::default(),
        }
    }

    /// Block `b`, if held.
    #[inline]
    pub fn get(&self, b: usize) -> Option<&CheckedBlock<B>> {
        match *self.places.get(b)? {
            NOT_HELD => None,
            k => self.blocks.get(k as usize),
        }
    }

    /// Whether block `b` is held.
    pub fn contains(&self, b: usize) -> bool {
        self.get(b).is_some()
    }

    /// How many blocks are held.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether no block is held.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The numbers of the blocks held, in no order.
    pub fn numbers(&self) -> impl Iterator<Item = usize> + '_ {
        self.blocks.iter().map(|b| b.block)
    }

    /// Holds `block`; `false` (and nothing held) for a block of another store
    /// or one already held.
    pub fn insert(&mut self, block: CheckedBlock<B>) -> bool {
        let b = block.block;
        let Ok(k) = u32::try_from(self.blocks.len()) else {
            return false;
        };
        if block.store != self.store || self.contains(b) || k == NOT_HELD {
            return false;
        }
        if self.places.len() <= b {
            self.places.resize(b + 1, NOT_HELD);
        }
        self.places[b] = k;
        self.blocks.push(block);
        for edge in [b, b + 1] {
            self.join_at(edge);
        }
        true
    }

    /// Drops block `b`, and the entries joined across its edges.
    pub fn remove(&mut self, b: usize) -> Option<CheckedBlock<B>> {
        let k = match *self.places.get(b)? {
            NOT_HELD => return None,
            k => k as usize,
        };
        self.places[b] = NOT_HELD;
        let gone = self.blocks.swap_remove(k);
        if let Some(moved) = self.blocks.get(k) {
            self.places[moved.block] = k as u32;
        }
        for edge in [b, b + 1] {
            let at = edge.saturating_mul(INDEX_BLOCK_BYTES);
            self.joined
                .remove(&(at / self.entry_size * self.entry_size));
        }
        Some(gone)
    }

    /// Joins the entry across the start of block `edge` if one crosses it and
    /// both its blocks are held.
    fn join_at(&mut self, edge: usize) {
        let Some(before) = edge.checked_sub(1) else {
            return;
        };
        let (Some(head), Some(tail)) = (self.get(before), self.get(edge)) else {
            return;
        };
        if let Some((start, entry)) =
            crossing_entry(edge, self.entry_size, head.bytes(), tail.bytes())
        {
            self.joined.insert(start, entry);
        }
    }
}

impl<B: AsRef<[u8]> + Send + Sync> IndexSource for &HeldIndex<B> {
    fn len(&self) -> u64 {
        self.len
    }

    #[inline]
    fn bytes(&self, range: Range<usize>) -> Option<&[u8]> {
        held_bytes(
            range,
            |b| Some(self.get(b)?.bytes()),
            |start| Some(&self.joined.get(&start)?[..]),
        )
    }
}

impl<I: IndexSource> Metadata<I> {
    /// A view of this store over the blocks `held` holds; `None` if they are
    /// another store's.
    pub fn over_held<'a, B: AsRef<[u8]> + Send + Sync>(
        &self,
        held: &'a HeldIndex<B>,
    ) -> Option<Metadata<&'a HeldIndex<B>>> {
        (held.store == self.info().header().checksum).then(|| self.rebind(held))
    }
}
