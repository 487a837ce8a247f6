//! A published local store into object storage.

use std::io::Read;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use loaderx_gather::{Error, Result};
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use zrecord::Store;

use crate::fetch::{size_of, Tries};
use crate::location::Location;
use crate::options::OptionValue;
use crate::runtime::block_on;

/// Files up to this size go up in one request; larger ones in parts of this size.
const PART_BYTES: usize = 32 << 20;
/// Files uploaded at once at most, whatever `max_concurrency` allows: each
/// holds a part of `PART_BYTES` in memory, so this bounds an upload's to 2 GiB.
const FILES_AT_ONCE: usize = 64;

/// Uploads the published store at `local` to `url`. The header, which a reader
/// reads first and which names every other file's size and checksum, goes up
/// last, after every other file is there with its size checked, so no reader
/// ever opens a partial store. With `overwrite`, a store already at `url` has its
/// header removed first: until the new header lands, readers find no store
/// there (never a mix of old and new files; a reader that opened the old store
/// earlier gets checksum errors, never wrong data), and the files its header
/// names that the new store lacks (data files past the new store's, a
/// dictionary, attributes) are removed. Without it, an existing store is an
/// error. A `file://` destination that is the source itself, or lies inside
/// it (through links too), is refused before anything is read or written.
pub fn upload(
    local: &Path,
    url: &str,
    options: &[(String, OptionValue)],
    overwrite: bool,
) -> Result<()> {
    let store = Store::open(local)?;
    let (loc, opts) = Location::parse(url, options)?;
    if let Some(dest) = loc.local_dir() {
        refuse_own_source(local, &dest, loc.url())?;
    }
    // Writes retry inside object_store; reads (sizes, the old header) retry
    // in crate::fetch, which knows a refused connection and the deadline.
    let client = loc.client(opts.retries as usize)?;
    let reader = loc.client(0)?;
    let files = store_files(store.header());
    let answered = AtomicBool::new(false);
    let tries = Tries {
        loc: &loc,
        opts: &opts,
        answered: &answered,
    };
    block_on(async {
        let hpath = loc.path_of(zrecord::HEADER_FILE);
        if let Some(size) = size_of(&reader, zrecord::HEADER_FILE, &tries).await? {
            if !overwrite {
                return Err(Error::Exists(loc.url().to_string()));
            }
            let replaced = replaced_files(&reader, &loc, size).await?;
            client.delete(&hpath).await.map_err(|e| Error::Storage {
                url: loc.url_of(zrecord::HEADER_FILE),
                msg: format!(
                    "removing the old header failed: {}",
                    crate::cause::describe(&e)
                ),
            })?;
            for (name, _) in replaced {
                if !files.iter().any(|(n, _)| *n == name) {
                    remove_stale(&client, &loc, &name).await?;
                }
            }
        }
        futures::stream::iter(
            files
                .iter()
                .map(|(name, size)| put_file(&client, &reader, &tries, local, name, *size)),
        )
        .buffer_unordered(opts.max_concurrency.min(FILES_AT_ONCE))
        .try_collect::<Vec<()>>()
        .await?;
        let header_bytes = read_all(&local.join(zrecord::HEADER_FILE))?;
        put(&client, &loc, zrecord::HEADER_FILE, header_bytes).await
    })
}

/// Every file of the store `header` describes but the header, with its size.
fn store_files(header: &zrecord::Header) -> Vec<(String, u64)> {
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
    files
}

/// The files of the store being replaced at `loc`, from its header of `size`
/// bytes; none when that header is not one loaderx reads (its other files are
/// then unknown and left).
async fn replaced_files(
    client: &Arc<dyn ObjectStore>,
    loc: &Location,
    size: u64,
) -> Result<Vec<(String, u64)>> {
    if size == 0 || size > zrecord::MAX_HEADER_BYTES {
        return Ok(Vec::new());
    }
    let name = zrecord::HEADER_FILE;
    let bytes = client
        .get_range(&loc.path_of(name), 0..size)
        .await
        .map_err(|e| Error::Storage {
            url: loc.url_of(name),
            msg: format!(
                "reading the replaced store's header failed: {}",
                crate::cause::describe(&e)
            ),
        })?;
    let path = Path::new(loc.url()).join(name);
    Ok(zrecord::Header::decode(&bytes, &path)
        .map(|h| store_files(&h))
        .unwrap_or_default())
}

/// Removes the replaced store's file `name`, which the new store lacks; one
/// already gone is fine.
async fn remove_stale(client: &Arc<dyn ObjectStore>, loc: &Location, name: &str) -> Result<()> {
    match client.delete(&loc.path_of(name)).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(Error::Storage {
            url: loc.url_of(name),
            msg: format!(
                "removing this file of the replaced store failed: {}",
                crate::cause::describe(&e)
            ),
        }),
    }
}

/// Refuses a destination directory `dest` that is the source store `local` or
/// lies inside it: the same file (device and inode) or the same resolved path,
/// for `dest` and each of its existing parents. Uploading a store onto itself
/// would remove its header first and leave it unopenable.
fn refuse_own_source(local: &Path, dest: &Path, url: &str) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let io = |source| Error::io(local.to_path_buf(), source);
    let src = std::fs::metadata(local).map_err(io)?;
    let real = std::fs::canonicalize(local).map_err(io)?;
    let mut at = Some(dest);
    while let Some(p) = at {
        if let Ok(m) = std::fs::metadata(p) {
            let same_file = m.dev() == src.dev() && m.ino() == src.ino();
            if same_file || std::fs::canonicalize(p).is_ok_and(|c| c == real) {
                let place = if p == dest { "is" } else { "lies inside" };
                return Err(Error::invalid(format!(
                    "{url}: {place} the store being uploaded ({}); uploading a store onto \
                     itself would destroy it, so upload it somewhere else",
                    local.display()
                )));
            }
        }
        at = p.parent();
    }
    Ok(())
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
    reader: &Arc<dyn ObjectStore>,
    tries: &Tries<'_>,
    local: &Path,
    name: &str,
    size: u64,
) -> Result<()> {
    let loc = tries.loc;
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
    match size_of(reader, name, tries).await? {
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
