//! Opening a remote store: its small files and its data files' sizes, read and
//! checked before any record is.

use super::*;

/// Checks that every data file exists with the size the header gives it.
pub(super) async fn check_sizes(fetcher: &Fetcher, sizes: &[u64]) -> Result<()> {
    let found = futures::future::try_join_all(
        (0..sizes.len()).map(|s| async move { fetcher.size_of(&data_file(s)).await }),
    )
    .await?;
    let loc = fetcher.loc();
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

/// Checks that the small file `name` exists with the size the header gives
/// it: for an index read on demand, so that a truncated index fails the open,
/// not a gather much later.
async fn check_size(fetcher: &Fetcher, name: &str, size: u64) -> Result<()> {
    match fetcher.size_of(name).await? {
        Some(n) if n == size => Ok(()),
        Some(n) => Err(corrupt(
            fetcher.loc().url_of(name),
            format!("the file is {n} bytes but the header says {size}"),
        )),
        None => Err(corrupt(
            fetcher.loc().url_of(name),
            format!("the file is missing (the header says it is {size} bytes)"),
        )),
    }
}

/// Parts of a small file asked for at once before its size is confirmed.
const AT_ONCE: u64 = 16;

/// `range` of the small file `name` that the header says is `size` bytes, and
/// that size checked in the same request.
async fn sized_part(fetcher: &Fetcher, name: &str, size: u64, range: Range<u64>) -> Result<Bytes> {
    let what = format!("reading bytes {}..{}", range.start, range.end);
    match fetcher.get_sized(name, range, &what).await {
        Ok(Some((bytes, n))) if n == size => Ok(bytes),
        Ok(Some((_, n))) => Err(corrupt(
            fetcher.loc().url_of(name),
            format!("the file is {n} bytes but the header says {size}"),
        )),
        // Missing, or shorter than the range: its size says which.
        Ok(None) => {
            check_size(fetcher, name, size).await?;
            Err(Error::internal(format!(
                "{what} of {} was refused as past its end, yet it has the {size} bytes the header says",
                fetcher.loc().url_of(name)
            )))
        }
        Err(e) => Err(e),
    }
}

/// One small file of the store, from the cache when it holds it with the
/// header's checksum, else fetched (and cached). `store` is the header checksum.
async fn small(
    fetcher: &Fetcher,
    cache: Option<&Cache>,
    store: u64,
    name: &str,
    size: u64,
    sum: u64,
) -> Result<Vec<u8>> {
    if let Some(c) = cache {
        if let Some(b) = c.get_small(store, name, size) {
            if xxh3_64(&b) == sum {
                return Ok(b);
            }
            c.remove_small(store, name);
        }
    }
    // A large file comes in parallel parts, each response confirming the size.
    // The header's size is a claim: past `AT_ONCE` parts the first confirms it
    // before the others are asked for, so that a header claiming a huge file
    // costs one request, not one per part.
    let step = fetcher.opts().max_request_bytes.max(1);
    let part = |k: u64| sized_part(fetcher, name, size, k * step..((k + 1) * step).min(size));
    let parts = size.div_ceil(step);
    let (first, rest) = if parts <= AT_ONCE {
        let (first, rest) =
            futures::try_join!(part(0), futures::future::try_join_all((1..parts).map(part)))?;
        (first, rest)
    } else {
        let first = part(0).await?;
        (
            first,
            futures::future::try_join_all((1..parts).map(part)).await?,
        )
    };
    let mut out = Vec::new();
    out.try_reserve_exact(size as usize)
        .map_err(|_| zrecord::Error::OutOfMemory {
            bytes: size as usize,
        })?;
    for p in std::iter::once(first).chain(rest) {
        out.extend_from_slice(&p);
    }
    if let Some(c) = cache {
        if xxh3_64(&out) == sum {
            c.put_small(store, name, &out);
        }
    }
    Ok(out)
}

/// The header, read by one request for as many bytes as a header may have,
/// whose response gives the file's size too.
async fn header_bytes(fetcher: &Fetcher) -> Result<Bytes> {
    let loc = fetcher.loc();
    let hname = zrecord::HEADER_FILE;
    let not_found = || Error::NotFound {
        url: loc.url().to_string(),
        what: loc.url_of(hname),
    };
    let too_big = |size: u64| {
        corrupt(
            loc.url_of(hname),
            format!(
                "the header is {size} bytes; a header is at most {}",
                zrecord::MAX_HEADER_BYTES
            ),
        )
    };
    let what = "reading the header";
    match fetcher
        .get_sized(hname, 0..zrecord::MAX_HEADER_BYTES, what)
        .await
    {
        Ok(Some((_, size))) if size > zrecord::MAX_HEADER_BYTES => Err(too_big(size)),
        Ok(Some((bytes, _))) => Ok(bytes),
        // Missing, or empty (no range of it can be answered).
        Ok(None) => match fetcher.size_of(hname).await? {
            None => Err(not_found()),
            Some(_) => Ok(Bytes::new()),
        },
        Err(e) => Err(e),
    }
}

/// Reads and checks everything but the records: the header first, then the
/// other small files and the data files' sizes, concurrently.
pub(super) async fn open_parts(
    fetcher: &Fetcher,
    cache: Option<&Cache>,
) -> Result<Metadata<RemoteIndex>> {
    let loc = fetcher.loc();
    let hname = zrecord::HEADER_FILE;
    let hbytes = header_bytes(fetcher).await?;
    let name = Path::new(loc.url());
    let header = zrecord::Header::decode(&hbytes, &name.join(hname))?;
    let id = header.checksum;
    let sums_size = if header.version >= 2 {
        zrecord::index_sums_size(header.index_size)
    } else {
        0
    };
    let optional = |size: u64, file: &'static str, sum: u64| async move {
        match size {
            0 => Ok(None),
            n => small(fetcher, cache, id, file, n, sum).await.map(Some),
        }
    };
    // A store with block checksums has its index fetched on demand; one
    // without (version 1) has it read whole here.
    let (index, index_sums, dict, attrs, ()) = futures::try_join!(
        async {
            if header.version >= 2 {
                check_size(fetcher, zrecord::INDEX_FILE, header.index_size).await?;
                return Ok(RemoteIndex::OnDemand(header.index_size));
            }
            let whole = small(
                fetcher,
                cache,
                id,
                zrecord::INDEX_FILE,
                header.index_size,
                header.index_xxh3,
            );
            Ok(RemoteIndex::Whole(whole.await?))
        },
        async {
            Ok(
                optional(sums_size, zrecord::INDEX_SUMS_FILE, header.index_sums_xxh3)
                    .await?
                    .unwrap_or_default(),
            )
        },
        optional(header.dict_size, zrecord::DICT_FILE, header.dict_xxh3),
        optional(header.attrs_size, zrecord::ATTRS_FILE, header.attrs_xxh3),
        check_sizes(fetcher, &header.shard_sizes),
    )?;
    let parts = Parts {
        index,
        index_sums,
        dict,
        attrs,
    };
    Ok(Metadata::from_parts(
        name,
        &hbytes,
        parts,
        ReadOptions { checked: true },
    )?)
}
