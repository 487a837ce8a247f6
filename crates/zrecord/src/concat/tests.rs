//! Concatenation: records in order, every codec and kind, links and copies,
//! refusals, and failures part way.

use super::*;
use crate::codec::{train_dictionary, Codec, ALL_CODECS};
use crate::dtype::DType;
use crate::parallel::Sequential;
use crate::ragged::RaggedView;
use crate::writer::{Source, Writer};

/// A record as read back: its shape (Ragged) and logical bytes.
type Rec = (Vec<u64>, Vec<u8>);

fn no_progress() -> impl FnMut(u64, u64) -> Result<()> {
    |_, _| Ok(())
}

fn dict() -> Vec<u8> {
    let data: Vec<u8> = (0..64 * 256u32).map(|i| (i * 7 % 251) as u8).collect();
    train_dictionary(&data, &[256; 64], 1024).unwrap()
}

fn dict_for(codec: Codec) -> Option<Vec<u8>> {
    (codec == Codec::ZstdDict).then(dict)
}

/// Writes a Ragged u16 store of ndim 1 with records of the given lengths;
/// the values start at `seed`.
fn ragged(path: &Path, codec: Codec, files: u8, lens: &[u64], seed: u16) -> Vec<Rec> {
    let d = dict_for(codec);
    let schema = Schema::ragged(DType::U16, 1, codec, files.into()).unwrap();
    let mut w = Writer::create(path, schema, d.as_deref()).unwrap();
    let mut values = Vec::new();
    let mut cu = vec![0i32];
    let mut recs = Vec::new();
    let mut v = seed;
    for &n in lens {
        let mut bytes = Vec::new();
        for _ in 0..n {
            bytes.extend_from_slice(&v.to_le_bytes());
            v = v.wrapping_mul(31).wrapping_add(7);
        }
        values.extend_from_slice(&bytes);
        cu.push(cu.last().unwrap() + n as i32);
        recs.push((vec![n], bytes));
    }
    let view = RaggedView {
        values: &values,
        cu_seqlens: &cu,
        shapes: lens,
    };
    w.append_ragged(&view, Source::Memory, &Sequential).unwrap();
    w.finish().unwrap();
    recs
}

/// Writes a Dense store of `item` u8 items holding `n` records from `seed`.
fn dense(path: &Path, codec: Codec, files: u8, item: &[u64], n: usize, seed: u8) -> Vec<Rec> {
    let d = dict_for(codec);
    let schema = Schema::dense(DType::U8, item, codec, files.into()).unwrap();
    let rb = schema.record_bytes().unwrap() as usize;
    let mut w = Writer::create(path, schema, d.as_deref()).unwrap();
    let data: Vec<u8> = (0..n * rb)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect();
    w.append_dense(n, &data, Source::Memory, &Sequential)
        .unwrap();
    w.finish().unwrap();
    (0..n)
        .map(|k| (Vec::new(), data[k * rb..(k + 1) * rb].to_vec()))
        .collect()
}

fn read_all(path: &Path) -> Vec<Rec> {
    let s = Store::open(path).unwrap();
    s.verify(&Sequential).unwrap();
    (0..s.len())
        .map(|i| {
            let idx = [i];
            let plan = s.plan(&idx, &Sequential).unwrap();
            let mut out = vec![0u8; plan.output_len()];
            s.gather(&plan, &mut out, &Sequential).unwrap();
            match plan.layout() {
                None => (Vec::new(), out),
                Some(l) => {
                    let shape = out[l.shapes_offset..l.shapes_offset + 8 * l.ndim]
                        .chunks(8)
                        .map(|c| format::le_u64(c, 0))
                        .collect();
                    (shape, out[..l.values_bytes].to_vec())
                }
            }
        })
        .collect()
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn run(sources: &[PathBuf], dest: &Path, options: &ConcatOptions<'_>) -> Result<ConcatReport> {
    concat(sources, dest, options, &Sequential, &mut no_progress())
}

#[test]
fn every_codec_and_kind_concatenates_to_the_records_in_order() {
    let root = tempfile::tempdir().unwrap();
    for codec in ALL_CODECS {
        // Sources of 1, 3 and 2 data files; one holds no record at all, and
        // a record may have no element.
        let p = |k: usize| root.path().join(format!("{}-r{k}", codec.name()));
        let mut want = ragged(&p(0), codec, 1, &[3, 0, 5], 1);
        want.extend(ragged(&p(1), codec, 3, &[], 2));
        want.extend(ragged(&p(2), codec, 2, &[0, 9, 1, 4000], 3));
        let dest = root.path().join(format!("{}-ragged", codec.name()));
        let r = run(&[p(0), p(1), p(2)], &dest, &ConcatOptions::default()).unwrap();
        assert_eq!((r.records, r.data_files, r.linked_files), (7, 6, 6));
        assert_eq!((r.copied_files, r.copied_bytes), (0, 0));
        assert_eq!(read_all(&dest), want, "{codec:?}");
        let s = Store::open(&dest).unwrap();
        assert_eq!(s.header().checksum, r.header_checksum);
        assert_eq!(s.schema().data_shards, 6);
        for k in 0..3 {
            assert_ne!(
                Store::open(&p(k)).unwrap().header().checksum,
                r.header_checksum
            );
        }

        let q = |k: usize| root.path().join(format!("{}-d{k}", codec.name()));
        let mut want = dense(&q(0), codec, 4, &[3, 2], 10, 1);
        want.extend(dense(&q(1), codec, 1, &[3, 2], 1, 2));
        let dest = root.path().join(format!("{}-dense", codec.name()));
        let r = run(&[q(0), q(1)], &dest, &ConcatOptions::default()).unwrap();
        assert_eq!((r.records, r.data_files), (11, 5));
        assert_eq!(read_all(&dest), want, "{codec:?}");
    }
}

#[test]
fn zero_size_dense_records_and_one_source() {
    let root = tempfile::tempdir().unwrap();
    let a = root.path().join("a");
    let b = root.path().join("b");
    let mut want = dense(&a, Codec::Raw, 2, &[4, 0], 5, 0);
    want.extend(dense(&b, Codec::Raw, 2, &[4, 0], 3, 0));
    let dest = root.path().join("ab");
    assert_eq!(
        run(&[a.clone(), b], &dest, &ConcatOptions::default())
            .unwrap()
            .records,
        8
    );
    assert_eq!(read_all(&dest), want);
    assert!(want.iter().all(|r| r.1.is_empty()));

    // One source republished: the same records, files and index, so the
    // same header and identity.
    let one = root.path().join("one");
    let r = run(std::slice::from_ref(&a), &one, &ConcatOptions::default()).unwrap();
    assert_eq!(read_all(&one), read_all(&a));
    assert_eq!(
        r.header_checksum,
        Store::open(&a).unwrap().header().checksum
    );
}

#[test]
fn copies_when_asked_and_shares_no_file() {
    let root = tempfile::tempdir().unwrap();
    let a = root.path().join("a");
    let want = dense(&a, Codec::Zstd, 3, &[100], 50, 9);
    let dest = root.path().join("copy");
    let options = ConcatOptions {
        copy: true,
        verify_records: true,
        ..Default::default()
    };
    let r = run(&[a.clone(), a.clone()], &dest, &options).unwrap();
    assert_eq!((r.linked_files, r.copied_files), (0, 6));
    let sizes: u64 = Store::open(&a).unwrap().header().shard_sizes.iter().sum();
    assert_eq!(r.copied_bytes, 2 * sizes);
    let twice: Vec<Rec> = want.iter().chain(&want).cloned().collect();
    assert_eq!(read_all(&dest), twice);
    for k in 0..6 {
        let m = std::fs::metadata(dest.join(format::data_file(k))).unwrap();
        let src = std::fs::metadata(a.join(format::data_file(k % 3))).unwrap();
        assert_eq!(m.nlink(), 1);
        assert_ne!(m.ino(), src.ino());
    }
}

#[test]
fn linked_files_are_the_sources_files() {
    let root = tempfile::tempdir().unwrap();
    let a = root.path().join("a");
    dense(&a, Codec::Raw, 2, &[8], 20, 1);
    let dest = root.path().join("d");
    run(std::slice::from_ref(&a), &dest, &ConcatOptions::default()).unwrap();
    for k in 0..2 {
        let m = std::fs::metadata(dest.join(format::data_file(k))).unwrap();
        let src = std::fs::metadata(a.join(format::data_file(k))).unwrap();
        assert_eq!((m.ino(), m.nlink()), (src.ino(), 2));
    }
}

#[test]
fn data_files_that_are_links_are_taken_as_their_targets() {
    let root = tempfile::tempdir().unwrap();
    let p = |n: &str| root.path().join(n);
    let want_a = dense(&p("a"), Codec::Zstd, 2, &[24], 30, 3);
    let want_b = dense(&p("b"), Codec::Zstd, 1, &[24], 10, 4);
    // a's data files live elsewhere, one by a relative link (which a linked link
    // would resolve against the result's directory), one by an absolute link.
    std::fs::create_dir(p("elsewhere")).unwrap();
    for (k, target) in [
        (0, PathBuf::from("../elsewhere/data-0")),
        (1, p("elsewhere/data-1")),
    ] {
        let f = p("a").join(format::data_file(k));
        std::fs::rename(&f, p("elsewhere").join(format!("data-{k}"))).unwrap();
        std::os::unix::fs::symlink(&target, &f).unwrap();
    }
    let twice: Vec<Rec> = want_a.iter().chain(&want_b).cloned().collect();
    for copy in [false, true] {
        let dest = p(if copy { "copied" } else { "linked" });
        let options = ConcatOptions {
            copy,
            ..Default::default()
        };
        let r = run(&[p("a"), p("b")], &dest, &options).unwrap();
        assert_eq!(
            (r.linked_files, r.copied_files),
            if copy { (0, 3) } else { (3, 0) }
        );
        for k in 0..3 {
            let m = std::fs::symlink_metadata(dest.join(format::data_file(k))).unwrap();
            assert!(m.file_type().is_file(), "data file {k} of {dest:?}");
        }
    }
    // The links and their targets' names gone, both results still hold every record.
    std::fs::remove_dir_all(p("a")).unwrap();
    std::fs::remove_dir_all(p("elsewhere")).unwrap();
    assert_eq!(read_all(&p("linked")), twice);
    assert_eq!(read_all(&p("copied")), twice);
}

fn refused(sources: &[PathBuf], dest: &Path, options: &ConcatOptions<'_>) -> String {
    let parent = dest.parent().unwrap();
    let before = entries(parent);
    let e = run(sources, dest, options).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert_eq!(entries(parent), before, "{e}");
    e.to_string()
}

#[test]
fn a_schema_mismatch_names_the_source_and_the_field() {
    let root = tempfile::tempdir().unwrap();
    let p = |n: &str| root.path().join(n);
    dense(&p("base"), Codec::Raw, 1, &[2, 3], 2, 0);
    dense(&p("shape"), Codec::Raw, 1, &[3, 2], 2, 0);
    dense(&p("ndim"), Codec::Raw, 1, &[6], 2, 0);
    dense(&p("codec"), Codec::Zstd, 1, &[2, 3], 2, 0);
    ragged(&p("kind"), Codec::Raw, 1, &[1], 0);
    let schema = Schema::dense(DType::I8, &[2, 3], Codec::Raw, 1).unwrap();
    Writer::create(&p("dtype"), schema, None)
        .unwrap()
        .finish()
        .unwrap();
    let dest = p("out");
    let cases = [
        ("kind", "kind Ragged, but"),
        ("dtype", "dtype int8, but"),
        ("shape", "item_shape [3, 2], but"),
        ("ndim", "item_shape [6], but"),
        ("codec", "codec zstd, but"),
    ];
    let base = format!("{}", p("base").display());
    for (name, says) in cases {
        let msg = refused(&[p("base"), p(name)], &dest, &ConcatOptions::default());
        let who = format!("{}: ", p(name).display());
        assert!(msg.starts_with(&who) && msg.contains(says), "{msg}");
        assert!(msg.contains(&format!("but {base} has")), "{msg}");
    }

    // Two dictionaries: same codec, different bytes.
    ragged(&p("dict-a"), Codec::ZstdDict, 1, &[5], 0);
    let other: Vec<u8> = dict().iter().map(|b| b ^ 1).collect();
    let schema = Schema::ragged(DType::U16, 1, Codec::ZstdDict, 1).unwrap();
    let w = Writer::create(&p("dict-b"), schema, Some(&other)).unwrap();
    w.finish().unwrap();
    let msg = refused(
        &[p("dict-a"), p("dict-b")],
        &dest,
        &ConcatOptions::default(),
    );
    assert!(msg.contains("dictionary differs"), "{msg}");
    ragged(&p("r2"), Codec::Raw, 1, &[1], 0);
    let schema = Schema::ragged(DType::U16, 2, Codec::Raw, 1).unwrap();
    Writer::create(&p("r-ndim"), schema, None)
        .unwrap()
        .finish()
        .unwrap();
    let msg = refused(&[p("r2"), p("r-ndim")], &dest, &ConcatOptions::default());
    assert!(msg.contains("ndim 2, but"), "{msg}");
}

#[test]
fn attributes_must_agree_unless_given() {
    let root = tempfile::tempdir().unwrap();
    let p = |n: &str| root.path().join(n);
    let part = |name: &str, attrs: Option<&[u8]>| {
        let schema = Schema::dense(DType::U8, &[1], Codec::Raw, 1).unwrap();
        let mut w = Writer::create(&p(name), schema, None).unwrap();
        if let Some(a) = attrs {
            w.set_attrs(a).unwrap();
        }
        w.append_dense(1, &[7], Source::Memory, &Sequential)
            .unwrap();
        w.finish().unwrap();
    };
    part("a", Some(br#"{"v":1}"#));
    part("b", Some(br#"{"v":1}"#));
    part("c", Some(br#"{"v":2}"#));
    part("none", None);
    let d = |n: &str| root.path().join(n);
    run(&[p("a"), p("b")], &d("ab"), &ConcatOptions::default()).unwrap();
    assert_eq!(
        Store::open(&d("ab")).unwrap().attrs(),
        Some(&br#"{"v":1}"#[..])
    );
    for other in ["c", "none"] {
        let msg = refused(&[p("a"), p(other)], &d("x"), &ConcatOptions::default());
        assert!(msg.contains("attributes differ"), "{msg}");
    }
    let given = ConcatOptions {
        attrs: Some(br#"{"v":3}"#),
        ..Default::default()
    };
    run(&[p("a"), p("c"), p("none")], &d("given"), &given).unwrap();
    assert_eq!(
        Store::open(&d("given")).unwrap().attrs(),
        Some(&br#"{"v":3}"#[..])
    );
    run(
        &[p("none"), p("none")],
        &d("empty"),
        &ConcatOptions::default(),
    )
    .unwrap();
    assert_eq!(Store::open(&d("empty")).unwrap().attrs(), None);
    let cleared = ConcatOptions {
        attrs: Some(b""),
        ..Default::default()
    };
    run(&[p("a"), p("c")], &d("cleared"), &cleared).unwrap();
    assert_eq!(Store::open(&d("cleared")).unwrap().attrs(), None);
    assert!(!d("cleared").join(format::ATTRS_FILE).exists());
    let big = vec![b' '; MAX_ATTRS_BYTES as usize + 1];
    let too_big = ConcatOptions {
        attrs: Some(&big),
        ..Default::default()
    };
    refused(&[p("a")], &d("big"), &too_big);
}

#[test]
fn limits_and_arguments_are_refused_before_anything_is_made() {
    let root = tempfile::tempdir().unwrap();
    let p = |n: &str| root.path().join(n);
    dense(&p("wide"), Codec::Raw, 200, &[1], 3, 0);
    dense(&p("one"), Codec::Raw, 55, &[1], 3, 0);
    // 255 files is the most that format version 2 counts: the result stays in it.
    let r = run(
        &[p("wide"), p("one")],
        &p("full"),
        &ConcatOptions::default(),
    )
    .unwrap();
    assert_eq!(r.data_files, 255);
    let full = Store::open(&p("full")).unwrap();
    assert_eq!((full.len(), full.header().version), (6, 2));
    // One more and the result is in version 3, its records in order.
    dense(&p("last"), Codec::Raw, 1, &[1], 1, 7);
    let r = run(
        &[p("wide"), p("one"), p("last")],
        &p("wider"),
        &ConcatOptions::default(),
    )
    .unwrap();
    assert_eq!(r.data_files, 256);
    let wider = Store::open(&p("wider")).unwrap();
    assert_eq!((wider.len(), wider.header().version), (7, 3));
    assert_eq!(wider.schema().data_shards, 256);
    assert_eq!(wider.entry_and_shape(6).unwrap().0.file, 255);
    let mut out = vec![0u8; 7];
    wider
        .gather_dense(&(0..7).collect::<Vec<_>>(), &mut out, &Sequential)
        .unwrap();
    assert_eq!(out, [0, 13, 26, 0, 13, 26, 7]);
    wider.verify(&Sequential).unwrap();
    // Past MAX_DATA_FILES is refused from the headers alone, before anything is made.
    let many = vec![p("wide"); (MAX_DATA_FILES as usize).div_ceil(200) + 1];
    let msg = refused(&many, &p("out"), &ConcatOptions::default());
    assert!(
        msg.contains(&format!("{} data files", many.len() * 200))
            && msg.contains(&format!("at most {MAX_DATA_FILES}")),
        "{msg}"
    );
    let msg = refused(&[], &p("out"), &ConcatOptions::default());
    assert!(msg.contains("at least one source"), "{msg}");
    assert!(matches!(
        run(&[p("one")], &p("full"), &ConcatOptions::default()),
        Err(Error::Exists(_))
    ));
    assert!(matches!(
        run(
            &[p("one"), p("missing")],
            &p("out"),
            &ConcatOptions::default()
        ),
        Err(Error::NotFound(_))
    ));
}

#[test]
fn a_failure_part_way_publishes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let p = |n: &str| root.path().join(n);
    dense(&p("a"), Codec::Zstd, 2, &[16], 40, 1);
    dense(&p("b"), Codec::Zstd, 2, &[16], 40, 2);
    let before = entries(root.path());
    // A progress callback that fails after the first source.
    let mut calls = 0;
    let mut stop = |done: u64, _total: u64| {
        calls += 1;
        if done >= 40 {
            Err(Error::InvalidArgument("stopped".into()))
        } else {
            Ok(())
        }
    };
    let e = concat(
        &[p("a"), p("b")],
        &p("out"),
        &ConcatOptions::default(),
        &Sequential,
        &mut stop,
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "stopped");
    assert_eq!(calls, 2);
    assert_eq!(entries(root.path()), before);

    // A source's data file removed after the sources were opened.
    let mut removed = false;
    let mut remove = |_: u64, _: u64| {
        if !removed {
            std::fs::remove_file(p("b").join(format::data_file(1))).unwrap();
            removed = true;
        }
        Ok(())
    };
    let e = concat(
        &[p("a"), p("b")],
        &p("out"),
        &ConcatOptions::default(),
        &Sequential,
        &mut remove,
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::Io { path, .. } if path.ends_with("b/data-001.bin")),
        "{e}"
    );
    assert_eq!(entries(root.path()), before);
}

/// Runs a concatenation of `a` then `b` in which `change` alters `b` after
/// every source was opened (at the first progress report), and returns its
/// error, having checked that the parent directory is as before.
fn changed_part_way(copy: bool, change: impl Fn(&Path)) -> Error {
    let root = tempfile::tempdir().unwrap();
    let p = |n: &str| root.path().join(n);
    dense(&p("a"), Codec::Raw, 1, &[16], 10, 1);
    dense(&p("b"), Codec::Raw, 1, &[16], 10, 2);
    let before = entries(root.path());
    let mut changed = false;
    let mut hook = |_: u64, _: u64| {
        if !changed {
            change(&p("b").join(format::data_file(0)));
            changed = true;
        }
        Ok(())
    };
    let options = ConcatOptions {
        copy,
        ..Default::default()
    };
    let e = concat(
        &[p("a"), p("b")],
        &p("out"),
        &options,
        &Sequential,
        &mut hook,
    )
    .unwrap_err();
    assert_eq!(entries(root.path()), before, "{e}");
    e
}

#[test]
fn a_data_file_replaced_or_truncated_part_way_is_refused() {
    // Replaced by another file of the same bytes: the link would take a file
    // that was never checked.
    let e = changed_part_way(false, |f| {
        let bytes = std::fs::read(f).unwrap();
        std::fs::remove_file(f).unwrap();
        std::fs::write(f, bytes).unwrap();
    });
    assert!(
        matches!(&e, Error::Corrupt { msg, .. } if msg.contains("was replaced")),
        "{e}"
    );
    // Truncated in place: linked, the size no longer matches the header.
    let truncate = |f: &Path| {
        let file = OpenOptions::new().write(true).open(f).unwrap();
        file.set_len(16 * 4).unwrap();
    };
    let e = changed_part_way(false, truncate);
    assert!(
        matches!(&e, Error::Corrupt { msg, .. } if msg.contains("is 64 bytes")),
        "{e}"
    );
    // Copied: the copy ends early.
    let e = changed_part_way(true, truncate);
    assert!(
        matches!(&e, Error::Corrupt { msg, .. } if msg.contains("ended after 64")),
        "{e}"
    );
}

#[test]
fn damaged_payload_is_caught_only_when_records_are_verified() {
    let root = tempfile::tempdir().unwrap();
    let p = |n: &str| root.path().join(n);
    dense(&p("a"), Codec::Raw, 1, &[16], 4, 1);
    let f = p("a").join(format::data_file(0));
    let mut bytes = std::fs::read(&f).unwrap();
    bytes[20] ^= 1;
    std::fs::write(&f, &bytes).unwrap();
    let verified = ConcatOptions {
        verify_records: true,
        ..Default::default()
    };
    let e = run(&[p("a")], &p("v"), &verified).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Corrupt {
                record: Some(1),
                ..
            }
        ),
        "{e}"
    );
    assert!(!p("v").exists());
    run(&[p("a")], &p("unverified"), &ConcatOptions::default()).unwrap();
    let e = Store::open(&p("unverified"))
        .unwrap()
        .verify(&Sequential)
        .unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Corrupt {
                record: Some(1),
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn progress_counts_records_up_to_the_total_over_a_large_index() {
    let root = tempfile::tempdir().unwrap();
    let p = |n: &str| root.path().join(n);
    // 60,000 entries of 24 bytes: an index over 1 MiB, which opening checks
    // block by block and the rewrite reports more than once.
    let mut want = dense(&p("a"), Codec::Raw, 2, &[1], 60_000, 1);
    want.extend(dense(&p("b"), Codec::Raw, 1, &[1], 5, 2));
    let mut seen = Vec::new();
    let mut note = |done: u64, total: u64| {
        seen.push((done, total));
        Ok(())
    };
    concat(
        &[p("a"), p("b")],
        &p("out"),
        &ConcatOptions::default(),
        &Sequential,
        &mut note,
    )
    .unwrap();
    assert!(seen.len() >= 4, "{seen:?}");
    assert_eq!(seen.first(), Some(&(0, 60_005)));
    assert_eq!(seen.last(), Some(&(60_005, 60_005)));
    assert!(seen
        .windows(2)
        .all(|w| w[0].0 <= w[1].0 && w[1].1 == 60_005));
    assert_eq!(read_all(&p("out")), want);
}

#[test]
fn a_damaged_index_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let p = |n: &str| root.path().join(n);
    dense(&p("a"), Codec::Raw, 1, &[16], 4, 1);
    let f = p("a").join(format::INDEX_FILE);
    let mut bytes = std::fs::read(&f).unwrap();
    bytes[30] ^= 1;
    std::fs::write(&f, &bytes).unwrap();
    let e = run(&[p("a")], &p("out"), &ConcatOptions::default()).unwrap_err();
    assert!(matches!(&e, Error::Corrupt { .. }), "{e}");
    assert!(!p("out").exists());
}
