//! What the bindings read records through: one trait for every kind of store,
//! implemented here for a local [`Store`] and by `loaderx-remote` for a store in
//! object storage. A gather is one call through the trait; inside it, the
//! format crate reads every record through one concrete source, with no call
//! per record looked up at run time.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use zrecord::{RaggedLayout, Store, StoreInfo};

use crate::allocator::Allocator;
use crate::background;
use crate::error::Result;
use crate::pool::Block;
use crate::threads::THREADS;

/// A gather's output: one block holding the records in order (Dense records
/// end to end, or a Ragged batch laid out as the layout says).
pub type Records = (Block, Option<RaggedLayout>);

/// Each record's logical and stored byte counts, from the index alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordSizes {
    /// Bytes each record decodes to.
    pub logical: Vec<u64>,
    /// Bytes each record takes in its data file.
    pub stored: Vec<u64>,
}

/// A store's records, wherever they are.
pub trait RecordSource: Send + Sync + 'static {
    /// What the store's small files say: schema, header, attributes, dictionary.
    fn info(&self) -> &StoreInfo;

    /// The URL the store was read from; `None` for a local store.
    fn url(&self) -> Option<&str> {
        None
    }

    /// The records at `idx`, in order, in one block of `allocator`. Every
    /// record is resolved and checked before the block is allocated, so a
    /// damaged store cannot make a gather set aside memory its data does not
    /// need.
    fn records(&self, idx: &[u64], allocator: &Allocator) -> Result<Records>;

    /// Bytes this store's reads moved in this process since it was opened:
    /// `(fetched from object storage, read from the block cache)`; `(0, 0)`
    /// for a local store.
    fn traffic(&self) -> (u64, u64) {
        (0, 0)
    }

    /// Starts the gather of `idx` into one block of `allocator` and returns
    /// at once; positions are checked here. By default the gather runs on the
    /// process's background gather thread ([`crate::background`]), behind the
    /// gathers begun before it; a source whose records take time to arrive
    /// sends its requests instead, and decodes when the gather is finished.
    fn begin(self: Arc<Self>, idx: Vec<u64>, allocator: Allocator) -> Result<Box<dyn Begun>> {
        let len = self.info().len();
        if let Some(&bad) = idx.iter().find(|&&i| i >= len) {
            return Err(zrecord::Error::OutOfRange {
                index: i128::from(bad),
                len,
            }
            .into());
        }
        let n = idx.len();
        background::begin(n, Box::new(move || self.records(&idx, &allocator)))
    }

    /// Begins fetching, in the background, what a gather of `idx` soon will
    /// need, without waiting and without changing what any gather returns.
    /// Returns how many steps the call covers, this one first: 0 says the
    /// source did nothing now (it holds as much fetched ahead as it may, or
    /// waits to learn whether what it fetched lately is still held; the
    /// caller tries again later, for the same step), 1 that it began or had nothing to do (as a
    /// local store never has), and `n > 1` that the caller need not warm the
    /// next `n - 1` steps either (the source found everything held lately).
    fn warm(&self, _idx: &[u64]) -> Result<u64> {
        Ok(1)
    }

    /// Stops what [`RecordSource::warm`] began and forgets what it fetched
    /// ahead (which stays wherever it was kept).
    fn cancel_warm(&self) {}

    /// The part of a verify that is not per record: the whole index against its
    /// checksum, and every data file at the header's size.
    fn verify_files(&self) -> Result<()>;

    /// The per-record part of a verify, for the records in `range`: every
    /// record's stored bytes against their checksum, and its decoding.
    fn verify_records(&self, range: Range<u64>) -> Result<()>;

    /// Checks the whole store: [`RecordSource::verify_files`], then every record.
    fn verify(&self) -> Result<()> {
        self.verify_files()?;
        self.verify_records(0..self.info().len())
    }

    /// Calls `each(logical, stored)` for every record in `range`, in order,
    /// from the index alone (see [`zrecord::Metadata::record_sizes`]).
    fn each_size(&self, range: Range<u64>, each: &mut dyn FnMut(u64, u64)) -> Result<()>;

    /// Calls `each(length)` for every record in `range` of a Ragged store, in
    /// order: its length along axis 0, from the index alone (see
    /// [`zrecord::Metadata::record_lengths`]).
    fn each_length(&self, range: Range<u64>, each: &mut dyn FnMut(u64)) -> Result<()>;

    /// The lengths along axis 0 of the Ragged records in `range`, from the
    /// index alone.
    fn record_lengths(&self, range: Range<u64>) -> Result<Vec<u64>> {
        let n = range.end.saturating_sub(range.start).min(self.info().len());
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        let mut lengths = Vec::new();
        lengths
            .try_reserve_exact(n)
            .map_err(|_| zrecord::Error::OutOfMemory {
                bytes: n.saturating_mul(8),
            })?;
        self.each_length(range, &mut |l| lengths.push(l))?;
        Ok(lengths)
    }

    /// The sizes of the records in `range`, from the index alone.
    fn record_sizes(&self, range: Range<u64>) -> Result<RecordSizes> {
        let n = range.end.saturating_sub(range.start).min(self.info().len());
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        let oom = |_| zrecord::Error::OutOfMemory {
            bytes: n.saturating_mul(8),
        };
        let mut sizes = RecordSizes::default();
        sizes.logical.try_reserve_exact(n).map_err(oom)?;
        sizes.stored.try_reserve_exact(n).map_err(oom)?;
        self.each_size(range, &mut |l, s| {
            sizes.logical.push(l);
            sizes.stored.push(s);
        })?;
        Ok(sizes)
    }
}

/// A gather begun by [`RecordSource::begin`]: its records are on their way.
/// Dropping it unfinished cancels what has not started.
pub trait Begun: Send + Sync {
    /// How many records the gather returns.
    fn len(&self) -> usize;

    /// Whether the gather returns no records.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops what has not happened yet, even while another thread waits in
    /// [`Begun::finish`], which then fails: requests still in flight, or a
    /// background gather that has not started (one already running
    /// completes). A no-op once the records are in.
    fn cancel(&self);

    /// Whether [`Begun::finish`] would return without waiting.
    fn is_ready(&self) -> bool;

    /// How long a background thread spent on the gather, once it ran; `None`
    /// while it has not, and for a gather whose work happens in
    /// [`Begun::finish`].
    fn work_time(&self) -> Option<Duration> {
        None
    }

    /// Waits for the records, in one block of the allocator the gather was
    /// begun with. A gather finishes once; a second call is refused.
    fn finish(&self) -> Result<Records>;
}

impl RecordSource for Store {
    fn info(&self) -> &StoreInfo {
        Store::info(self)
    }

    fn records(&self, idx: &[u64], allocator: &Allocator) -> Result<Records> {
        let plan = self.plan(idx, &THREADS)?;
        let block = allocator.fill(plan.output_len(), self.decodes(), |out| {
            Ok(self.gather(&plan, out, &THREADS)?)
        })?;
        Ok((block, plan.layout().cloned()))
    }

    fn verify_files(&self) -> Result<()> {
        Ok(Store::verify_files(self)?)
    }

    fn verify_records(&self, range: Range<u64>) -> Result<()> {
        Ok(Store::verify_records(self, range, &THREADS)?)
    }

    fn each_size(&self, range: Range<u64>, each: &mut dyn FnMut(u64, u64)) -> Result<()> {
        Ok(Store::record_sizes(self, range, each)?)
    }

    fn each_length(&self, range: Range<u64>, each: &mut dyn FnMut(u64)) -> Result<()> {
        Ok(Store::record_lengths(self, range, each)?)
    }
}
