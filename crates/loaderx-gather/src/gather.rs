//! One batch of a store's records into one block of a placement. The format crate
//! resolves and decodes; this module picks the memory and runs the parts on the
//! engine's threads.

use zrecord::{RaggedLayout, Store};

use crate::error::Result;
use crate::placement::Placement;
use crate::pool::Block;
use crate::threads::THREADS;

/// The records at `idx`, in order, in one block of `placement`: Dense records end
/// to end, or a Ragged batch laid out as the returned layout says. Every record is
/// resolved and checked before the block is allocated, so a damaged store cannot
/// make a gather set aside memory its data does not need.
pub fn records(
    store: &Store,
    idx: &[u64],
    placement: &Placement,
) -> Result<(Block, Option<RaggedLayout>)> {
    let plan = store.plan(idx)?;
    let block = placement.fill(plan.output_len(), store.decodes(), |out| {
        Ok(store.gather(&plan, out, &THREADS)?)
    })?;
    Ok((block, plan.layout().cloned()))
}

/// Checks every record of `store` against its checksum and decodes it, on all
/// the engine's threads.
pub fn verify(store: &Store) -> Result<()> {
    Ok(store.verify(&THREADS)?)
}

/// [`verify`] of the records in `range` only (see [`Store::verify_records`]).
pub fn verify_records(store: &Store, range: std::ops::Range<u64>) -> Result<()> {
    Ok(store.verify_records(range, &THREADS)?)
}
