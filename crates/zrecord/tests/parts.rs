//! A store opened from the bytes of its files (`Metadata::from_parts`), its
//! records read from a payload source of fetched bytes, reads exactly what the
//! local reader reads, and refuses what the local reader refuses.

use std::fs;
use std::ops::Range;
use std::path::Path;

use zrecord::{
    data_file, Codec, DType, Error, Metadata, NotFetched, Parts, PayloadSource, RaggedView,
    ReadOptions, Schema, Sequential, Source, Store, Writer,
};

/// Whole data files in memory, as a fetching reader would hold ranges of them.
struct Files(Vec<Vec<u8>>);

impl PayloadSource for Files {
    fn bytes(&self, file: usize, range: Range<u64>) -> Option<&[u8]> {
        self.0
            .get(file)?
            .get(range.start as usize..range.end as usize)
    }
}

type Remote = Metadata<Vec<u8>>;

fn read_opt(p: &Path) -> Option<Vec<u8>> {
    fs::read(p).ok()
}

fn parts_of(dir: &Path) -> (Vec<u8>, Parts<Vec<u8>>, Files) {
    let header = fs::read(dir.join(zrecord::HEADER_FILE)).unwrap();
    let h = Store::open(dir).unwrap().header().clone();
    let parts = Parts {
        index: fs::read(dir.join(zrecord::INDEX_FILE)).unwrap(),
        index_sums: fs::read(dir.join(zrecord::INDEX_SUMS_FILE)).unwrap(),
        dict: read_opt(&dir.join(zrecord::DICT_FILE)),
        attrs: read_opt(&dir.join(zrecord::ATTRS_FILE)),
    };
    let files = (0..h.shard_sizes.len())
        .map(|s| fs::read(dir.join(data_file(s))).unwrap())
        .collect();
    (header, parts, Files(files))
}

fn dense(dir: &Path, codec: Codec, dict: Option<&[u8]>) {
    let schema = Schema::dense(DType::U16, &[7, 3], codec, 3).unwrap();
    let mut w = Writer::create(dir, schema, dict).unwrap();
    let data: Vec<u8> = (0..50 * 42).map(|i: u32| ((i * 31) % 97) as u8).collect();
    w.append_dense(50, &data, Source::Memory, &Sequential)
        .unwrap();
    w.finish().unwrap();
}

fn ragged(dir: &Path, codec: Codec) {
    let schema = Schema::ragged(DType::I32, 1, codec, 2).unwrap();
    let mut w = Writer::create(dir, schema, None).unwrap();
    let lens: Vec<u64> = (0..40).map(|i| (i * 7) % 11).collect();
    let total: u64 = lens.iter().sum();
    let values: Vec<u8> = (0..total * 4).map(|i| (i % 251) as u8).collect();
    let mut cu = vec![0i32];
    for l in &lens {
        cu.push(cu.last().unwrap() + *l as i32);
    }
    let view = RaggedView {
        values: &values,
        cu_seqlens: &cu,
        shapes: &lens,
    };
    w.append_ragged(&view, Source::Memory, &Sequential).unwrap();
    w.finish().unwrap();
}

fn same_reads(dir: &Path) {
    let local = Store::open(dir).unwrap();
    let (header, parts, files) = parts_of(dir);
    let name = Path::new("s3://bucket/store");
    let remote = Remote::from_parts(name, &header, parts, ReadOptions { checked: true }).unwrap();
    assert_eq!(remote.info().header(), local.header());
    assert_eq!(remote.info().dictionary(), local.dictionary());
    let n = local.len();
    let idx: Vec<u64> = (0..n).rev().chain([0, n / 2, 0]).collect();
    let plan = local.plan(&idx, &Sequential).unwrap();
    let mut want = vec![0u8; plan.output_len()];
    local.gather(&plan, &mut want, &Sequential).unwrap();
    let plan = remote.plan(&idx, &files, &Sequential).unwrap();
    let mut got = vec![0u8; plan.output_len()];
    remote.gather(&plan, &mut got, &Sequential, &files).unwrap();
    assert_eq!(got, want);
    // Resolved ahead with their sizes (and shapes), the records are planned
    // and gathered by a store holding none of its index.
    let r = remote.held_entries(&idx).unwrap().unwrap();
    let (_, bare_parts, _) = parts_of(dir);
    let bare = Metadata::from_parts(
        name,
        &header,
        Parts {
            index: NotFetched {
                len: bare_parts.index.len() as u64,
            },
            index_sums: bare_parts.index_sums,
            dict: bare_parts.dict,
            attrs: bare_parts.attrs,
        },
        ReadOptions { checked: true },
    )
    .unwrap();
    let plan = bare
        .plan_resolved(&idx, &r.entries, &r.sizes, &files)
        .unwrap();
    let mut got = vec![0u8; plan.output_len()];
    bare.gather(&plan, &mut got, &Sequential, &files).unwrap();
    assert_eq!(got, want);
    assert!(matches!(
        bare.plan_resolved(&idx[1..], &r.entries, &r.sizes, &files),
        Err(Error::InvalidArgument(_))
    ));
    remote.check_index().unwrap();
    remote.verify_records(0..n, &Sequential, &files).unwrap();
    // A source without the records' bytes is a caller's bug, never data.
    let none = Files(vec![Vec::new(); files.0.len()]);
    let nonempty = (0..n).find(|&i| {
        let mut stored = 0;
        local.record_sizes(i..i + 1, |_, s| stored = s).unwrap();
        stored > 0
    });
    if let Some(i) = nonempty {
        assert!(matches!(
            remote.verify_records(i..i + 1, &Sequential, &none),
            Err(Error::Internal(_))
        ));
    }
}

#[test]
fn every_codec_reads_as_the_local_store_does() {
    let d = tempfile::tempdir().unwrap();
    dense(&d.path().join("raw"), Codec::Raw, None);
    dense(&d.path().join("zstd"), Codec::Zstd, None);
    let dict: Vec<u8> = (0..=255u8).cycle().take(2048).collect();
    dense(&d.path().join("dict"), Codec::ZstdDict, Some(&dict));
    ragged(&d.path().join("rraw"), Codec::Raw);
    ragged(&d.path().join("rzstd"), Codec::Zstd);
    for case in ["raw", "zstd", "dict", "rraw", "rzstd"] {
        same_reads(&d.path().join(case));
    }
}

#[test]
fn damaged_parts_and_payloads_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("s");
    dense(&dir, Codec::Zstd, None);
    let (header, parts, files) = parts_of(&dir);
    let name = Path::new("http://h/s");
    let checked = ReadOptions { checked: true };
    let corrupt = |r: zrecord::Result<Remote>| match r {
        Err(Error::Corrupt { path, msg, .. }) => (path, msg),
        Err(e) => panic!("expected Corrupt, got {e}"),
        Ok(_) => panic!("expected Corrupt, got a store"),
    };
    let mut p = parts.clone();
    p.index.pop();
    let (path, msg) = corrupt(Remote::from_parts(name, &header, p, checked));
    assert_eq!(path, name.join("index.bin"));
    assert!(msg.contains("truncated"), "{msg}");
    let mut p = parts.clone();
    p.index[5] ^= 1;
    let (_, msg) = corrupt(Remote::from_parts(name, &header, p, checked));
    assert!(msg.contains("index checksum mismatch"), "{msg}");
    let mut p = parts.clone();
    p.index_sums[0] ^= 1;
    let (path, _) = corrupt(Remote::from_parts(name, &header, p, checked));
    assert_eq!(path, name.join("index.sum"));
    let mut h = header.clone();
    h[20] ^= 1;
    let (path, _) = corrupt(Remote::from_parts(name, &h, parts.clone(), checked));
    assert_eq!(path, name.join("header.bin"));

    let store = Remote::from_parts(name, &header, parts, checked).unwrap();
    let idx = [3u64, 4];
    let entry = store.entries(&idx[..1]).unwrap()[0];
    let mut bad = Files(files.0.clone());
    bad.0[entry.file as usize][entry.offset as usize + 3] ^= 0x20;
    let read = store.plan(&idx, &bad, &Sequential).and_then(|plan| {
        let mut out = vec![0u8; plan.output_len()];
        store.gather(&plan, &mut out, &Sequential, &bad)
    });
    match read {
        Err(Error::Corrupt { path, record, msg }) => {
            assert_eq!(path, name.join(data_file(entry.file as usize)));
            assert_eq!(record, Some(3));
            assert!(msg.contains("checksum mismatch"), "{msg}");
        }
        other => panic!("expected a checksum error, got {other:?}"),
    }
    assert!(matches!(
        store.verify_records(0..store.len(), &Sequential, &bad),
        Err(Error::Corrupt {
            record: Some(3),
            ..
        })
    ));
    let missing = Files(vec![Vec::new(); files.0.len()]);
    assert!(matches!(
        store.plan(&idx, &missing, &Sequential),
        Err(Error::Internal(_))
    ));
    assert!(matches!(
        store.entries(&[store.len()]),
        Err(Error::OutOfRange { .. })
    ));
}
