//! Publishing stores in object storage from part stores already there, as an
//! engine's tasks leave them: each part's data files are copied by the object
//! storage itself (a server-side copy; a hard link for `file://`), each index is
//! rewritten, and every header goes up last, after every other file of every
//! store. No payload byte passes through this process: it reads only the parts'
//! headers, indexes and dictionaries.

use std::path::Path;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use loaderx_gather::{Error, Result};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use xxhash_rust::xxh3::xxh3_64;
use zrecord::{Entry, Header, IndexSums, Kind, Schema};

use crate::location::Location;
use crate::options::OptionValue;
use crate::runtime::block_on;

/// One store to publish: the parts' URLs, in order, and where the result goes.
#[derive(Clone, Debug)]
pub struct RemoteConcat {
    /// The part stores' URLs, in the result's order.
    pub parts: Vec<String>,
    /// The result's URL; nothing may be there yet.
    pub dest: String,
    /// The result's attributes (a JSON object, checked by the caller); empty:
    /// none.
    pub attrs: Vec<u8>,
}

/// A part's small files, read and checked.
struct Part {
    loc: Location,
    header: Header,
    index: bytes::Bytes,
    dict: Option<bytes::Bytes>,
}

/// The result of one [`RemoteConcat`], ready but for its header.
struct Staged {
    loc: Location,
    header: Vec<u8>,
    records: u64,
}

pub(crate) fn storage(url: String, what: &str, e: &object_store::Error) -> Error {
    Error::Storage {
        url,
        msg: format!("{what} failed: {}", crate::cause::describe(e)),
    }
}

async fn get_all(
    client: &Arc<dyn ObjectStore>,
    loc: &Location,
    name: &str,
) -> Result<bytes::Bytes> {
    let got = client.get(&loc.path_of(name)).await;
    match got {
        Ok(r) => r
            .bytes()
            .await
            .map_err(|e| storage(loc.url_of(name), "reading", &e)),
        Err(object_store::Error::NotFound { .. }) => Err(Error::NotFound {
            url: loc.url().to_string(),
            what: name.to_string(),
        }),
        Err(e) => Err(storage(loc.url_of(name), "reading", &e)),
    }
}

fn corrupt(loc: &Location, name: &str, msg: String) -> Error {
    Error::Store(zrecord::Error::Corrupt {
        path: loc.url_of(name).into(),
        record: None,
        msg,
    })
}

/// Reads and checks a part's header, index and dictionary, and the sizes of its
/// data files.
async fn read_part(client: &Arc<dyn ObjectStore>, loc: Location) -> Result<Part> {
    let raw = get_all(client, &loc, zrecord::HEADER_FILE).await?;
    if raw.len() as u64 > zrecord::MAX_HEADER_BYTES {
        return Err(corrupt(
            &loc,
            zrecord::HEADER_FILE,
            "the header is too large".into(),
        ));
    }
    let header = Header::decode(&raw, Path::new(&loc.url_of(zrecord::HEADER_FILE)))?;
    let index = get_all(client, &loc, zrecord::INDEX_FILE).await?;
    if index.len() as u64 != header.index_size || xxh3_64(&index) != header.index_xxh3 {
        return Err(corrupt(
            &loc,
            zrecord::INDEX_FILE,
            "its size or checksum disagrees with the header".into(),
        ));
    }
    let dict = if header.dict_size > 0 {
        let d = get_all(client, &loc, zrecord::DICT_FILE).await?;
        if d.len() as u64 != header.dict_size || xxh3_64(&d) != header.dict_xxh3 {
            return Err(corrupt(
                &loc,
                zrecord::DICT_FILE,
                "its size or checksum disagrees with the header".into(),
            ));
        }
        Some(d)
    } else {
        None
    };
    for (k, &size) in header.shard_sizes.iter().enumerate() {
        let name = zrecord::data_file(k);
        let meta = client
            .head(&loc.path_of(&name))
            .await
            .map_err(|e| storage(loc.url_of(&name), "looking up the size", &e))?;
        if meta.size != size {
            return Err(corrupt(
                &loc,
                &name,
                format!("is {} bytes but its header says {size}", meta.size),
            ));
        }
    }
    Ok(Part {
        loc,
        header,
        index,
        dict,
    })
}

fn same_schema(a: &Schema, b: &Schema) -> bool {
    a.kind == b.kind
        && a.dtype == b.dtype
        && a.ndim == b.ndim
        && a.codec == b.codec
        && (a.kind == Kind::Ragged || a.item_shape == b.item_shape)
}

/// Copies every part's data files to the result and writes its index, index
/// sums, dictionary and attributes; returns its header, not yet written.
async fn stage(
    client: &Arc<dyn ObjectStore>,
    job: &RemoteConcat,
    options: &[(String, OptionValue)],
    concurrency: usize,
    written: &mut Written,
) -> Result<Staged> {
    let (dest, _) = Location::parse(&job.dest, options)?;
    if crate::jobs::first_object(client, &dest).await?.is_some() {
        return Err(Error::Exists(dest.url().to_string()));
    }
    written.dirs.extend(dest.local_dir());
    let parts = futures::stream::iter(job.parts.iter().map(|url| async move {
        let (loc, _) = Location::parse(url, options)?;
        read_part(client, loc).await
    }))
    .buffered(concurrency)
    .try_collect::<Vec<_>>()
    .await?;
    let Some(first) = parts.first() else {
        return Err(Error::invalid(
            "a remote concatenation needs at least one part",
        ));
    };
    let mut index = Vec::new();
    let mut sizes = Vec::new();
    let mut records: u64 = 0;
    let mut copies = Vec::new();
    for p in &parts {
        if !same_schema(&p.header.schema, &first.header.schema) || p.dict != first.dict {
            return Err(Error::invalid(format!(
                "{}: its schema or dictionary differs from {}'s; concatenated stores must \
                 share one schema",
                p.loc.url(),
                first.loc.url()
            )));
        }
        let base = u32::try_from(sizes.len()).map_err(|_| Error::invalid("too many data files"))?;
        let es = p.header.schema.entry_size();
        for raw in p.index.chunks_exact(es) {
            let mut e = Entry::decode(raw);
            let in_file = p.header.shard_sizes.get(e.file as usize).is_some_and(|&n| {
                e.offset
                    .checked_add(e.stored_len as u64)
                    .is_some_and(|end| end <= n)
            });
            if !in_file {
                return Err(corrupt(
                    &p.loc,
                    zrecord::INDEX_FILE,
                    "an entry points outside its data files".into(),
                ));
            }
            e.file = base
                .checked_add(e.file)
                .ok_or_else(|| Error::invalid("too many data files"))?;
            e.encode_into(&mut index);
            index.extend_from_slice(&raw[zrecord::ENTRY_FIXED..]);
        }
        records = records
            .checked_add(p.header.record_count)
            .ok_or_else(|| Error::invalid("too many records"))?;
        for (k, &size) in p.header.shard_sizes.iter().enumerate() {
            let to = zrecord::data_file(sizes.len());
            copies.push((
                p.loc.path_of(&zrecord::data_file(k)),
                dest.path_of(&to),
                dest.url_of(&to),
            ));
            written.files.push(dest.path_of(&to));
            sizes.push(size);
        }
    }
    if sizes.len() > zrecord::MAX_DATA_FILES as usize {
        return Err(Error::invalid(format!(
            "the parts hold {} data files in all, but a store holds at most {}",
            sizes.len(),
            zrecord::MAX_DATA_FILES
        )));
    }
    futures::stream::iter(copies.iter().map(|(from, to, url)| async move {
        client
            .copy(from, to)
            .await
            .map_err(|e| storage(url.clone(), "copying a part's data file", &e))
    }))
    .buffer_unordered(concurrency)
    .try_collect::<Vec<()>>()
    .await?;
    let mut sums = IndexSums::default();
    sums.update(&index);
    let sums = sums.finish();
    let mut put = |name: &'static str, bytes: Vec<u8>| {
        let dest = &dest;
        written.files.push(dest.path_of(name));
        async move {
            client
                .put(&dest.path_of(name), PutPayload::from(bytes))
                .await
                .map(|_| ())
                .map_err(|e| storage(dest.url_of(name), "uploading", &e))
        }
    };
    let mut schema = first.header.schema.clone();
    schema.data_shards =
        u32::try_from(sizes.len()).map_err(|_| Error::invalid("too many data files"))?;
    let header = Header {
        version: zrecord::version_for(schema.data_shards),
        record_count: records,
        index_size: index.len() as u64,
        index_xxh3: xxh3_64(&index),
        dict_size: first.header.dict_size,
        dict_xxh3: first.header.dict_xxh3,
        shard_sizes: sizes,
        index_sums_xxh3: xxh3_64(&sums),
        attrs_size: job.attrs.len() as u64,
        attrs_xxh3: if job.attrs.is_empty() {
            0
        } else {
            xxh3_64(&job.attrs)
        },
        checksum: 0,
        schema,
    };
    put(zrecord::INDEX_FILE, index).await?;
    put(zrecord::INDEX_SUMS_FILE, sums).await?;
    if let Some(d) = &first.dict {
        put(zrecord::DICT_FILE, d.to_vec()).await?;
    }
    if !job.attrs.is_empty() {
        put(zrecord::ATTRS_FILE, job.attrs.clone()).await?;
    }
    Ok(Staged {
        loc: dest,
        header: header.encode(),
        records,
    })
}

/// What a publish has written, or begun to write: removed again, headers
/// first, when it fails.
#[derive(Default)]
struct Written {
    headers: Vec<ObjectPath>,
    files: Vec<ObjectPath>,
    /// The `file://` directories of the results, removed once empty.
    dirs: Vec<std::path::PathBuf>,
}

/// Publishes every store of `jobs`, all or none: all their other files first,
/// then all their headers (a reader opens a store by its header). On any
/// failure, the headers already written are removed, then every other file the
/// publish wrote, before the error is returned: no result is left, whole or
/// partial. A destination with any object under it is refused. Returns each
/// result's record count. The parts and the results must be in one bucket (or
/// one `file://` filesystem): a copy is made by the object storage, never
/// through this process.
pub fn concat_remote(
    root: &str,
    jobs: &[RemoteConcat],
    options: &[(String, OptionValue)],
) -> Result<Vec<u64>> {
    let (loc, opts) = Location::parse(root, options)?;
    let client = loc.client(opts.retries as usize)?;
    for url in jobs.iter().flat_map(|j| j.parts.iter().chain([&j.dest])) {
        if !url.starts_with(&format!("{}/", loc.url())) {
            return Err(Error::invalid(format!(
                "{url}: lies outside {}, where the stores are published",
                loc.url()
            )));
        }
    }
    block_on(async {
        let mut written = Written::default();
        let published = publish_all(&client, jobs, options, &opts, &mut written).await;
        match published {
            Ok(records) => Ok(records),
            Err(e) => match roll_back(&client, &written, opts.max_concurrency).await {
                Ok(()) => Err(e),
                Err(left) => Err(Error::Storage {
                    url: loc.url().to_string(),
                    msg: format!(
                        "{e}; removing what the failed publish had written failed too, so \
                         objects of it remain: {left}"
                    ),
                }),
            },
        }
    })
}

async fn publish_all(
    client: &Arc<dyn ObjectStore>,
    jobs: &[RemoteConcat],
    options: &[(String, OptionValue)],
    opts: &crate::options::FetchOptions,
    written: &mut Written,
) -> Result<Vec<u64>> {
    let mut staged = Vec::with_capacity(jobs.len());
    for job in jobs {
        staged.push(stage(client, job, options, opts.max_concurrency, written).await?);
    }
    let mut records = Vec::with_capacity(staged.len());
    for s in staged {
        let path = s.loc.path_of(zrecord::HEADER_FILE);
        written.headers.push(path.clone());
        client
            .put(&path, PutPayload::from(s.header))
            .await
            .map_err(|e| storage(s.loc.url_of(zrecord::HEADER_FILE), "uploading", &e))?;
        records.push(s.records);
    }
    Ok(records)
}

/// Removes what a failed publish wrote: every header first, one at a time, so
/// that no result stays open to readers while the rest goes; then every other
/// file; then the results' `file://` directories if nothing else is in them.
async fn roll_back(
    client: &Arc<dyn ObjectStore>,
    written: &Written,
    concurrency: usize,
) -> Result<()> {
    for path in &written.headers {
        crate::jobs::delete(client, path).await?;
    }
    futures::stream::iter(written.files.iter().map(|p| crate::jobs::delete(client, p)))
        .buffer_unordered(concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    for dir in &written.dirs {
        match std::fs::remove_dir(dir) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::DirectoryNotEmpty
                ) => {}
            Err(e) => return Err(Error::io(dir, e)),
        }
    }
    Ok(())
}
