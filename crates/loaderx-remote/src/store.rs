//! A store read from object storage.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use loaderx_gather::{background, Allocator, Begun, Error, RecordSource, Records, Result, THREADS};
use xxhash_rust::xxh3::xxh3_64;
use zrecord::{
    data_file, Entry, IndexSource, Metadata, Parts, PayloadSource, Plan, ReadOptions, StoreInfo,
    VERIFY_STEP_BYTES,
};

use crate::cache::Cache;
use crate::fetch::{join_parts, plan_ranges, plan_requests, BlockKey, Fetcher, Request, Spans};
use crate::index::{Blocks, Memory, RemoteIndex, Use, View, INDEX_KEY, STEP_BLOCKS};
use crate::location::Location;
use crate::options::{FetchOptions, OptionValue};
use crate::runtime::{block_on, pid, spawn};

mod ahead;
mod open;
mod passed;
mod pending;
mod warm;

use ahead::Ahead;
use open::{check_sizes, open_parts};
use pending::{Arrival, BegunGather, Fetched, Payload, Planning};
pub use pending::{Canceller, Pending};

/// Most records whose entries a verify resolves at once. With about
/// [`VERIFY_STEP_BYTES`] of stored bytes fetched before they are checked, verify
/// streams the data files in steps rather than holding them.
const VERIFY_RECORDS: u64 = 1 << 16;

/// An opened remote store: its small files read and checked, its data files'
/// sizes checked, and what fetches its records. Cloning it is cheap and shares
/// everything, as the gathers it begins do.
#[derive(Clone)]
pub struct RemoteStore(Arc<Shared>);

struct Shared {
    loc: Location,
    opts: FetchOptions,
    /// The fetcher and the process that made it: a forked child makes its own,
    /// since the parent's connections and waiting requests belong to the
    /// parent's runtime.
    fetcher: Mutex<(u32, Arc<Fetcher>)>,
    meta: Metadata<RemoteIndex>,
    /// Index blocks kept between reads.
    index: Memory,
    /// Whether the index is fetched on demand rather than read whole at open.
    on_demand: bool,
    /// The data files' sizes from the header, shared with every fetch.
    sizes: Arc<[u64]>,
    cache: Option<Arc<Cache>>,
    /// The data blocks the cache keeps in memory, as the gathers that find
    /// them all there see them; with the cache.
    kept: Option<warm::KeptData>,
    /// What the Loader reads ahead of its gathers.
    ahead: Arc<Ahead>,
    /// Whether the last gather begun found every block it needed in memory:
    /// the next is looked up on the background gather thread, not the
    /// caller's ([`warm::begin_behind`]).
    warm_streak: AtomicBool,
}

/// Everything a fetch needs, owned, so that it can run on the runtime while the
/// caller goes on.
#[derive(Clone)]
struct Source {
    fetcher: Arc<Fetcher>,
    cache: Option<Arc<Cache>>,
    sizes: Arc<[u64]>,
    /// The header checksum: the store's identity in the cache.
    id: u64,
    /// Told of the blocks a gather used, which read-ahead no longer holds.
    ahead: Arc<Ahead>,
}

fn corrupt(url: String, msg: impl Into<String>) -> Error {
    zrecord::Error::Corrupt {
        path: PathBuf::from(url),
        record: None,
        msg: msg.into(),
    }
    .into()
}

impl RemoteStore {
    /// Opens the store at `url`. `options` are storage options (see
    /// [`Location::parse`]); `cache`, when given, keeps fetched blocks and the
    /// store's index on local disk. Every record read is checked against its
    /// checksum before it is decoded, whatever the cache or the network did.
    pub fn open(
        url: &str,
        options: &[(String, OptionValue)],
        cache: Option<Arc<Cache>>,
    ) -> Result<RemoteStore> {
        let (loc, opts) = Location::parse(url, options)?;
        let fetcher = Arc::new(Fetcher::new(&loc, &opts)?);
        let meta = block_on(fetcher.bounded(open_parts(&fetcher, cache.as_deref())))?;
        let budget = ahead::budget(
            opts.read_ahead_bytes,
            cache.as_deref(),
            opts.index_memory_bytes,
        );
        Ok(RemoteStore(Arc::new(Shared {
            ahead: Arc::new(Ahead::new(budget, cache.is_some())),
            loc,
            on_demand: meta.info().header().version >= 2,
            index: Memory::new(opts.index_memory_bytes, &meta),
            opts,
            fetcher: Mutex::new((pid(), fetcher)),
            sizes: meta.info().header().shard_sizes.as_slice().into(),
            kept: cache.as_ref().map(|c| {
                warm::KeptData::new(
                    &meta.info().header().shard_sizes,
                    c.block_bytes(),
                    meta.len(),
                )
            }),
            meta,
            cache,
            warm_streak: AtomicBool::new(false),
        })))
    }

    /// The store's URL.
    pub fn url(&self) -> &str {
        self.0.loc.url()
    }

    /// The store's metadata: its header and schema. Its index is fetched on
    /// demand, block by block, for each read (a version 1 store's, which has
    /// no block checksums, is read whole at open).
    pub fn meta(&self) -> &Metadata<impl IndexSource> {
        &self.0.meta
    }

    /// The store over the index blocks `needed`, from memory, the cache or
    /// object storage as `how` allows; `None` when the index was read whole.
    async fn view(
        &self,
        fetcher: &Fetcher,
        needed: Option<Vec<usize>>,
        how: Use,
    ) -> Result<Option<View>> {
        let Some(needed) = needed else {
            return Ok(None);
        };
        let blocks = Blocks {
            meta: &self.0.meta,
            fetcher,
            cache: self.0.cache.as_ref(),
            memory: &self.0.index,
        };
        let got = blocks.get(&needed, how).await?;
        Ok(Some(self.0.meta.with_blocks(got)?))
    }

    /// The view over the index blocks of the records in `range`, fetched now.
    fn range_view(&self, range: &Range<u64>, how: Use) -> Result<Option<View>> {
        if !self.on_demand() {
            return Ok(None);
        }
        let needed: Vec<usize> = self.0.meta.index_blocks_in(range)?.collect();
        let source = self.source()?;
        block_on(
            source
                .fetcher
                .bounded(self.view(&source.fetcher, Some(needed), how)),
        )
    }

    fn on_demand(&self) -> bool {
        self.0.on_demand
    }

    /// Records of a step over a range: those whose entries fill about
    /// [`STEP_BLOCKS`] index blocks.
    fn step_records(&self) -> u64 {
        let es = self.0.meta.info().schema().entry_size() as u64;
        (STEP_BLOCKS as u64 * zrecord::INDEX_BLOCK_BYTES as u64 / es).max(1)
    }

    /// How the store fetches.
    pub fn fetch_options(&self) -> &FetchOptions {
        &self.0.opts
    }

    /// The cache, if the store has one.
    pub fn cache(&self) -> Option<&Cache> {
        self.0.cache.as_deref()
    }

    fn source(&self) -> Result<Source> {
        let s = &self.0;
        let mut guard = s.fetcher.lock().unwrap_or_else(|e| e.into_inner());
        if guard.0 != pid() {
            let fresh = Arc::new(Fetcher::for_opened(&s.loc, &s.opts)?);
            let old = std::mem::replace(&mut *guard, (pid(), fresh));
            std::mem::forget(old);
        }
        Ok(Source {
            fetcher: guard.1.clone(),
            cache: s.cache.clone(),
            sizes: s.sizes.clone(),
            id: s.meta.info().header().checksum,
            ahead: s.ahead.clone(),
        })
    }

    /// Starts fetching the stored bytes of the records at `idx` (from the cache
    /// where it holds them) and returns at once. Positions are checked here.
    /// The requests share the store's budget of requests in flight with every
    /// other gather begun and not finished. A gather whose blocks this process
    /// holds in memory is read here, before it returns.
    pub fn begin(&self, idx: &[u64]) -> Result<Pending> {
        match self.warm_fetched(idx)? {
            Some(fetched) => Ok(self.here(idx.to_vec(), fetched)),
            None => self.fetching(idx),
        }
    }

    /// A gather of `idx` whose stored bytes, `fetched`, were all in memory.
    fn here(&self, idx: Vec<u64>, fetched: Fetched) -> Pending {
        Pending {
            store: self.clone(),
            idx,
            pid: pid(),
            bytes: Arrival::Here(fetched),
        }
    }

    /// [`RemoteStore::begin`] for a gather whose blocks are not all in memory:
    /// its requests sent, not waited for.
    fn fetching(&self, idx: &[u64]) -> Result<Pending> {
        // Positions are checked here, before anything is fetched.
        let blocks = self.0.meta.index_blocks(idx)?;
        let needed = self.on_demand().then_some(blocks);
        let source = self.source()?;
        let (store, ids) = (self.clone(), idx.to_vec());
        let task = spawn(async move {
            let fetcher = source.fetcher.clone();
            // One deadline for the gather: its index blocks and its records.
            let (view, entries, spans, cached) = fetcher
                .bounded(async {
                    let used: Vec<usize> = needed.iter().flatten().copied().collect();
                    let view = store.view(&source.fetcher, needed, Use::Gather).await?;
                    source
                        .ahead
                        .used(used.into_iter().map(|b| (INDEX_KEY, b as u64)));
                    let entries = match &view {
                        Some(v) => v.entries(&ids)?,
                        None => store.0.meta.entries(&ids)?,
                    };
                    let (spans, cached) = source.fetch(&entries, true).await?;
                    Ok::<_, Error>((view, entries, spans, cached))
                })
                .await?;
            Ok(Fetched {
                planning: view.map_or(Planning::Index, Planning::View),
                entries,
                payload: Payload::Spans(spans, cached),
            })
        })?;
        Ok(Pending {
            store: self.clone(),
            idx: idx.to_vec(),
            pid: pid(),
            bytes: Arrival::Fetching(task),
        })
    }

    /// Decodes the records at `idx`, whose checked `entries` are those, from
    /// `spans`: planned from the entries alone where the store allows it (no
    /// entry read again), otherwise through `view`, or the index read whole.
    fn fill<S: PayloadSource>(
        &self,
        planning: &Planning,
        idx: &[u64],
        entries: &[Entry],
        spans: &S,
        allocator: &Allocator,
    ) -> Result<Records> {
        let meta = &self.0.meta;
        if let Some(plan) = meta.plan_entries(idx, entries)? {
            return fill(meta, &plan, spans, allocator);
        }
        match planning {
            Planning::View(v) => fill(v, &v.plan(idx, spans, &THREADS)?, spans, allocator),
            Planning::Index => fill(meta, &meta.plan(idx, spans, &THREADS)?, spans, allocator),
            Planning::Resolved(sizes) => {
                let plan = meta.plan_resolved(idx, entries, sizes, spans)?;
                fill(meta, &plan, spans, allocator)
            }
        }
    }

    /// The part of a verify that is not per record: the whole index against its
    /// checksum (streamed from object storage a step at a time, each block
    /// checked as it comes), and every data file at the header's size.
    pub fn verify_files(&self) -> Result<()> {
        let source = self.source()?;
        let meta = &self.0.meta;
        if !self.on_demand() {
            meta.check_index()?;
        } else {
            let blocks = Blocks {
                meta,
                fetcher: &source.fetcher,
                cache: None,
                memory: &self.0.index,
            };
            let mut whole = xxhash_rust::xxh3::Xxh3::new();
            let all: Vec<usize> = (0..meta.index_block_count()).collect();
            for step in all.chunks(STEP_BLOCKS) {
                for b in block_on(source.fetcher.bounded(blocks.get(step, Use::Verify)))? {
                    whole.update(b.bytes());
                }
            }
            meta.check_index_digest(whole.digest())?;
        }
        block_on(
            source
                .fetcher
                .bounded(check_sizes(&source.fetcher, &source.sizes)),
        )
    }

    /// The per-record part of a verify for the records in `range`, as a local
    /// verify checks them. The data files are streamed from object storage
    /// (never from the cache) a bounded step at a time.
    pub fn verify_records(&self, range: Range<u64>) -> Result<()> {
        let n = self.0.meta.len();
        if range.start > range.end || range.end > n {
            return Err(Error::invalid(format!(
                "records {}..{} are not a range of a store of {n} records",
                range.start, range.end
            )));
        }
        let mut start = range.start;
        while start < range.end {
            let stop = range.end.min(start + VERIFY_RECORDS);
            let view = self.range_view(&(start..stop), Use::Scan)?;
            let ids: Vec<u64> = (start..stop).collect();
            let mut entries = match &view {
                Some(v) => v.entries(&ids)?,
                None => self.0.meta.entries(&ids)?,
            };
            let mut bytes = 0u64;
            let keep = entries
                .iter()
                .position(|e| {
                    bytes += u64::from(e.stored_len);
                    bytes >= VERIFY_STEP_BYTES
                })
                .map_or(entries.len(), |k| k + 1);
            entries.truncate(keep);
            let end = start + keep as u64;
            let source = self.source()?;
            let step = source.fetch(&entries, false);
            let (spans, _) = block_on(source.fetcher.bounded(step))?;
            match &view {
                Some(v) => v.verify_records(start..end, &THREADS, &spans)?,
                None => self.0.meta.verify_records(start..end, &THREADS, &spans)?,
            }
            start = end;
        }
        Ok(())
    }
}

impl RecordSource for RemoteStore {
    fn info(&self) -> &StoreInfo {
        self.meta().info()
    }

    fn url(&self) -> Option<&str> {
        Some(RemoteStore::url(self))
    }

    fn traffic(&self) -> (u64, u64) {
        let fetcher = self.0.fetcher.lock().unwrap_or_else(|e| e.into_inner());
        fetcher.1.traffic.totals()
    }

    fn records(&self, idx: &[u64], allocator: &Allocator) -> Result<Records> {
        RemoteStore::begin(self, idx)?.finish(allocator)
    }

    fn begin(self: Arc<Self>, idx: Vec<u64>, allocator: Allocator) -> Result<Box<dyn Begun>> {
        if self.0.warm_streak.load(Ordering::Relaxed) {
            return warm::begin_behind(self, idx, allocator);
        }
        let pending = RemoteStore::begin(&self, &idx)?;
        if pending.is_here() {
            // Only the decode is left: it runs on the background gather thread,
            // behind the gathers begun before it, as a local store's gather does,
            // so that a caller begins the next steps meanwhile.
            self.0.warm_streak.store(true, Ordering::Relaxed);
            let n = pending.len();
            return background::begin(n, Box::new(move || pending.finish(&allocator)));
        }
        Ok(Box::new(BegunGather {
            len: pending.len(),
            canceller: pending.canceller(),
            pending: Mutex::new(Some(pending)),
            allocator,
        }))
    }

    fn verify_files(&self) -> Result<()> {
        RemoteStore::verify_files(self)
    }

    fn warm(&self, idx: &[u64]) -> Result<u64> {
        RemoteStore::warm(self, idx)
    }

    fn cancel_warm(&self) {
        RemoteStore::cancel_warm(self)
    }

    fn verify_records(&self, range: Range<u64>) -> Result<()> {
        RemoteStore::verify_records(self, range)
    }

    fn each_size(&self, range: Range<u64>, each: &mut dyn FnMut(u64, u64)) -> Result<()> {
        self.scan(range, |m, r| match m {
            Scanned::Whole(m) => Ok(m.record_sizes(r, &mut *each)?),
            Scanned::View(v) => Ok(v.record_sizes(r, &mut *each)?),
        })
    }

    fn each_length(&self, range: Range<u64>, each: &mut dyn FnMut(u64)) -> Result<()> {
        // The kind and the range are checked before any block is fetched.
        self.0
            .meta
            .record_lengths(range.start..range.start, |_| {})?;
        self.scan(range, |m, r| match m {
            Scanned::Whole(m) => Ok(m.record_lengths(r, &mut *each)?),
            Scanned::View(v) => Ok(v.record_lengths(r, &mut *each)?),
        })
    }
}

/// What a step of a scan reads its records' entries through.
enum Scanned<'a> {
    /// The store, whose index was read whole at open.
    Whole(&'a Metadata<RemoteIndex>),
    /// A view over the index blocks of the step's records.
    View(&'a View),
}

impl RemoteStore {
    /// Calls `step` over the records of `range` in steps of about
    /// [`STEP_BLOCKS`] index blocks, each step's blocks fetched (or read from
    /// memory or the cache) first and held only for the step.
    fn scan(
        &self,
        range: Range<u64>,
        mut step: impl FnMut(Scanned<'_>, Range<u64>) -> Result<()>,
    ) -> Result<()> {
        let meta = &self.0.meta;
        if !self.on_demand() {
            return step(Scanned::Whole(meta), range);
        }
        meta.index_blocks_in(&range)?;
        let per = self.step_records();
        let mut start = range.start;
        while start < range.end {
            let stop = range.end.min(start.saturating_add(per));
            if let Some(v) = self.range_view(&(start..stop), Use::Scan)? {
                step(Scanned::View(&v), start..stop)?;
            }
            start = stop;
        }
        Ok(())
    }
}

/// Plans and decodes a gather over `meta`, the store or a view of it.
fn fill<I: IndexSource, S: PayloadSource>(
    meta: &Metadata<I>,
    plan: &Plan<'_>,
    spans: &S,
    allocator: &Allocator,
) -> Result<Records> {
    let block = allocator.fill(plan.output_len(), meta.info().decodes(), |out| {
        Ok(meta.gather(plan, out, &THREADS, spans)?)
    })?;
    Ok((block, plan.layout().cloned()))
}

/// Bytes of block `b` (of `bs` bytes) of data file `file`, of the data files
/// of `sizes`: the block size but for a file's last block.
fn block_len(sizes: &[u64], bs: u64, file: usize, b: u64) -> u64 {
    let size = sizes.get(file).copied().unwrap_or(0);
    bs.min(size.saturating_sub(b * bs))
}

impl Source {
    /// The stored bytes of `entries`, and which cached blocks they came from.
    /// Without a cache (or with `use_cache` false) the planned requests go to
    /// object storage as they are. With one, the requests are cut at block
    /// bounds: what the cache holds is read from it (only the bytes needed),
    /// the missing blocks are fetched whole, in runs of neighbours, and kept. A
    /// block another gather of this store is fetching meanwhile is waited for
    /// and read from the cache, not fetched twice.
    async fn fetch(&self, entries: &[Entry], use_cache: bool) -> Result<(Spans, Vec<BlockKey>)> {
        let sizes = &self.sizes;
        let opts = self.fetcher.opts();
        let cache = self.cache.as_ref().filter(|_| use_cache);
        // Records close together share a request to object storage, which
        // costs a round trip; from the cache each is read on its own, since the
        // bytes between them would only be copied for nothing.
        let gap = if cache.is_some() {
            0
        } else {
            opts.coalesce_gap
        };
        let requests = plan_requests(entries, sizes.len(), gap, opts.max_request_bytes);
        let mut spans = Spans::new(sizes.len());
        let Some(cache) = cache else {
            let got = self.fetcher.fetch_all(&requests).await?;
            for (r, b) in requests.iter().zip(got) {
                spans.insert(r.file, r.range.start, b);
            }
            spans.sort();
            return Ok((spans, Vec::new()));
        };
        let bs = cache.block_bytes();
        // Per block touched, the parts of the requests inside it (relative to
        // the block's start), in order; requests are disjoint, so are the parts.
        let mut need: BTreeMap<BlockKey, Vec<Range<u64>>> = BTreeMap::new();
        for r in &requests {
            for b in r.range.start / bs..=(r.range.end - 1) / bs {
                let lo = r.range.start.max(b * bs) - b * bs;
                let hi = r.range.end.min(b * bs + self.block_len(bs, r.file, b)) - b * bs;
                need.entry((r.file, b)).or_default().push(lo..hi);
            }
        }
        // What was read, by data file and offset: a part of a request read from
        // the cache, or a whole block fetched.
        let mut pieces: BTreeMap<(usize, u64), Bytes> = BTreeMap::new();
        let mut cached = Vec::new();
        let touched: Vec<BlockKey> = need.keys().copied().collect();
        let mut missing = self
            .read_cached(cache, need.into_iter().collect(), &mut pieces, &mut cached)
            .await?;
        // Blocks of which this gather uses little (the first steps of a pass
        // over a cold cache: small records scattered over a window of blocks)
        // are not waited for: its own bytes of them are fetched now, as
        // without a cache, and the blocks come whole behind it.
        let sparse = self.take_sparse(&mut missing, bs);
        // Begun now, not once the parts are in: the gathers begun beside this
        // one then find the blocks on their way and wait for them, where each
        // would otherwise send hundreds of requests for its own parts, ahead
        // of the blocks' own requests.
        if !sparse.is_empty() {
            self.fetch_behind(cache, sparse.keys().copied());
        }
        let claimed = self.fetcher.claim_blocks(missing.keys().copied());
        let fetch_mine = async {
            let got = self.fetch_claimed(cache, claimed.keys()).await;
            claimed.release();
            got
        };
        let (mine, (), parts) = futures::join!(
            fetch_mine,
            async {
                for (_, done) in claimed.others() {
                    // Closed when the other gather's fetch ends, however it ends.
                    let _ = done.acquire().await;
                }
            },
            self.fetch_parts(&sparse, bs)
        );
        pieces.extend(parts?);
        let (mine, theirs) = mine?;
        for ((file, b), bytes) in mine {
            pieces.insert((file, b * bs), bytes);
        }
        // Blocks another gather of this process or another process fetched.
        let others: Vec<(BlockKey, Vec<Range<u64>>)> = claimed
            .others()
            .map(|(k, _)| k)
            .chain(theirs)
            .filter_map(|k| missing.remove_entry(&k))
            .collect();
        drop(claimed);
        if !others.is_empty() {
            // Read back what the others fetched; what they failed to fetch or to
            // keep is fetched here.
            let still = self
                .read_cached(cache, others, &mut pieces, &mut cached)
                .await?;
            let keys: Vec<BlockKey> = still.into_keys().collect();
            for ((file, b), bytes) in self.fetch_blocks(cache, &keys).await? {
                pieces.insert((file, b * bs), bytes);
            }
        }
        for r in &requests {
            // The request's bytes inside block `b`: the piece that starts at
            // them (read from the cache) or at the block (fetched whole).
            let part = |b: u64| -> Result<Bytes> {
                let lo = r.range.start.max(b * bs);
                let hi = r.range.end.min(b * bs + bs);
                let (at, bytes) = match pieces.get(&(r.file, lo)) {
                    Some(p) => (lo, p),
                    None => (
                        b * bs,
                        pieces.get(&(r.file, b * bs)).ok_or_else(|| {
                            Error::internal(format!(
                                "block {b} of data file {} was not read",
                                r.file
                            ))
                        })?,
                    ),
                };
                let (from, to) = ((lo - at) as usize, (hi - at) as usize);
                if to > bytes.len() {
                    return Err(Error::internal(format!(
                        "block {b} of data file {} was read short",
                        r.file
                    )));
                }
                Ok(bytes.slice(from..to))
            };
            spans.insert(r.file, r.range.start, join_parts(&r.range, bs, part)?);
        }
        spans.sort();
        // Used now, wherever they came from: read-ahead no longer holds them.
        // The blocks behind it stay counted until they are in.
        self.ahead
            .used(touched.into_iter().filter(|k| !sparse.contains_key(k)));
        Ok((spans, cached))
    }

    /// The parts `sparse` names of blocks not fetched whole, by data file and
    /// offset.
    async fn fetch_parts(
        &self,
        sparse: &BTreeMap<BlockKey, Vec<Range<u64>>>,
        bs: u64,
    ) -> Result<Vec<((usize, u64), Bytes)>> {
        if sparse.is_empty() {
            return Ok(Vec::new());
        }
        let mut per: Vec<Vec<Range<u64>>> = vec![Vec::new(); self.sizes.len()];
        for (&(file, b), parts) in sparse {
            if let Some(v) = per.get_mut(file) {
                v.extend(parts.iter().map(|r| b * bs + r.start..b * bs + r.end));
            }
        }
        // Only touching parts are merged: the bytes between them, which a
        // gather without a cache fetches to save requests, would be fetched
        // again with their blocks.
        let requests = plan_ranges(per, 0, self.fetcher.opts().max_request_bytes);
        let got = self.fetcher.fetch_all(&requests).await?;
        let mut out = Vec::new();
        for (&(file, b), parts) in sparse {
            for r in parts {
                let (start, end) = (b * bs + r.start, b * bs + r.end);
                // The request it lies in: the last to begin at or before it.
                let k = requests
                    .partition_point(|q| (q.file, q.range.start) <= (file, start))
                    .checked_sub(1);
                let piece = k.and_then(|k| {
                    let (q, bytes) = (&requests[k], &got[k]);
                    let (from, to) = (
                        (start - q.range.start) as usize,
                        (end - q.range.start) as usize,
                    );
                    (q.file == file && to <= bytes.len()).then(|| bytes.slice(from..to))
                });
                let piece = piece.ok_or_else(|| {
                    Error::internal(format!(
                        "bytes {start}..{end} of data file {file} were not fetched"
                    ))
                })?;
                out.push(((file, start), piece));
            }
        }
        Ok(out)
    }

    /// Bytes of block `b` of data file `file`: the block size but for a file's
    /// last block.
    fn block_len(&self, bs: u64, file: usize, b: u64) -> u64 {
        block_len(&self.sizes, bs, file, b)
    }

    /// Reads the parts `lookups` names of cached blocks into `pieces` (by data
    /// file and offset), noting each block read in `cached`; returns the
    /// lookups of the blocks the cache lacks.
    async fn read_cached(
        &self,
        cache: &Arc<Cache>,
        lookups: Vec<(BlockKey, Vec<Range<u64>>)>,
        pieces: &mut BTreeMap<(usize, u64), Bytes>,
        cached: &mut Vec<BlockKey>,
    ) -> Result<BTreeMap<BlockKey, Vec<Range<u64>>>> {
        let bs = cache.block_bytes();
        let lens: Vec<u64> = lookups
            .iter()
            .map(|((file, b), _)| self.block_len(bs, *file, *b))
            .collect();
        let (id, c) = (self.id, cache.clone());
        let found = tokio::task::spawn_blocking(move || {
            lookups
                .into_iter()
                .zip(lens)
                .map(|(((file, b), ranges), len)| {
                    let got = c.read(id, &data_file(file), b, len, &ranges);
                    ((file, b), ranges, got)
                })
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| Error::internal(format!("reading the cache did not complete: {e}")))?;
        let mut missing = BTreeMap::new();
        for ((file, b), ranges, got) in found {
            match got {
                Some(parts) => {
                    for (r, bytes) in ranges.iter().zip(parts) {
                        self.fetcher.traffic.add_from_cache(bytes.len());
                        pieces.insert((file, b * bs + r.start), bytes);
                    }
                    cached.push((file, b));
                }
                None => {
                    missing.insert((file, b), ranges);
                }
            }
        }
        Ok(missing)
    }

    /// Fetches the blocks of `keys` (sorted) that no other process sharing the
    /// cache is fetching and the cache does not hold, and keeps them; returns
    /// them, and the keys of the others, once each is in the cache or no
    /// longer claimed (the caller reads them from the cache, or fetches them).
    async fn fetch_claimed(
        &self,
        cache: &Arc<Cache>,
        keys: &[BlockKey],
    ) -> Result<(Vec<(BlockKey, Bytes)>, Vec<BlockKey>)> {
        if keys.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let (c, id) = (cache.clone(), self.id);
        let bs = cache.block_bytes();
        let named: Vec<(BlockKey, String, u64, u64)> = keys
            .iter()
            .map(|&(f, b)| ((f, b), data_file(f), b, self.block_len(bs, f, b)))
            .collect();
        let claims = tokio::task::spawn_blocking(move || c.claim_fetches(id, named))
            .await
            .map_err(|e| Error::internal(format!("claiming cache blocks did not complete: {e}")))?;
        let waits: Vec<(String, u64, u64)> = claims
            .theirs
            .iter()
            .map(|&(f, b)| (data_file(f), b, self.block_len(bs, f, b)))
            .collect();
        let (held, mine) = (claims.held, claims.mine);
        let (got, ()) = futures::join!(
            async {
                let got = self.fetch_blocks(cache, &mine).await;
                // Written (or failed): waiters read it, or fetch it themselves.
                drop(held);
                got
            },
            cache.wait_for_claimed(self.id, &waits, self.fetcher.claim_wait_until())
        );
        let mut theirs = claims.theirs;
        theirs.extend(claims.kept);
        Ok((got?, theirs))
    }

    /// Fetches the blocks `keys` (sorted), neighbours in one request each up to
    /// the request size, and keeps them in the cache.
    async fn fetch_blocks(
        &self,
        cache: &Arc<Cache>,
        keys: &[BlockKey],
    ) -> Result<Vec<(BlockKey, Bytes)>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let bs = cache.block_bytes();
        let most = self.fetcher.opts().max_request_bytes.max(bs);
        let mut runs: Vec<Request> = Vec::new();
        for &(file, b) in keys {
            let start = b * bs;
            let end = start + self.block_len(bs, file, b);
            match runs.last_mut() {
                Some(r)
                    if r.file == file && r.range.end == start && end - r.range.start <= most =>
                {
                    r.range.end = end
                }
                _ => runs.push(Request {
                    file,
                    range: start..end,
                }),
            }
        }
        let got = self.fetcher.fetch_all(&runs).await?;
        let mut blocks = Vec::new();
        for (r, bytes) in runs.iter().zip(got) {
            let mut at = r.range.start;
            while at < r.range.end {
                let b = at / bs;
                let len = self.block_len(bs, r.file, b);
                let from = (at - r.range.start) as usize;
                blocks.push(((r.file, b), bytes.slice(from..from + len as usize)));
                at += len;
            }
        }
        let (id, c, kept) = (self.id, cache.clone(), blocks.clone());
        tokio::task::spawn_blocking(move || {
            c.put_blocks(
                id,
                kept.into_iter()
                    .map(|((file, b), piece)| (data_file(file), b, piece)),
            );
        })
        .await
        .map_err(|e| Error::internal(format!("writing the cache did not complete: {e}")))?;
        Ok(blocks)
    }
}
