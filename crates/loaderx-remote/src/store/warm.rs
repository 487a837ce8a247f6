//! A gather whose index blocks and data blocks this process already holds in
//! memory: resolved and read on the calling thread, with no task, no blocking
//! thread, and one lock per map. Anything missing sends the gather the usual
//! way, unchanged.

use bytes::Bytes;
use loaderx_gather::Result;
use zrecord::data_file;

use super::pending::Fetched;
use super::{block_len, RemoteStore};
use crate::fetch::{join_parts, plan_requests, BlockKey, Spans};
use crate::index::INDEX_KEY;

impl RemoteStore {
    /// The stored bytes of the records at `idx` (positions already checked;
    /// `needed` their index blocks, `None` for an index read whole) if memory
    /// holds every block they lie in; `None` if any must come from the cache's
    /// files or object storage. Counted as read from the cache, as the same
    /// bytes are on the other way.
    pub(super) fn warm_fetched(
        &self,
        idx: &[u64],
        needed: Option<&[usize]>,
    ) -> Result<Option<Fetched>> {
        let s = &self.0;
        let Some(cache) = &s.cache else {
            return Ok(None);
        };
        let view = match needed {
            Some(n) => match s.index.get_all(n) {
                Some(blocks) => Some(s.meta.with_blocks(blocks)?),
                None => return Ok(None),
            },
            None => None,
        };
        let entries = match &view {
            Some(v) => v.entries(idx)?,
            None => s.meta.entries(idx)?,
        };
        let requests = plan_requests(&entries, s.sizes.len(), 0, s.opts.max_request_bytes);
        let bs = cache.block_bytes();
        let id = s.meta.info().header().checksum;
        let mut spans = Spans::new(s.sizes.len());
        let mut cached: Vec<BlockKey> = Vec::new();
        let mut bytes = 0u64;
        {
            let mut kept = cache.kept_blocks(id);
            let mut name = (usize::MAX, String::new());
            // Requests are sorted: most follow one in the same block, which
            // is then not looked up again.
            let mut prev: Option<(BlockKey, Bytes)> = None;
            for r in &requests {
                if name.0 != r.file {
                    name = (r.file, data_file(r.file));
                }
                let mut part = |b: u64| -> Option<Bytes> {
                    let len = block_len(&s.sizes, bs, r.file, b);
                    let whole = match &prev {
                        Some((k, w)) if *k == (r.file, b) => w.clone(),
                        _ => {
                            let w = kept.block(&name.1, b, len)?;
                            prev = Some(((r.file, b), w.clone()));
                            w
                        }
                    };
                    let lo = r.range.start.max(b * bs) - b * bs;
                    let hi = r.range.end.min(b * bs + len) - b * bs;
                    if cached.last() != Some(&(r.file, b)) {
                        cached.push((r.file, b));
                    }
                    (hi <= whole.len() as u64).then(|| whole.slice(lo as usize..hi as usize))
                };
                let Ok(got) = join_parts(&r.range, bs, |b| part(b).ok_or(())) else {
                    return Ok(None);
                };
                if got.len() as u64 != r.range.end - r.range.start {
                    return Ok(None);
                }
                bytes += got.len() as u64;
                spans.insert(r.file, r.range.start, got);
            }
        }
        spans.sort();
        cached.sort_unstable();
        cached.dedup();
        // Through source(): a forked child counts on a fetcher of its own.
        self.source()?
            .fetcher
            .traffic
            .add_from_cache(bytes as usize);
        let index_keys = needed.into_iter().flatten().map(|&b| (INDEX_KEY, b as u64));
        s.ahead.used(index_keys.chain(cached.iter().copied()));
        Ok(Some(Fetched {
            view,
            entries,
            spans,
            cached,
        }))
    }
}
