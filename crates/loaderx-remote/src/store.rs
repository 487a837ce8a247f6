//! A store read from object storage.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use loaderx_gather::{Block, Placement, THREADS};
use object_store::ObjectStore;
use xxhash_rust::xxh3::xxh3_64;
use zrecord::{data_file, Entry, Parallel, Parts, RaggedLayout, ReadOptions, Store};

use crate::cache::Cache;
use crate::error::{Error, Result};
use crate::fetch::{self, plan_requests, FetchOptions, Request, Spans};
use crate::location::Location;
use crate::runtime::{block_on, pid};

/// Most records whose entries a verify resolves at once, and about how many
/// stored bytes it fetches before checking them: verify streams the data files
/// in steps of this size rather than holding them.
const VERIFY_RECORDS: u64 = 1 << 16;
const VERIFY_BYTES: u64 = 64 << 20;

/// An opened remote store: its small files read and checked, its data files'
/// sizes checked, and a client to fetch records with.
pub struct RemoteStore {
    loc: Location,
    opts: FetchOptions,
    /// The client and the process that made it: a forked child makes its own,
    /// since the parent's connections belong to the parent's runtime.
    client: Mutex<(u32, Arc<dyn ObjectStore>)>,
    store: Store,
    cache: Option<Arc<Cache>>,
}

/// A data file's block in the cache.
type BlockKey = (usize, u64);

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
        options: &[(String, String)],
        cache: Option<Arc<Cache>>,
    ) -> Result<RemoteStore> {
        let (loc, opts) = Location::parse(url, options)?;
        let client = loc.client(0)?;
        let store = block_on(open_parts(&client, &loc, &opts, cache.as_deref()))?;
        Ok(RemoteStore {
            loc,
            opts,
            client: Mutex::new((pid(), client)),
            store,
            cache,
        })
    }

    /// The store's URL.
    pub fn url(&self) -> &str {
        self.loc.url()
    }

    /// The opened store, for its schema and header.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// How the store fetches.
    pub fn fetch_options(&self) -> &FetchOptions {
        &self.opts
    }

    /// The cache, if the store has one.
    pub fn cache(&self) -> Option<&Cache> {
        self.cache.as_deref()
    }

    fn client(&self) -> Result<Arc<dyn ObjectStore>> {
        let mut guard = self.client.lock().unwrap_or_else(|e| e.into_inner());
        if guard.0 != pid() {
            let fresh = self.loc.client(0)?;
            let old = std::mem::replace(&mut *guard, (pid(), fresh));
            std::mem::forget(old);
        }
        Ok(guard.1.clone())
    }

    /// The records at `idx`, in order, in one block of `placement`, as a local
    /// gather returns them. Their stored bytes are fetched (or read from the
    /// cache) and checked before the block is allocated. A record found damaged
    /// in cached bytes has its blocks dropped and is fetched again once.
    pub fn records(
        &self,
        idx: &[u64],
        placement: &Placement,
    ) -> Result<(Block, Option<RaggedLayout>)> {
        let entries = self.store.entries(idx)?;
        let (spans, cached) = self.fetch(&entries, true)?;
        match self.fill(idx, &spans, placement) {
            Err(e)
                if !cached.is_empty()
                    && matches!(e.format(), Some(zrecord::Error::Corrupt { .. })) =>
            {
                if let Some(cache) = &self.cache {
                    let sum = self.store.header().checksum;
                    for (shard, block) in cached {
                        cache.remove(sum, &data_file(shard), block);
                    }
                }
                let (spans, _) = self.fetch(&entries, false)?;
                self.fill(idx, &spans, placement)
            }
            other => other,
        }
    }

    fn fill(
        &self,
        idx: &[u64],
        spans: &Spans,
        placement: &Placement,
    ) -> Result<(Block, Option<RaggedLayout>)> {
        let store = &self.store;
        let plan = store.plan_fetched(idx, spans)?;
        let block = placement.fill(plan.output_len(), store.decodes(), |out| {
            Ok(store.gather_fetched(&plan, out, &THREADS, spans)?)
        })?;
        Ok((block, plan.layout().cloned()))
    }

    /// The stored bytes of `entries`, and which cached blocks they came from.
    fn fetch(&self, entries: &[Entry], use_cache: bool) -> Result<(Spans, Vec<BlockKey>)> {
        let shard_sizes = &self.store.header().shard_sizes;
        let requests = plan_requests(
            entries,
            shard_sizes.len(),
            self.opts.coalesce_gap,
            self.opts.max_request_bytes,
        );
        let mut spans = Spans::new(shard_sizes.len());
        let client = self.client()?;
        let cache = match (&self.cache, use_cache) {
            (Some(c), true) => c,
            _ => {
                let got = block_on(fetch::fetch_all(&client, &self.loc, &requests, &self.opts))?;
                for (r, b) in requests.iter().zip(got) {
                    spans.insert(r.shard, r.range.start, b);
                }
                spans.sort();
                return Ok((spans, Vec::new()));
            }
        };
        let bs = cache.block_bytes();
        let sum = self.store.header().checksum;
        let block_len = |shard: usize, b: u64| -> u64 {
            let size = shard_sizes.get(shard).copied().unwrap_or(0);
            bs.min(size.saturating_sub(b * bs))
        };
        let mut blocks: BTreeMap<BlockKey, Option<Bytes>> = BTreeMap::new();
        for r in &requests {
            for b in r.range.start / bs..=(r.range.end - 1) / bs {
                blocks.entry((r.shard, b)).or_insert(None);
            }
        }
        let mut cached = Vec::new();
        for (&(shard, b), slot) in blocks.iter_mut() {
            *slot = cache.get(sum, &data_file(shard), b, block_len(shard, b));
            if slot.is_some() {
                cached.push((shard, b));
            }
        }
        // Missing blocks, in runs of neighbours fetched by one request each.
        let mut runs: Vec<Request> = Vec::new();
        for (&(shard, b), slot) in &blocks {
            if slot.is_some() {
                continue;
            }
            let start = b * bs;
            let end = start + block_len(shard, b);
            match runs.last_mut() {
                Some(r)
                    if r.shard == shard
                        && r.range.end == start
                        && end - r.range.start <= self.opts.max_request_bytes.max(bs) =>
                {
                    r.range.end = end
                }
                _ => runs.push(Request {
                    shard,
                    range: start..end,
                }),
            }
        }
        let got = block_on(fetch::fetch_all(&client, &self.loc, &runs, &self.opts))?;
        for (r, bytes) in runs.iter().zip(got) {
            let mut at = r.range.start;
            while at < r.range.end {
                let b = at / bs;
                let len = block_len(r.shard, b);
                let from = (at - r.range.start) as usize;
                let piece = bytes.slice(from..from + len as usize);
                cache.put(sum, &data_file(r.shard), b, &piece);
                blocks.insert((r.shard, b), Some(piece));
                at += len;
            }
        }
        for r in &requests {
            let (first, last) = (r.range.start / bs, (r.range.end - 1) / bs);
            let piece = |b: u64| -> Result<&Bytes> {
                blocks
                    .get(&(r.shard, b))
                    .and_then(Option::as_ref)
                    .ok_or_else(|| {
                        zrecord::Error::Internal(format!(
                            "block {b} of data file {} was not read",
                            r.shard
                        ))
                        .into()
                    })
            };
            if first == last {
                let from = (r.range.start - first * bs) as usize;
                let to = (r.range.end - first * bs) as usize;
                spans.insert(r.shard, r.range.start, piece(first)?.slice(from..to));
            } else {
                let mut joined = Vec::with_capacity((r.range.end - r.range.start) as usize);
                for b in first..=last {
                    let p = piece(b)?;
                    let lo = r.range.start.max(b * bs) - b * bs;
                    let hi = r.range.end.min(b * bs + p.len() as u64) - b * bs;
                    joined.extend_from_slice(&p[lo as usize..hi as usize]);
                }
                spans.insert(r.shard, r.range.start, Bytes::from(joined));
            }
        }
        spans.sort();
        Ok((spans, cached))
    }

    /// Checks the whole store as a local verify does: the index against its
    /// checksum, every data file's size, and every record's stored bytes and
    /// decoding. The data files are streamed from object storage (never from the
    /// cache) a bounded step at a time.
    pub fn verify(&self) -> Result<()> {
        self.verify_files()?;
        self.verify_records(0..self.store.len())
    }

    /// The part of [`RemoteStore::verify`] that is not per record: the whole
    /// index against its checksum, and every data file at the header's size.
    pub fn verify_files(&self) -> Result<()> {
        self.store.check_index()?;
        let client = self.client()?;
        block_on(check_sizes(
            &client,
            &self.loc,
            &self.opts,
            &self.store.header().shard_sizes,
        ))
    }

    /// The per-record part of [`RemoteStore::verify`] for the records in `range`.
    pub fn verify_records(&self, range: std::ops::Range<u64>) -> Result<()> {
        let n = self.store.len();
        if range.start > range.end || range.end > n {
            return Err(zrecord::Error::InvalidArgument(format!(
                "records {}..{} are not a range of a store of {n} records",
                range.start, range.end
            ))
            .into());
        }
        let mut start = range.start;
        while start < range.end {
            let ids: Vec<u64> = (start..range.end.min(start + VERIFY_RECORDS)).collect();
            let mut entries = self.store.entries(&ids)?;
            let mut bytes = 0u64;
            let keep = entries
                .iter()
                .position(|e| {
                    bytes += u64::from(e.stored_len);
                    bytes >= VERIFY_BYTES
                })
                .map_or(entries.len(), |k| k + 1);
            entries.truncate(keep);
            let end = start + keep as u64;
            let (spans, _) = self.fetch(&entries, false)?;
            let parts = THREADS
                .parts(bytes.min(usize::MAX as u64) as usize, true)
                .max(1) as u64;
            let per = (keep as u64).div_ceil(parts).max(1);
            let store = &self.store;
            THREADS.run(parts as usize, &|k| {
                let a = (start + k as u64 * per).min(end);
                let b = (start + (k as u64 + 1) * per).min(end);
                store.verify_fetched(a..b, &spans)
            })?;
            start = end;
        }
        Ok(())
    }
}

/// Checks that every data file exists with the size the header gives it.
async fn check_sizes(
    client: &Arc<dyn ObjectStore>,
    loc: &Location,
    opts: &FetchOptions,
    sizes: &[u64],
) -> Result<()> {
    let found = futures::future::try_join_all(
        (0..sizes.len())
            .map(|s| async move { fetch::size_of(client, loc, &data_file(s), opts).await }),
    )
    .await?;
    for (s, (&want, got)) in sizes.iter().zip(found).enumerate() {
        let url = loc.url_of(&data_file(s));
        match got {
            None => return Err(corrupt(url, "the data file is missing")),
            Some(n) if n != want => {
                return Err(corrupt(
                    url,
                    format!(
                    "the data file is {n} bytes but the header says {want} (truncated or extended)"
                ),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// What opening reads with.
#[derive(Clone, Copy)]
struct Opening<'a> {
    client: &'a Arc<dyn ObjectStore>,
    loc: &'a Location,
    opts: &'a FetchOptions,
    cache: Option<&'a Cache>,
}

/// One small file of the store, from the cache when it holds it with the
/// header's checksum, else fetched (and cached). `store` is the header checksum.
async fn small(o: Opening<'_>, store: u64, name: &str, size: u64, sum: u64) -> Result<Vec<u8>> {
    let Opening {
        client,
        loc,
        opts,
        cache,
    } = o;
    if let Some(c) = cache {
        if let Some(b) = c.get_small(store, name, size) {
            if xxh3_64(&b) == sum {
                return Ok(b.to_vec());
            }
            c.remove_small(store, name);
        }
    }
    // A large index comes in parallel parts.
    let step = opts.max_request_bytes.max(1);
    let requests: Vec<std::ops::Range<u64>> = (0..size.div_ceil(step))
        .map(|k| k * step..((k + 1) * step).min(size))
        .collect();
    let parts: Vec<Bytes> = futures::stream::iter(
        requests
            .into_iter()
            .map(|r| fetch::get_range(client, loc, name, r, opts)),
    )
    .buffered(opts.max_concurrency)
    .try_collect()
    .await?;
    let mut out = Vec::new();
    out.try_reserve_exact(size as usize)
        .map_err(|_| zrecord::Error::OutOfMemory {
            bytes: size as usize,
        })?;
    for p in parts {
        out.extend_from_slice(&p);
    }
    if let Some(c) = cache {
        if xxh3_64(&out) == sum {
            c.put_small(store, name, &out);
        }
    }
    Ok(out)
}

/// Reads and checks everything but the records: the header first, then the
/// other small files and the data files' sizes, concurrently.
async fn open_parts(
    client: &Arc<dyn ObjectStore>,
    loc: &Location,
    opts: &FetchOptions,
    cache: Option<&Cache>,
) -> Result<Store> {
    let hname = zrecord::HEADER_FILE;
    let size = match fetch::size_of(client, loc, hname, opts).await? {
        Some(n) => n,
        None => {
            return Err(Error::NotFound {
                url: loc.url().to_string(),
                what: loc.url_of(hname),
            })
        }
    };
    if size > zrecord::MAX_HEADER_BYTES {
        return Err(corrupt(
            loc.url_of(hname),
            format!(
                "the header is {size} bytes; a header is at most {}",
                zrecord::MAX_HEADER_BYTES
            ),
        ));
    }
    let hbytes = fetch::whole(client, loc, hname, size, opts).await?;
    let name = Path::new(loc.url());
    let header = zrecord::Header::decode(&hbytes, &name.join(hname))?;
    let id = header.checksum;
    let sums_size = if header.version >= 2 {
        zrecord::index_sums_size(header.index_size)
    } else {
        0
    };
    let o = Opening {
        client,
        loc,
        opts,
        cache,
    };
    let optional = |size: u64, file: &'static str, sum: u64| async move {
        match size {
            0 => Ok(None),
            n => small(o, id, file, n, sum).await.map(Some),
        }
    };
    let (index, index_sums, dict, attrs, ()) = futures::try_join!(
        small(
            o,
            id,
            zrecord::INDEX_FILE,
            header.index_size,
            header.index_xxh3
        ),
        async {
            Ok(
                optional(sums_size, zrecord::INDEX_SUMS_FILE, header.index_sums_xxh3)
                    .await?
                    .unwrap_or_default(),
            )
        },
        optional(header.dict_size, zrecord::DICT_FILE, header.dict_xxh3),
        optional(header.attrs_size, zrecord::ATTRS_FILE, header.attrs_xxh3),
        check_sizes(client, loc, opts, &header.shard_sizes),
    )?;
    let parts = Parts {
        index,
        index_sums,
        dict,
        attrs,
    };
    Ok(Store::from_parts(
        name,
        &hbytes,
        parts,
        ReadOptions { checked: true },
    )?)
}
