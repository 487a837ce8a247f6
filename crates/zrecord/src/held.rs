//! An index read in part, for a store whose index is fetched on demand: the
//! caller asks which index blocks a read needs ([`Metadata::index_blocks`]),
//! fetches them however it likes, has each checked against `index.sum` as it
//! comes in ([`Metadata::check_index_block`]), and reads through a view of the
//! store over the blocks it holds ([`Metadata::with_blocks`]). A view is built
//! from checked blocks only, so its entries need no further look, and a block
//! evicted and fetched again is checked again.

use std::ops::Range;

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
        let first = range.start / INDEX_BLOCK_BYTES;
        let last = range.end.checked_sub(1)? / INDEX_BLOCK_BYTES;
        if first == last {
            let at = first * INDEX_BLOCK_BYTES;
            let k = self.blocks.binary_search_by_key(&first, |b| b.0).ok()?;
            return self.blocks[k]
                .1
                .as_ref()
                .get(range.start - at..range.end - at);
        }
        let k = self
            .joined
            .binary_search_by_key(&range.start, |j| j.0)
            .ok()?;
        Some(&self.joined[k].1[..]).filter(|b| b.len() == range.len())
    }
}

impl<I: IndexSource> Metadata<I> {
    /// The index blocks the entries of the records at `idx` lie in, sorted and
    /// each once; positions past the end are refused as a gather refuses them.
    pub fn index_blocks(&self, idx: &[u64]) -> Result<Vec<usize>> {
        self.check_positions(idx)?;
        let es = self.core().entry_size as u64;
        let bs = INDEX_BLOCK_BYTES as u64;
        let mut out = Vec::with_capacity(idx.len().min(1 << 16));
        for &i in idx {
            // Positions are below the record count, so their entries lie inside
            // an index whose size the header checked.
            let at = i * es;
            out.push((at / bs) as usize);
            out.push(((at + es - 1) / bs) as usize);
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
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
        let mut joined = Vec::new();
        for pair in held.windows(2) {
            let ((b, first), (next_b, next)) = (&pair[0], &pair[1]);
            if *next_b != b + 1 {
                continue;
            }
            let edge = (b + 1) * INDEX_BLOCK_BYTES;
            let start = edge / es * es;
            if start == edge {
                continue;
            }
            let (head, tail) = (first.as_ref(), next.as_ref());
            let from = start - b * INDEX_BLOCK_BYTES;
            let need = start + es - edge;
            if let (Some(a), Some(z)) = (head.get(from..), tail.get(..need)) {
                joined.push((start, [a, z].concat().into_boxed_slice()));
            }
        }
        Ok(self.rebind(HeldBlocks {
            len: self.info().header().index_size,
            blocks: held,
            joined,
        }))
    }
}
