//! Turning records into requests and requests into bytes: neighbouring ranges
//! are coalesced, requests run concurrently up to a bound, and a failed or short
//! response is retried with exponential backoff. A body shorter than the range
//! asked for is never handed on. Each attempt waits a bounded time for its
//! response to begin and for all of it, and every request of one operation (an
//! open, a gather, a step of a verify) ends by that operation's deadline.

use std::collections::HashMap;
use std::future::Future;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use loaderx_gather::{Error, Result};
use object_store::{GetOptions, ObjectStore, ObjectStoreExt};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use zrecord::{Entry, PayloadSource};

use crate::location::Location;
use crate::options::{FetchOptions, MAX_BACKOFF};

/// One request: a byte range of one data file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    pub file: usize,
    pub range: Range<u64>,
}

/// The requests that fetch the stored bytes of `entries`: per data file, the
/// records' ranges sorted, overlapping ones merged, ones closer than `gap`
/// merged while the request is under `max_bytes`. Every record lies wholly in
/// one request.
pub(crate) fn plan_requests<'e>(
    entries: impl IntoIterator<Item = &'e Entry>,
    files: usize,
    gap: u64,
    max_bytes: u64,
) -> Vec<Request> {
    let mut per: Vec<Vec<Range<u64>>> = vec![Vec::new(); files];
    for e in entries {
        if e.stored_len == 0 {
            continue;
        }
        // Entries are checked against their files, so the end cannot overflow.
        if let Some(v) = per.get_mut(e.file as usize) {
            v.push(e.offset..e.offset + u64::from(e.stored_len));
        }
    }
    plan_ranges(per, gap, max_bytes)
}

/// The requests that fetch the nonempty byte ranges `per[file]` of each data
/// file, merged as [`plan_requests`] merges records' ranges.
pub(crate) fn plan_ranges(per: Vec<Vec<Range<u64>>>, gap: u64, max_bytes: u64) -> Vec<Request> {
    let mut out = Vec::new();
    for (file, mut ranges) in per.into_iter().enumerate() {
        ranges.sort_unstable_by_key(|r| (r.start, r.end));
        let mut cur: Option<Range<u64>> = None;
        for r in ranges {
            cur = Some(match cur {
                Some(c) if r.start < c.end => c.start..c.end.max(r.end),
                Some(c) if r.start - c.end <= gap && r.end.saturating_sub(c.start) <= max_bytes => {
                    c.start..r.end
                }
                Some(c) => {
                    out.push(Request { file, range: c });
                    r
                }
                None => r,
            });
        }
        if let Some(c) = cur {
            out.push(Request { file, range: c });
        }
    }
    out
}

/// The bytes of `range`, a request of one data file, from its parts in the
/// blocks of `bs` bytes it spans (`part(b)`, the request's bytes in block `b`):
/// the part itself when it lies in one block, else the parts joined.
pub(crate) fn join_parts<E>(
    range: &Range<u64>,
    bs: u64,
    mut part: impl FnMut(u64) -> std::result::Result<Bytes, E>,
) -> std::result::Result<Bytes, E> {
    let (first, last) = (range.start / bs, (range.end - 1) / bs);
    if first == last {
        return part(first);
    }
    let mut joined = Vec::with_capacity((range.end - range.start) as usize);
    for b in first..=last {
        joined.extend_from_slice(&part(b)?);
    }
    Ok(Bytes::from(joined))
}

/// Fetched bytes of a store's data files, as the format crate asks for them.
#[derive(Default)]
pub(crate) struct Spans {
    /// Per data file, disjoint fetched ranges sorted by start.
    per_file: Vec<Vec<(u64, Bytes)>>,
}

impl Spans {
    pub fn new(files: usize) -> Spans {
        Spans {
            per_file: vec![Vec::new(); files],
        }
    }

    pub fn insert(&mut self, file: usize, start: u64, bytes: Bytes) {
        if let Some(v) = self.per_file.get_mut(file) {
            v.push((start, bytes));
        }
    }

    pub fn sort(&mut self) {
        for v in &mut self.per_file {
            v.sort_unstable_by_key(|(s, _)| *s);
        }
    }
}

impl PayloadSource for Spans {
    fn bytes(&self, file: usize, range: Range<u64>) -> Option<&[u8]> {
        let len = usize::try_from(range.end.checked_sub(range.start)?).ok()?;
        if len == 0 {
            return Some(&[]);
        }
        let v = self.per_file.get(file)?;
        let i = v
            .partition_point(|(s, _)| *s <= range.start)
            .checked_sub(1)?;
        let (start, bytes) = &v[i];
        let from = usize::try_from(range.start - start).ok()?;
        bytes.get(from..from.checked_add(len)?)
    }
}

/// Whether a failed request may succeed if tried again: server errors,
/// throttling, timeouts and broken connections may; a missing object, a
/// refused credential or a malformed request will not.
fn transient(e: &object_store::Error) -> bool {
    use object_store::client::HttpErrorKind as K;
    use object_store::Error as E;
    match e {
        E::NotFound { .. }
        | E::InvalidPath { .. }
        | E::NotSupported { .. }
        | E::NotImplemented { .. }
        | E::PermissionDenied { .. }
        | E::Unauthenticated { .. }
        | E::UnknownConfigurationKey { .. }
        | E::Precondition { .. }
        | E::NotModified { .. }
        | E::AlreadyExists { .. } => false,
        // A refused certificate is refused again on every connection.
        E::Generic { .. } if crate::cause::refusal(e).is_some() => false,
        E::Generic { .. } => {
            let chain = crate::cause::chain(e);
            // A request the client refuses to build (plain http without
            // allow_http, a bad header) fails the same way every time.
            if chain.iter().any(|e| {
                e.downcast_ref::<reqwest::Error>()
                    .is_some_and(reqwest::Error::is_builder)
            }) {
                return false;
            }
            for err in chain {
                // No response at all: the connection, the request or the body
                // failed or timed out.
                if let Some(h) = err.downcast_ref::<object_store::client::HttpError>() {
                    return !matches!(h.kind(), K::Unknown);
                }
                if let Some(code) = status_in(err) {
                    return !(400..500).contains(&code) || code == 408 || code == 429;
                }
            }
            true
        }
        _ => true,
    }
}

/// The status of a response with an error status. object_store keeps it in a
/// type it does not export and says "status code: NNN"; the fault tests (a 503
/// retried, a 403 not) pin that wording.
fn status_in(err: &(dyn std::error::Error + 'static)) -> Option<u16> {
    err.to_string()
        .split_once("status code: ")
        .and_then(|(_, rest)| rest.get(..3))
        .and_then(|c| c.parse::<u16>().ok())
}

/// Whether `e` refuses a range that starts past the end of the object: a 416
/// from a server, or object_store's own refusal (a local file's).
fn past_the_end(e: &object_store::Error) -> bool {
    crate::cause::chain(e).into_iter().any(|err| {
        status_in(err) == Some(416) || err.to_string().starts_with("Wanted range starting at")
    })
}

/// Why one attempt failed.
enum Failure {
    /// Worth another try.
    Transient(String),
    /// Nothing listens at the address: worth another try only once something
    /// has answered there (a server restarting), never before (a wrong port).
    Refused(String),
    /// Not: the object is missing, access is refused, the request is wrong.
    Permanent(object_store::Error),
}

impl Failure {
    fn of(e: object_store::Error) -> Failure {
        if crate::cause::refused_connection(&e) {
            Failure::Refused(crate::cause::describe(&e))
        } else if transient(&e) {
            Failure::Transient(crate::cause::describe(&e))
        } else {
            Failure::Permanent(e)
        }
    }
}

tokio::task_local! {
    /// Set in a task that reads ahead ([`Fetcher::ahead`]).
    static AHEAD: ();
}

tokio::task_local! {
    /// When the operation (an open, a gather, a step of a verify) that the
    /// requests of this task belong to must end; see [`Fetcher::bounded`].
    static DEADLINE: Instant;
}

/// `now + d`, or a time too far away to matter when that cannot be written.
fn after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(1 << 32))
}

/// The deadline of the operation the calling task runs, or one of its own for
/// a request made outside any (an upload's).
fn current_deadline(opts: &FetchOptions) -> Instant {
    DEADLINE
        .try_with(|d| *d)
        .unwrap_or_else(|_| after(Instant::now(), opts.deadline))
}

/// The times one attempt started now must meet: its response must begin by
/// the first, and be whole by the second; neither is past `until`.
fn attempt_bounds(opts: &FetchOptions, until: Instant) -> (Instant, Instant) {
    let now = Instant::now();
    let whole = after(now, opts.request_timeout).min(until);
    (after(now, opts.first_byte_timeout).min(whole), whole)
}

fn seconds_from(start: Instant, end: Instant) -> f64 {
    end.saturating_duration_since(start).as_secs_f64()
}

/// One attempt at `range` of `path`: its response must begin by the first
/// bound and be whole by the second ([`attempt_bounds`]). Returns the body and
/// the object's size. A range running past the object's end is answered with
/// the bytes up to it (`range` clamped); `exact` refuses that as a short
/// response, as a read of a range the caller knows to exist must.
async fn attempt(
    client: &Arc<dyn ObjectStore>,
    path: &object_store::path::Path,
    range: Range<u64>,
    exact: bool,
    opts: &FetchOptions,
    until: Instant,
) -> std::result::Result<(Bytes, u64), Failure> {
    let start = Instant::now();
    let (first, whole) = attempt_bounds(opts, until);
    let asked = range.end - range.start;
    let get = client.get_opts(path, GetOptions::new().with_range(Some(range)));
    let response = match tokio::time::timeout_at(first, get).await {
        Err(_) => {
            return Err(Failure::Transient(format!(
                "no response began within {:.3} s",
                seconds_from(start, first)
            )))
        }
        Ok(Err(e)) => return Err(Failure::of(e)),
        Ok(Ok(r)) => r,
    };
    let size = response.meta.size;
    // object_store has checked the answered range against the one asked,
    // clamped to the object's size.
    let want = if exact {
        asked
    } else {
        response.range.end - response.range.start
    };
    match tokio::time::timeout_at(whole, response.bytes()).await {
        Err(_) => Err(Failure::Transient(format!(
            "no complete response within {:.3} s",
            seconds_from(start, whole)
        ))),
        Ok(Ok(b)) if b.len() as u64 == want => Ok((b, size)),
        Ok(Ok(b)) => Err(Failure::Transient(format!(
            "the response held {} of the {want} bytes asked for",
            b.len()
        ))),
        Ok(Err(e)) => Err(Failure::of(e)),
    }
}

/// What a request's attempts are retried under: the store, its options, and
/// whether anything has answered at its address yet.
pub(crate) struct Tries<'a> {
    pub loc: &'a Location,
    pub opts: &'a FetchOptions,
    pub answered: &'a AtomicBool,
}

impl Tries<'_> {
    /// Runs `attempt` until it succeeds, fails for good, has been retried
    /// `retries` times, or the deadline passes; `what` says what was asked
    /// of `name` ("reading bytes 0..8") in the error.
    async fn run<T, F, Fut>(&self, name: &str, what: &str, mut attempt: F) -> Result<T>
    where
        F: FnMut(Instant) -> Fut,
        Fut: Future<Output = std::result::Result<T, Failure>>,
    {
        let (loc, opts) = (self.loc, self.opts);
        let until = current_deadline(opts);
        let storage = |msg: String| Error::Storage {
            url: loc.url_of(name),
            msg: format!("{what} {msg}"),
        };
        let mut wait = opts.retry_backoff;
        let mut tries = 0u32;
        loop {
            let result = match tokio::time::timeout_at(until, attempt(until)).await {
                Ok(r) => r,
                Err(_) => Err(Failure::Transient(
                    "no attempt could begin in time (the store's requests were all in flight)"
                        .into(),
                )),
            };
            let msg = match result {
                Ok(v) => {
                    self.answered.store(true, Ordering::Relaxed);
                    return Ok(v);
                }
                Err(Failure::Permanent(object_store::Error::NotFound { .. })) => {
                    return Err(Error::Storage {
                        url: loc.url_of(name),
                        msg: "the object does not exist (the store is incomplete or was removed)"
                            .into(),
                    })
                }
                Err(Failure::Permanent(e)) => {
                    return Err(storage(format!("failed: {}", crate::cause::describe(&e))))
                }
                Err(Failure::Refused(msg)) if !self.answered.load(Ordering::Relaxed) => {
                    return Err(storage(format!(
                        "{}; nothing has answered at this address yet, so it is not tried again",
                        failed(tries + 1, &msg)
                    )))
                }
                Err(Failure::Refused(msg) | Failure::Transient(msg)) => msg,
            };
            if tries >= opts.retries {
                return Err(storage(failed(tries + 1, &msg)));
            }
            if Instant::now() + wait >= until {
                return Err(storage(format!(
                    "{} (the deadline of {:.3} s, the storage option deadline, passed)",
                    failed(tries + 1, &msg),
                    opts.deadline.as_secs_f64()
                )));
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(MAX_BACKOFF);
            tries += 1;
        }
    }
}

/// What reads one store's files: its client, where the store is, how to fetch,
/// and the store's budget of requests in flight. A process makes its own (see
/// `RemoteStore`): connections and waiting requests belong to the process that
/// made them.
pub(crate) struct Fetcher {
    client: Arc<dyn ObjectStore>,
    loc: Location,
    opts: FetchOptions,
    permits: Semaphore,
    /// Held by a read-ahead request besides one of `permits`, taken first: at
    /// most half the store's requests in flight read ahead, so that a gather
    /// never waits behind more than that many.
    ahead_permits: Semaphore,
    blocks: Mutex<HashMap<BlockKey, Arc<Semaphore>>>,
    /// Whether a request to the store has succeeded: until one has, a refused
    /// connection is not retried.
    answered: AtomicBool,
    /// What the store's reads moved, in this process.
    pub traffic: Traffic,
}

/// Bytes a store's reads moved since it was opened in this process: response
/// bodies from object storage, and bytes read from the block cache instead.
#[derive(Default)]
pub(crate) struct Traffic {
    fetched: AtomicU64,
    from_cache: AtomicU64,
}

impl Traffic {
    pub fn add_fetched(&self, bytes: usize) {
        self.fetched.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn add_from_cache(&self, bytes: usize) {
        self.from_cache.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// `(fetched, from_cache)`.
    pub fn totals(&self) -> (u64, u64) {
        (
            self.fetched.load(Ordering::Relaxed),
            self.from_cache.load(Ordering::Relaxed),
        )
    }
}

/// A block of a data file: the file's number and the block's.
pub(crate) type BlockKey = (usize, u64);

/// The blocks one gather claimed for fetching ([`Fetcher::claim_blocks`]),
/// and those other gathers had claimed first, with what to wait on for each.
/// Its blocks are released when the gather's fetch ends
/// ([`Claimed::release`]), or when it is dropped, however the fetch ended.
pub(crate) struct Claimed<'a> {
    fetcher: &'a Fetcher,
    mine: Vec<BlockKey>,
    others: Vec<(BlockKey, Arc<Semaphore>)>,
    /// Has no permits: waiters wait until it is closed.
    done: Arc<Semaphore>,
}

impl Claimed<'_> {
    /// The blocks this gather fetches, in order.
    pub fn keys(&self) -> &[BlockKey] {
        &self.mine
    }

    /// The blocks another gather is fetching, each with a semaphore that is
    /// closed when that gather's fetch ends.
    pub fn others(&self) -> impl Iterator<Item = (BlockKey, &Semaphore)> {
        self.others.iter().map(|(k, s)| (*k, s.as_ref()))
    }

    /// Releases this gather's blocks and wakes their waiters. Called as soon as
    /// its own fetch ends, before it waits for the others' blocks: two gathers
    /// each waiting for a block the other claimed would otherwise wait forever.
    pub fn release(&self) {
        let mut map = self
            .fetcher
            .blocks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for k in &self.mine {
            if map.get(k).is_some_and(|s| Arc::ptr_eq(s, &self.done)) {
                map.remove(k);
            }
        }
        drop(map);
        self.done.close();
    }
}

impl Drop for Claimed<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

impl Fetcher {
    pub fn new(loc: &Location, opts: &FetchOptions) -> Result<Fetcher> {
        Ok(Fetcher {
            client: loc.client(0)?,
            loc: loc.clone(),
            opts: opts.clone(),
            permits: Semaphore::new(opts.max_concurrency),
            ahead_permits: Semaphore::new(opts.max_concurrency.div_ceil(2)),
            blocks: Mutex::new(HashMap::new()),
            answered: AtomicBool::new(false),
            traffic: Traffic::default(),
        })
    }

    /// A fetcher for a store already opened (by another process, which this
    /// one was forked from): its address has answered.
    pub fn for_opened(loc: &Location, opts: &FetchOptions) -> Result<Fetcher> {
        let f = Fetcher::new(loc, opts)?;
        f.answered.store(true, Ordering::Relaxed);
        Ok(f)
    }

    /// Runs `op`, an open, a gather or a step of a verify, under one deadline
    /// (the storage option `deadline` from now): each of its requests' attempts
    /// ends by it, and no retry starts after it.
    pub async fn bounded<T>(&self, op: impl Future<Output = T>) -> T {
        DEADLINE
            .scope(after(Instant::now(), self.opts.deadline), op)
            .await
    }

    /// Runs `op` as read-ahead: its requests yield to gathers ([`Fetcher::ahead_permits`]).
    pub async fn ahead<T>(&self, op: impl Future<Output = T>) -> T {
        AHEAD.scope((), op).await
    }

    fn tries(&self) -> Tries<'_> {
        Tries {
            loc: &self.loc,
            opts: &self.opts,
            answered: &self.answered,
        }
    }

    /// Claims the blocks of `keys` (sorted) that no other gather of this
    /// process is fetching, so that concurrent gathers fetch a block once.
    pub fn claim_blocks(&self, keys: impl IntoIterator<Item = BlockKey>) -> Claimed<'_> {
        let done = Arc::new(Semaphore::new(0));
        let (mut mine, mut others) = (Vec::new(), Vec::new());
        let mut map = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        for k in keys {
            match map.get(&k) {
                Some(theirs) => others.push((k, theirs.clone())),
                None => {
                    map.insert(k, done.clone());
                    mine.push(k);
                }
            }
        }
        drop(map);
        Claimed {
            fetcher: self,
            mine,
            others,
            done,
        }
    }

    /// How long the calling task may wait for blocks another process sharing
    /// the cache claimed: halfway to its operation's deadline, so that a block
    /// that process does not deliver is still fetched here in time.
    pub fn claim_wait_until(&self) -> std::time::Instant {
        let now = Instant::now();
        (now + current_deadline(&self.opts).saturating_duration_since(now) / 2).into_std()
    }

    /// Whether a gather or read-ahead of this process is fetching block `key`.
    pub fn in_flight(&self, key: &BlockKey) -> bool {
        let map = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        map.contains_key(key)
    }

    pub fn loc(&self) -> &Location {
        &self.loc
    }

    pub fn opts(&self) -> &FetchOptions {
        &self.opts
    }

    /// `range` of the store's file `name`, retried as the options say. Each
    /// attempt holds one of the store's permits; a retry's wait holds none.
    pub async fn get_range(&self, name: &str, range: Range<u64>) -> Result<Bytes> {
        let what = format!("reading bytes {}..{}", range.start, range.end);
        match self.get(name, range, true, &what).await? {
            Some((bytes, _)) => Ok(bytes),
            None => Err(Error::internal("an exact read answered a missing file")),
        }
    }

    /// The bytes of `range` of the store's file `name` that exist, with the
    /// file's size: one request where [`Fetcher::size_of`] and
    /// [`Fetcher::get_range`] would take two round trips. `what` says what was
    /// asked in an error. `None` when the file does not exist, or ends before
    /// `range` starts.
    pub async fn get_sized(
        &self,
        name: &str,
        range: Range<u64>,
        what: &str,
    ) -> Result<Option<(Bytes, u64)>> {
        self.get(name, range, false, what).await
    }

    /// A read of `range` of `name`, `exact` or clamped to the file
    /// ([`attempt`]); a missing file is `None` unless `exact`, which makes it
    /// the error a store missing a file is.
    async fn get(
        &self,
        name: &str,
        range: Range<u64>,
        exact: bool,
        what: &str,
    ) -> Result<Option<(Bytes, u64)>> {
        self.loc.check_local_file(name)?;
        let path = self.loc.path_of(name);
        self.tries()
            .run(name, what, |until| {
                let (path, range) = (&path, range.clone());
                async move {
                    let closed = |_| Failure::Transient("the request budget was closed".into());
                    let _ahead = match AHEAD.try_with(|_| ()) {
                        Ok(()) => Some(self.ahead_permits.acquire().await.map_err(closed)?),
                        Err(_) => None,
                    };
                    let _permit = self.permits.acquire().await.map_err(closed)?;
                    match attempt(&self.client, path, range, exact, &self.opts, until).await {
                        Err(Failure::Permanent(object_store::Error::NotFound { .. })) if !exact => {
                            Ok(None)
                        }
                        Err(Failure::Permanent(e)) if !exact && past_the_end(&e) => Ok(None),
                        got => got.map(Some),
                    }
                }
            })
            .await
            .inspect(|got| {
                if let Some((bytes, _)) = got {
                    self.traffic.add_fetched(bytes.len())
                }
            })
    }

    /// Runs `requests` against the store's data files, as many at once as the
    /// store's permits allow, and returns each one's bytes in order.
    pub async fn fetch_all(&self, requests: &[Request]) -> Result<Vec<Bytes>> {
        futures::future::try_join_all(requests.iter().map(|r| {
            let name = zrecord::data_file(r.file);
            async move { self.get_range(&name, r.range.clone()).await }
        }))
        .await
    }

    /// The size of the store's file `name`, retried as a range read is. `None`
    /// when it does not exist.
    pub async fn size_of(&self, name: &str) -> Result<Option<u64>> {
        size_of(&self.client, name, &self.tries()).await
    }
}

/// The size of the store's file `name` through `client`, retried as a range read
/// is. `None` when it does not exist.
pub(crate) async fn size_of(
    client: &Arc<dyn ObjectStore>,
    name: &str,
    tries: &Tries<'_>,
) -> Result<Option<u64>> {
    tries.loc.check_local_file(name)?;
    let path = tries.loc.path_of(name);
    tries
        .run(name, "asking for its size", |until| {
            let path = &path;
            async move {
                let start = Instant::now();
                let (first, _) = attempt_bounds(tries.opts, until);
                match tokio::time::timeout_at(first, client.head(path)).await {
                    Ok(Ok(meta)) => Ok(Some(meta.size)),
                    Ok(Err(object_store::Error::NotFound { .. })) => Ok(None),
                    Ok(Err(e)) => Err(Failure::of(e)),
                    Err(_) => Err(Failure::Transient(format!(
                        "no response began within {:.3} s",
                        seconds_from(start, first)
                    ))),
                }
            }
        })
        .await
}

/// How requests that all failed are reported: `failed: MSG` after one attempt,
/// `failed N times; the last: MSG` after several.
fn failed(attempts: u32, msg: &str) -> String {
    if attempts == 1 {
        format!("failed: {msg}")
    } else {
        format!("failed {attempts} times; the last: {msg}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(file: u32, offset: u64, len: u32) -> Entry {
        Entry {
            offset,
            stored_len: len,
            file,
            checksum: 0,
        }
    }

    fn stored<'s>(s: &'s Spans, e: &Entry) -> Option<&'s [u8]> {
        s.bytes(
            e.file as usize,
            e.offset..e.offset + u64::from(e.stored_len),
        )
    }

    #[test]
    fn neighbours_coalesce_and_far_ranges_do_not() {
        let es = [
            e(0, 100, 10),
            e(0, 0, 10),
            e(0, 15, 5),
            e(1, 0, 4),
            e(0, 1000, 1),
        ];
        let r = plan_requests(&es, 2, 10, 1 << 20);
        assert_eq!(
            r,
            vec![
                Request {
                    file: 0,
                    range: 0..20
                },
                Request {
                    file: 0,
                    range: 100..110
                },
                Request {
                    file: 0,
                    range: 1000..1001
                },
                Request {
                    file: 1,
                    range: 0..4
                },
            ]
        );
    }

    #[test]
    fn requests_stop_growing_but_overlaps_always_merge() {
        let es = [e(0, 0, 8), e(0, 8, 8), e(0, 16, 8), e(0, 20, 8)];
        let r = plan_requests(&es, 1, 0, 16);
        assert_eq!(
            r,
            vec![
                Request {
                    file: 0,
                    range: 0..16
                },
                Request {
                    file: 0,
                    range: 16..28
                },
            ]
        );
    }

    #[test]
    fn one_failed_attempt_is_not_counted_in_times() {
        assert_eq!(failed(1, "refused"), "failed: refused");
        assert_eq!(failed(3, "refused"), "failed 3 times; the last: refused");
    }

    #[test]
    fn spans_find_records_inside_them_only() {
        let mut s = Spans::new(2);
        s.insert(1, 100, Bytes::from_static(b"abcdefgh"));
        s.insert(1, 0, Bytes::from_static(b"0123"));
        s.sort();
        assert_eq!(stored(&s, &e(1, 102, 3)), Some(&b"cde"[..]));
        assert_eq!(stored(&s, &e(1, 1, 3)), Some(&b"123"[..]));
        assert_eq!(stored(&s, &e(1, 2, 3)), None);
        assert_eq!(stored(&s, &e(1, 106, 3)), None);
        assert_eq!(stored(&s, &e(0, 0, 1)), None);
        assert_eq!(stored(&s, &e(0, 5, 0)), Some(&b""[..]));
    }
}
