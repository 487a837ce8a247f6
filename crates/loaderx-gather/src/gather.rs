//! One batch of a store's records into one block of a placement. The format crate
//! resolves and decodes; this module picks the memory and runs the parts on the
//! engine's threads.

use zrecord::{RaggedLayout, Store};

use crate::error::{Error, Result};
use crate::placement::Placement;
use crate::pool::Block;
use crate::threads::THREADS;

/// The Dense records at `idx`, in order, in one block of `placement`.
pub fn dense(store: &Store, idx: &[u64], placement: &Placement) -> Result<Block> {
    let rb = store.schema().record_bytes().unwrap_or(0);
    let len = u64::try_from(idx.len())
        .ok()
        .and_then(|n| n.checked_mul(rb))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| Error::invalid(format!("{} records do not fit in memory", idx.len())))?;
    placement.fill(len, store.decodes(), |out| {
        Ok(store.gather_dense(idx, out, &THREADS)?)
    })
}

/// The Ragged records at `idx` as values, `cu_seqlens` and shapes in one block
/// of `placement`, laid out as the returned layout says.
pub fn ragged(store: &Store, idx: &[u64], placement: &Placement) -> Result<(Block, RaggedLayout)> {
    let layout = store.ragged_layout(idx)?;
    let block = placement.fill(layout.total, store.decodes(), |out| {
        Ok(store.gather_ragged(idx, &layout, out, &THREADS)?)
    })?;
    Ok((block, layout))
}

/// Checks every record of `store` against its checksum and decodes it, on all
/// the engine's threads.
pub fn verify(store: &Store) -> Result<()> {
    Ok(store.verify(&THREADS)?)
}
