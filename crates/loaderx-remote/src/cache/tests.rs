use super::*;

fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

#[test]
fn blocks_round_trip_and_a_wrong_length_is_a_miss() {
    let d = tempfile::tempdir().unwrap();
    let c = Cache::open(d.path(), 1 << 20, 16).unwrap();
    c.put(7, "data-000.bin", 3, b"0123456789abcdef");
    assert_eq!(
        c.read(7, "data-000.bin", 3, 16, &[0..16, 5..9, 2..2]),
        Some(vec![
            Bytes::from_static(b"0123456789abcdef"),
            Bytes::from_static(b"5678"),
            Bytes::new()
        ])
    );
    assert!(
        c.read(7, "data-000.bin", 3, 16, &[0..1, 9..17]).is_none(),
        "past the block"
    );
    assert!(
        c.read(8, "data-000.bin", 3, 16, &[0..16]).is_none(),
        "another store"
    );
    assert!(
        c.read(7, "data-000.bin", 3, 15, &[0..15]).is_none(),
        "another length"
    );
    assert!(
        c.read(7, "data-000.bin", 3, 16, &[0..16]).is_none(),
        "the bad block is gone"
    );
}

#[test]
fn past_the_memory_limit_large_parts_are_read_alone_and_merged_when_close() {
    let d = tempfile::tempdir().unwrap();
    let mut c = Cache::open(d.path(), 1 << 30, 1 << 20).unwrap();
    c.memory = Pool::new(0).member();
    let block: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    c.put(1, "data-002.bin", 0, &block);
    let ranges = [0..40_000, 41_000..100_000, 600_000..700_000];
    let got = c.read(1, "data-002.bin", 0, 1 << 20, &ranges).unwrap();
    for (g, r) in got.iter().zip(&ranges) {
        assert_eq!(&g[..], &block[r.start as usize..r.end as usize]);
    }
    // A small part at an end of the block may be the piece of a large
    // record that crosses into the next block: it is read alone too.
    let tail = [(1 << 20) - 100..1 << 20];
    let got = c.read(1, "data-002.bin", 0, 1 << 20, &tail).unwrap();
    assert_eq!(&got[0][..], &block[(1 << 20) - 100..]);
    assert!(c.memory.lock().is_empty(), "large parts are not kept");
    // Small parts would take another block's place; with none to give up,
    // their block is read and not kept.
    let got = c.read(1, "data-002.bin", 0, 1 << 20, &[500..600]).unwrap();
    assert_eq!(&got[0][..], &block[500..600]);
    assert!(c.memory.lock().is_empty());
    // Truncated by another process: a miss, never a fault, and the damaged
    // file goes.
    let path = c.block_path(1, "data-002.bin", 0);
    fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(1000)
        .unwrap();
    assert!(c.read(1, "data-002.bin", 0, 1 << 20, &ranges).is_none());
    assert!(!path.exists());
}

#[test]
fn with_memory_to_spare_a_block_read_for_a_large_part_is_kept() {
    let d = tempfile::tempdir().unwrap();
    let c = Cache::open(d.path(), 1 << 30, 1 << 16).unwrap();
    let block: Vec<u8> = (0..1u32 << 16).map(|i| (i % 241) as u8).collect();
    c.put(2, "data-000.bin", 0, &block);
    let got = c.read(2, "data-000.bin", 0, 1 << 16, &[0..50_000]).unwrap();
    assert_eq!(&got[0][..], &block[..50_000]);
    fs::remove_file(c.block_path(2, "data-000.bin", 0)).unwrap();
    let got = c
        .read(2, "data-000.bin", 0, 1 << 16, &[60_000..1 << 16])
        .unwrap();
    assert_eq!(&got[0][..], &block[60_000..]);
}

#[test]
fn small_parts_keep_their_block_in_memory() {
    let d = tempfile::tempdir().unwrap();
    let c = Cache::open(d.path(), 1 << 30, 4096).unwrap();
    let block: Vec<u8> = (0..4096u32).map(|i| (i % 253) as u8).collect();
    c.put(1, "data-000.bin", 5, &block);
    assert_eq!(
        c.read(1, "data-000.bin", 5, 4096, &[10..20]).unwrap(),
        [Bytes::copy_from_slice(&block[10..20])]
    );
    // The copy in memory is this process's: another process truncating or
    // rewriting the file changes nothing it reads.
    let path = c.block_path(1, "data-000.bin", 5);
    fs::write(&path, b"short").unwrap();
    assert_eq!(
        c.read(1, "data-000.bin", 5, 4096, &[100..300, 4000..4096])
            .unwrap(),
        [
            Bytes::copy_from_slice(&block[100..300]),
            Bytes::copy_from_slice(&block[4000..4096])
        ]
    );
    c.remove(1, "data-000.bin", 5);
    assert!(c.read(1, "data-000.bin", 5, 4096, &[10..20]).is_none());
    assert!(c.memory.lock().is_empty());
}

#[test]
fn eviction_keeps_the_directory_under_its_limit_oldest_first() {
    let d = tempfile::tempdir().unwrap();
    let c = Cache::open(d.path(), 100, 10).unwrap();
    for b in 0..10u64 {
        c.put(1, "data-000.bin", b, &[b as u8; 10]);
        let old = SystemTime::now() - Duration::from_secs(1000 - b);
        let f = fs::File::options()
            .write(true)
            .open(c.block_path(1, "data-000.bin", b))
            .unwrap();
        f.set_modified(old).unwrap();
    }
    c.put(1, "data-000.bin", 10, &[10; 10]);
    let left: Vec<u64> = (0..11)
        .filter(|&b| c.read(1, "data-000.bin", b, 10, &[0..10]).is_some())
        .collect();
    assert_eq!(left, (2..11).collect::<Vec<_>>());
}

#[test]
fn a_directory_holding_other_files_is_refused_and_left_alone() {
    let d = tempfile::tempdir().unwrap();
    fs::write(d.path().join("notes.txt"), b"mine").unwrap();
    let e = Cache::open(d.path(), 0, 16).unwrap_err().to_string();
    assert!(
        e.contains("not a loaderx cache: it holds \"notes.txt\" and no .loaderx-cache file"),
        "{e}"
    );
    assert_eq!(fs::read(d.path().join("notes.txt")).unwrap(), b"mine");
    assert!(!d.path().join(MARKER).exists());
    // A marker that is not a regular file does not make a cache either.
    let d = tempfile::tempdir().unwrap();
    mkfifo(&d.path().join(MARKER));
    let e = Cache::open(d.path(), 0, 16).unwrap_err().to_string();
    assert!(e.contains("it holds \".loaderx-cache\""), "{e}");
}

#[test]
fn a_new_empty_or_older_cache_is_marked() {
    let d = tempfile::tempdir().unwrap();
    Cache::open(&d.path().join("a/b"), 0, 16).unwrap();
    assert_eq!(
        fs::read(d.path().join("a/b").join(MARKER)).unwrap(),
        MARKER_TEXT
    );
    Cache::open(d.path(), 1 << 20, 16).unwrap_err();
    let old = d.path().join("a/b");
    fs::remove_file(old.join(MARKER)).unwrap();
    fs::create_dir_all(old.join("00000000000000ab/16/data-000.bin")).unwrap();
    fs::write(old.join("00000000000000ab/16/data-000.bin/0"), [1; 16]).unwrap();
    let c = Cache::open(&old, 1 << 20, 16).unwrap();
    assert!(old.join(MARKER).is_file());
    assert_eq!(
        c.read(0xab, "data-000.bin", 0, 16, &[0..2]).unwrap(),
        [Bytes::from_static(&[1, 1])]
    );
}

#[test]
fn a_cache_path_that_is_not_a_directory_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("f");
    fs::write(&f, b"mine").unwrap();
    let fifo = d.path().join("fifo");
    mkfifo(&fifo);
    for p in [&f, &fifo] {
        let e = Cache::open(p, 0, 16).unwrap_err().to_string();
        assert!(
            e.ends_with("the cache path exists and is not a directory"),
            "{e}"
        );
    }
    assert_eq!(fs::read(&f).unwrap(), b"mine");
}

#[test]
fn eviction_removes_only_the_caches_own_names() {
    let d = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("model.bin");
    fs::write(&target, [9; 500]).unwrap();
    let c = Cache::open(d.path(), 1 << 20, 10).unwrap();
    for b in 0..5 {
        c.put(1, "data-000.bin", b, &[b as u8; 10]);
    }
    c.put_small(1, zrecord::INDEX_FILE, &[3; 10]);
    let files = c
        .block_path(1, "data-000.bin", 0)
        .parent()
        .unwrap()
        .to_path_buf();
    let store = files.parent().unwrap().to_path_buf();
    let foreign = [
        d.path().join("big.bin"),
        d.path().join("hub/x/0"),
        store.parent().unwrap().join("README"),
        store.join("other/1"),
        files.join("7x"),
        files.join(".tmp-x"),
    ];
    for p in &foreign {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, [0; 300]).unwrap();
        let old = fs::File::options().write(true).open(p).unwrap();
        old.set_modified(SystemTime::UNIX_EPOCH).unwrap();
    }
    std::os::unix::fs::symlink(&target, files.join("99")).unwrap();
    std::os::unix::fs::symlink(outside.path(), store.join("data-009.bin")).unwrap();
    mkfifo(&files.join("98"));
    let small = Cache::open(d.path(), 0, 10).unwrap();
    assert_eq!(small.held.load(Ordering::Relaxed), 0);
    for p in &foreign {
        assert_eq!(fs::read(p).unwrap(), [0; 300], "{}", p.display());
    }
    assert_eq!(fs::read(files.join("99")).unwrap(), [9; 500]);
    assert!(store.join("data-009.bin").is_symlink());
    assert!(files.join("98").exists());
    assert_eq!(fs::read(&target).unwrap(), [9; 500]);
    assert!((0..5).all(|b| !c.block_path(1, "data-000.bin", b).exists()));
    assert!(!store.join(zrecord::INDEX_FILE).join("whole").exists());
    // Nothing is written through a link in the layout either.
    small.put(1, "data-009.bin", 0, &[1; 10]);
    assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 1);
}

#[test]
fn anything_but_a_regular_file_at_a_cache_name_is_a_miss_without_blocking() {
    let d = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let c = Cache::open(d.path(), 1 << 20, 10).unwrap();
    let target = outside.path().join("t");
    fs::write(&target, [5; 10]).unwrap();
    for b in 0..3 {
        c.put(1, "data-000.bin", b, &[b as u8; 10]);
        fs::remove_file(c.block_path(1, "data-000.bin", b)).unwrap();
    }
    mkfifo(&c.block_path(1, "data-000.bin", 0));
    fs::create_dir(c.block_path(1, "data-000.bin", 1)).unwrap();
    std::os::unix::fs::symlink(&target, c.block_path(1, "data-000.bin", 2)).unwrap();
    for b in 0..3 {
        assert!(c.read(1, "data-000.bin", b, 10, &[0..10]).is_none(), "{b}");
    }
    c.put_small(1, zrecord::INDEX_FILE, &[3; 10]);
    let whole = c.store_dir(1).join(zrecord::INDEX_FILE).join("whole");
    fs::remove_file(&whole).unwrap();
    mkfifo(&whole);
    assert!(c.get_small(1, zrecord::INDEX_FILE, 10).is_none());
    // Writing the block again replaces a FIFO or a link (not its target);
    // a directory stays and the block is not kept.
    for b in 0..3 {
        c.put(1, "data-000.bin", b, &[7; 10]);
    }
    assert_eq!(fs::read(&target).unwrap(), [5; 10]);
    assert!(c.read(1, "data-000.bin", 0, 10, &[0..10]).is_some());
    assert!(c.read(1, "data-000.bin", 1, 10, &[0..10]).is_none());
    assert!(c.block_path(1, "data-000.bin", 1).is_dir());
    assert_eq!(
        c.read(1, "data-000.bin", 2, 10, &[0..3]).unwrap(),
        [Bytes::from_static(&[7; 3])]
    );
}

#[test]
fn kept_blocks_are_those_read_whole_and_fresh_at_their_length() {
    let d = tempfile::tempdir().unwrap();
    let c = Cache::open(d.path(), 1 << 20, 16).unwrap();
    c.put(7, "data-000.bin", 3, b"0123456789abcdef");
    c.put(7, "data-001.bin", 0, b"fedcba9876543210");
    assert!(
        c.kept_blocks(7).block("data-000.bin", 3, 16).is_none(),
        "written, not yet read"
    );
    c.read(7, "data-000.bin", 3, 16, &[0..1]).unwrap();
    c.read(7, "data-001.bin", 0, 16, &[0..1]).unwrap();
    let mut kept = c.kept_blocks(7);
    let (bytes, due) = kept.block("data-000.bin", 3, 16).unwrap();
    assert_eq!(bytes, Bytes::from_static(b"0123456789abcdef"));
    assert!(
        due > Instant::now() + TOUCH_AFTER - Duration::from_secs(5),
        "due once it ages"
    );
    assert!(due <= Instant::now() + TOUCH_AFTER);
    assert_eq!(
        kept.block("data-001.bin", 0, 16).map(|(b, _)| b),
        Some(Bytes::from_static(b"fedcba9876543210"))
    );
    assert!(
        kept.block("data-000.bin", 3, 15).is_none(),
        "another length"
    );
    assert!(kept.block("data-000.bin", 4, 16).is_none(), "another block");
    assert!(kept.block("data-002.bin", 0, 16).is_none(), "another file");
    drop(kept);
    assert!(c.kept_blocks(8).block("data-000.bin", 3, 16).is_none());
    // A block whose file's time is due for a refresh goes through `read`.
    {
        let mut map = c.memory.lock();
        for k in map.values_mut() {
            k.touched = Instant::now() - TOUCH_AFTER - Duration::from_secs(1);
        }
    }
    assert!(c.kept_blocks(7).block("data-000.bin", 3, 16).is_none());
    c.read(7, "data-000.bin", 3, 16, &[0..1]).unwrap();
    assert!(c.kept_blocks(7).block("data-000.bin", 3, 16).is_some());
}

#[test]
fn blocks_memory_lets_go_of_are_counted_whether_evicted_or_removed() {
    let d = tempfile::tempdir().unwrap();
    let mut c = Cache::open(d.path(), 1 << 20, 16).unwrap();
    c.memory = Pool::new(32).member();
    for b in 0..4 {
        c.put(7, "data-000.bin", b, &[b as u8; 16]);
    }
    c.read(7, "data-000.bin", 0, 16, &[1..2]).unwrap();
    c.read(7, "data-000.bin", 1, 16, &[1..2]).unwrap();
    assert_eq!(c.released(), 0, "kept, nothing let go of");
    c.remove(7, "data-000.bin", 0);
    assert_eq!(c.released(), 1);
    c.remove(7, "data-000.bin", 0);
    assert_eq!(c.released(), 1, "nothing kept was removed");
    c.read(7, "data-000.bin", 2, 16, &[1..2]).unwrap();
    assert_eq!(c.released(), 1, "there was room");
    // With no room left, keeping block 3 gives up block 1 or 2.
    c.read(7, "data-000.bin", 3, 16, &[1..2]).unwrap();
    assert_eq!(c.released(), 2);
    assert_eq!(c.memory.lock().len(), 2);
    assert!(c.kept_blocks(7).block("data-000.bin", 3, 16).is_some());
}

/// Two caches in two directories drawing on one pool of `limit` bytes, as the
/// caches of two stores opened by one process draw on the process's.
fn two_caches(limit: u64) -> (tempfile::TempDir, Cache, Cache) {
    let d = tempfile::tempdir().unwrap();
    let pool = Pool::new(limit);
    let open = |name: &str| {
        let mut c = Cache::open(&d.path().join(name), 1 << 20, 16).unwrap();
        c.memory = pool.member();
        for b in 0..4 {
            c.put(7, "data-000.bin", b, &[b as u8; 16]);
        }
        c
    };
    let (a, b) = (open("a"), open("b"));
    (d, a, b)
}

fn kept_count(c: &Cache) -> usize {
    c.memory.lock().len()
}

#[test]
fn a_cache_makes_room_from_the_cache_keeping_the_most() {
    let (_d, a, b) = two_caches(32);
    // Cache a fills the pool with two blocks.
    for block in 0..2 {
        a.read(7, "data-000.bin", block, 16, &[1..2]).unwrap();
    }
    assert_eq!((kept_count(&a), kept_count(&b)), (2, 0));
    // Small parts of b's blocks keep them, in place of a's: before, a cache
    // made room only among its own blocks, and b, keeping none, kept nothing.
    b.read(7, "data-000.bin", 0, 16, &[1..2]).unwrap();
    assert_eq!((kept_count(&a), kept_count(&b)), (1, 1));
    assert_eq!((a.released(), b.released()), (1, 0));
    assert!(b.kept_blocks(7).block("data-000.bin", 0, 16).is_some());
    // With one block each, b's next block takes the room of one of them.
    b.read(7, "data-000.bin", 1, 16, &[1..2]).unwrap();
    assert_eq!(kept_count(&a) + kept_count(&b), 2);
    assert!(b.kept_blocks(7).block("data-000.bin", 1, 16).is_some());
    assert_eq!(a.released() + b.released(), 2);
}

#[test]
fn a_dropped_cache_gives_its_memory_back_to_the_pool() {
    let (_d, a, b) = two_caches(32);
    for block in 0..2 {
        a.read(7, "data-000.bin", block, 16, &[0..16]).unwrap();
    }
    assert_eq!(kept_count(&a), 2);
    // Parts as large as the block are read alone when the pool is full...
    b.read(7, "data-000.bin", 0, 16, &[0..16]).unwrap();
    assert_eq!(kept_count(&b), 0);
    drop(a);
    // ...and their block is kept once there is room again.
    b.read(7, "data-000.bin", 0, 16, &[0..16]).unwrap();
    b.read(7, "data-000.bin", 1, 16, &[0..16]).unwrap();
    assert_eq!(kept_count(&b), 2);
}

#[test]
fn a_cache_idle_for_a_while_gives_its_memory_up_first() {
    let (_d, a, b) = two_caches(48);
    a.read(7, "data-000.bin", 0, 16, &[1..2]).unwrap();
    b.read(7, "data-000.bin", 0, 16, &[1..2]).unwrap();
    b.read(7, "data-000.bin", 1, 16, &[1..2]).unwrap();
    assert_eq!((kept_count(&a), kept_count(&b)), (1, 2));
    // Both in use: room comes from the one keeping the most, b itself.
    b.read(7, "data-000.bin", 2, 16, &[1..2]).unwrap();
    assert_eq!((kept_count(&a), kept_count(&b)), (1, 2));
    assert_eq!((a.released(), b.released()), (0, 1));
    // a not read for longer than IDLE: its block goes first.
    a.memory.read(Instant::now() - Duration::from_secs(2));
    b.read(7, "data-000.bin", 3, 16, &[1..2]).unwrap();
    assert_eq!((kept_count(&a), kept_count(&b)), (0, 3));
    assert_eq!((a.released(), b.released()), (1, 1));
}
