//! An engine job's objects in object storage: its own prefix,
//! `root/.parts-XXXXXXXXXXXX/`, where its tasks put their parts and its driver
//! a heartbeat, removed when the job ends or, for a driver that is gone, once
//! its newest object is old; and the checks and removals its publish makes.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::{StreamExt, TryStreamExt};
use loaderx_gather::{Error, Result};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::location::Location;
use crate::options::OptionValue;
use crate::publish::storage;
use crate::runtime::block_on;

/// How every job prefix's last segment starts (`.parts-`, then the job's id).
const JOB_PREFIX: &str = ".parts-";

/// The first object found under `loc`, if any.
pub(crate) async fn first_object(
    client: &Arc<dyn ObjectStore>,
    loc: &Location,
) -> Result<Option<Path>> {
    let mut listed = client.list(Some(loc.prefix()));
    match listed.next().await {
        None => Ok(None),
        Some(Ok(meta)) => Ok(Some(meta.location)),
        Some(Err(e)) => Err(storage(loc.url().to_string(), "listing", &e)),
    }
}

/// Deletes one object; one already gone, or never there (a write that failed,
/// a `file://` name held by a directory), is no error.
pub(crate) async fn delete(client: &Arc<dyn ObjectStore>, path: &Path) -> Result<()> {
    match client.delete(path).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => match client.head(path).await {
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            _ => Err(storage(format!("{path}"), "removing", &e)),
        },
    }
}

/// The URLs among `urls` (each under `root`) with any object under them: the
/// results an engine write refuses before any task runs.
pub fn occupied(
    root: &str,
    urls: &[String],
    options: &[(String, OptionValue)],
) -> Result<Vec<String>> {
    let (loc, opts) = Location::parse(root, options)?;
    let client = loc.client(opts.retries as usize)?;
    block_on(async {
        let mut out = Vec::new();
        for url in urls {
            let (dest, _) = Location::parse(url, options)?;
            if first_object(&client, &dest).await?.is_some() {
                out.push(url.clone());
            }
        }
        Ok(out)
    })
}

/// Writes `bytes` at `url`, replacing what is there: the driver's heartbeat,
/// whose modification time says it is alive.
pub fn put_object(url: &str, bytes: Vec<u8>, options: &[(String, OptionValue)]) -> Result<()> {
    let (loc, opts) = Location::parse(url, options)?;
    let client = loc.client(opts.retries as usize)?;
    block_on(async {
        client
            .put(loc.prefix(), PutPayload::from(bytes))
            .await
            .map(drop)
            .map_err(|e| storage(url.to_string(), "uploading", &e))
    })
}

async fn remove_all(
    client: &Arc<dyn ObjectStore>,
    loc: &Location,
    listed: Vec<Path>,
    concurrency: usize,
) -> Result<()> {
    futures::stream::iter(listed.iter().map(|p| delete(client, p)))
        .buffer_unordered(concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    // A filesystem keeps the directories its objects were in; they hold
    // nothing now.
    if let Some(dir) = loc.local_dir() {
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(dir, e)),
        }
    }
    Ok(())
}

/// Removes every object under `url` (a prefix), as a failed or finished job
/// removes its parts, and for `file://` the directory itself; returns how many
/// objects there were.
pub fn remove_prefix(url: &str, options: &[(String, OptionValue)]) -> Result<u64> {
    let (loc, opts) = Location::parse(url, options)?;
    let client = loc.client(opts.retries as usize)?;
    block_on(async {
        let listed = client
            .list(Some(loc.prefix()))
            .map_ok(|m| m.location)
            .try_collect::<Vec<_>>()
            .await
            .map_err(|e| storage(loc.url().to_string(), "listing", &e))?;
        let n = listed.len() as u64;
        remove_all(&client, &loc, listed, opts.max_concurrency).await?;
        Ok(n)
    })
}

/// Removes the job prefixes directly under `root` whose newest object (a live
/// driver refreshes its heartbeat object in it) was modified at least
/// `older_than` ago by this machine's clock, and returns their URLs. A job
/// whose driver is alive and beating more often than `older_than` is never
/// removed; the storage's clock and this one must agree to within the margin
/// `older_than` leaves.
pub fn clean_jobs(
    root: &str,
    older_than: Duration,
    options: &[(String, OptionValue)],
) -> Result<Vec<String>> {
    let (loc, opts) = Location::parse(root, options)?;
    let client = loc.client(opts.retries as usize)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|_| Error::internal("the clock is before 1970"))?;
    let now_ms = i64::try_from(now.as_millis()).unwrap_or(i64::MAX);
    let older_ms = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
    block_on(async {
        let top = client
            .list_with_delimiter(Some(loc.prefix()))
            .await
            .map_err(|e| storage(loc.url().to_string(), "listing", &e))?;
        let mut removed = Vec::new();
        for prefix in top.common_prefixes {
            let Some(name) = prefix.filename() else {
                continue;
            };
            if !name.starts_with(JOB_PREFIX) {
                continue;
            }
            let (job, _) = Location::parse(&loc.url_of(name), options)?;
            let metas = client
                .list(Some(job.prefix()))
                .try_collect::<Vec<_>>()
                .await
                .map_err(|e| storage(job.url().to_string(), "listing", &e))?;
            let newest = metas
                .iter()
                .map(|m| m.last_modified.timestamp_millis())
                .max();
            let stale = newest.is_none_or(|t| now_ms.saturating_sub(t) >= older_ms);
            if stale {
                let listed = metas.into_iter().map(|m| m.location).collect();
                remove_all(&client, &job, listed, opts.max_concurrency).await?;
                removed.push(job.url().to_string());
            }
        }
        Ok(removed)
    })
}
