//! An engine job's objects in object storage: its own prefix,
//! `root/.parts-XXXXXXXXXXXX/`, where its tasks put their parts, removed when
//! the job ends, and the checks and removals its publish makes.

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use loaderx_gather::{Error, Result};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::location::Location;
use crate::options::OptionValue;
use crate::publish::storage;
use crate::runtime::block_on;

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
