//! A published local store into object storage.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use loaderx_gather::{Error, Result};
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use zrecord::Store;

use crate::fetch::size_of;
use crate::location::Location;
use crate::options::{FetchOptions, OptionValue};
use crate::runtime::block_on;

/// Files up to this size go up in one request; larger ones in parts of this size.
const PART_BYTES: usize = 32 << 20;

/// Uploads the published store at `local` to `url`. The header, which a reader
/// reads first and which names every other file's size and checksum, goes up
/// last, after every other file is there with its size checked, so no reader
/// ever opens a partial store. With `overwrite`, a store already at `url` has its
/// header removed first: until the new header lands, readers find no store
/// there (never a mix of old and new files; a reader that opened the old store
/// earlier gets checksum errors, never wrong data). Without it, an existing
/// store is an error.
pub fn upload(
    local: &Path,
    url: &str,
    options: &[(String, OptionValue)],
    overwrite: bool,
) -> Result<()> {
    let store = Store::open(local)?;
    let (loc, opts) = Location::parse(url, options)?;
    let client = loc.client(opts.retries as usize)?;
    let header = store.header();
    let mut files: Vec<(String, u64)> = vec![(zrecord::INDEX_FILE.into(), header.index_size)];
    if header.version >= 2 {
        files.push((
            zrecord::INDEX_SUMS_FILE.into(),
            zrecord::index_sums_size(header.index_size),
        ));
    }
    if header.dict_size > 0 {
        files.push((zrecord::DICT_FILE.into(), header.dict_size));
    }
    if header.attrs_size > 0 {
        files.push((zrecord::ATTRS_FILE.into(), header.attrs_size));
    }
    for (s, &size) in header.shard_sizes.iter().enumerate() {
        files.push((zrecord::data_file(s), size));
    }
    block_on(async {
        let hpath = loc.path_of(zrecord::HEADER_FILE);
        if size_of(&client, &loc, zrecord::HEADER_FILE, &opts)
            .await?
            .is_some()
        {
            if !overwrite {
                return Err(Error::Exists(loc.url().to_string()));
            }
            client.delete(&hpath).await.map_err(|e| Error::Storage {
                url: loc.url_of(zrecord::HEADER_FILE),
                msg: format!(
                    "removing the old header failed: {}",
                    crate::cause::describe(&e)
                ),
            })?;
        }
        futures::stream::iter(
            files
                .iter()
                .map(|(name, size)| put_file(&client, &loc, &opts, local, name, *size)),
        )
        .buffer_unordered(opts.max_concurrency)
        .try_collect::<Vec<()>>()
        .await?;
        let header_bytes = read_all(&local.join(zrecord::HEADER_FILE))?;
        put(&client, &loc, zrecord::HEADER_FILE, header_bytes).await
    })
}

fn read_all(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::io(path.to_path_buf(), source))
}

async fn put(
    client: &Arc<dyn ObjectStore>,
    loc: &Location,
    name: &str,
    bytes: Vec<u8>,
) -> Result<()> {
    client
        .put(&loc.path_of(name), PutPayload::from(bytes))
        .await
        .map(|_| ())
        .map_err(|e| Error::Storage {
            url: loc.url_of(name),
            msg: format!("uploading failed: {}", crate::cause::describe(&e)),
        })
}

/// Uploads the store file `name` of `size` bytes and checks that the object
/// storage holds that many.
async fn put_file(
    client: &Arc<dyn ObjectStore>,
    loc: &Location,
    opts: &FetchOptions,
    local: &Path,
    name: &str,
    size: u64,
) -> Result<()> {
    let path = local.join(name);
    let io = |source| Error::io(path.clone(), source);
    let fail = |e: object_store::Error| Error::Storage {
        url: loc.url_of(name),
        msg: format!("uploading failed: {}", crate::cause::describe(&e)),
    };
    if size <= PART_BYTES as u64 {
        put(client, loc, name, read_all(&path)?).await?;
    } else {
        let mut file = std::fs::File::open(&path).map_err(io)?;
        let upload = client
            .put_multipart(&loc.path_of(name))
            .await
            .map_err(fail)?;
        let mut w = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        let mut buf = vec![0u8; PART_BYTES];
        loop {
            let n = file.read(&mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            w.wait_for_capacity(2).await.map_err(fail)?;
            w.write(&buf[..n]);
        }
        w.finish().await.map_err(fail)?;
    }
    match size_of(client, loc, name, opts).await? {
        Some(n) if n == size => Ok(()),
        found => Err(Error::Storage {
            url: loc.url_of(name),
            msg: format!(
                "after uploading, the object holds {} bytes, the store's file {size}",
                found.map_or("no".to_string(), |n| n.to_string())
            ),
        }),
    }
}
