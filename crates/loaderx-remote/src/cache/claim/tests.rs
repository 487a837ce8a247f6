use super::*;

fn claim_file(c: &Cache, block: u64) -> PathBuf {
    c.claim_path(1, "data-000.bin", block)
}

fn plant(c: &Cache, block: u64, text: &str, age: Duration) {
    let p = claim_file(c, block);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, text).unwrap();
    let f = fs::File::options().write(true).open(&p).unwrap();
    f.set_modified(SystemTime::now() - age).unwrap();
}

/// A runtime on the calling thread, with timers, for the waits under test.
fn timer_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// The id of a process that has exited.
fn gone_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn one_claim_per_block_until_its_holder_lets_go() {
    let d = tempfile::tempdir().unwrap();
    let c = Cache::open(d.path(), 1 << 20, 16).unwrap();
    let Claimed::Mine(first) = c.claim_fetch(1, "data-000.bin", 4) else {
        panic!("the first claim is the caller's");
    };
    assert_eq!(
        fs::read_to_string(claim_file(&c, 4)).unwrap(),
        format!("{}@{}", std::process::id(), host_name())
    );
    assert!(matches!(
        c.claim_fetch(1, "data-000.bin", 4),
        Claimed::Theirs
    ));
    assert!(
        matches!(c.claim_fetch(1, "data-000.bin", 5), Claimed::Mine(_)),
        "another block"
    );
    assert!(
        matches!(c.claim_fetch(2, "data-000.bin", 4), Claimed::Mine(_)),
        "another store"
    );
    drop(first);
    assert!(!claim_file(&c, 4).exists());
    assert!(matches!(
        c.claim_fetch(1, "data-000.bin", 4),
        Claimed::Mine(_)
    ));
}

#[test]
fn a_claim_of_a_gone_process_or_too_old_is_taken_over() {
    let d = tempfile::tempdir().unwrap();
    let c = Cache::open(d.path(), 1 << 20, 16).unwrap();
    let host = host_name();
    plant(&c, 0, &format!("{}@{host}", gone_pid()), Duration::ZERO);
    plant(
        &c,
        1,
        &format!("{}@{host}", std::process::id()),
        CLAIM_STALE * 2,
    );
    plant(&c, 2, "1@another-host", CLAIM_STALE * 2);
    plant(&c, 3, "", Duration::from_secs(5));
    plant(&c, 4, "not a claim", Duration::ZERO);
    for b in 0..5 {
        assert!(
            matches!(c.claim_fetch(1, "data-000.bin", b), Claimed::Mine(_)),
            "block {b}"
        );
    }
    // Alive, or unknown and young: waited for.
    plant(&c, 5, "1@another-host", Duration::ZERO);
    plant(
        &c,
        6,
        &format!("{}@{host}", std::process::id()),
        Duration::ZERO,
    );
    plant(&c, 7, "", Duration::ZERO);
    for b in 5..8 {
        assert!(
            matches!(c.claim_fetch(1, "data-000.bin", b), Claimed::Theirs),
            "block {b}"
        );
    }
}

#[test]
fn a_claim_taken_over_is_not_removed_by_its_first_holder() {
    let d = tempfile::tempdir().unwrap();
    let c = Cache::open(d.path(), 1 << 20, 16).unwrap();
    let Claimed::Mine(old) = c.claim_fetch(1, "data-000.bin", 0) else {
        panic!("the first claim is the caller's");
    };
    fs::remove_file(claim_file(&c, 0)).unwrap();
    plant(&c, 0, "1@another-host", Duration::ZERO);
    drop(old);
    assert_eq!(
        fs::read_to_string(claim_file(&c, 0)).unwrap(),
        "1@another-host"
    );
}

#[test]
fn no_claim_through_a_link_or_over_something_else() {
    let d = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let c = Cache::open(d.path(), 1 << 20, 16).unwrap();
    let dir = claim_file(&c, 0).parent().unwrap().to_path_buf();
    fs::create_dir_all(&dir).unwrap();
    fs::create_dir(claim_file(&c, 0)).unwrap();
    assert!(matches!(
        c.claim_fetch(1, "data-000.bin", 0),
        Claimed::Unclaimed
    ));
    assert!(claim_file(&c, 0).is_dir(), "left alone");
    let link = dir.parent().unwrap().join("data-001.bin");
    std::os::unix::fs::symlink(outside.path(), link).unwrap();
    assert!(matches!(
        c.claim_fetch(1, "data-001.bin", 0),
        Claimed::Unclaimed
    ));
    assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
}

#[test]
fn a_waiter_returns_when_the_block_lands_or_the_claim_goes() {
    let rt = timer_runtime();
    let d = tempfile::tempdir().unwrap();
    let c = std::sync::Arc::new(Cache::open(d.path(), 1 << 20, 16).unwrap());
    plant(&c, 0, "1@another-host", Duration::ZERO);
    plant(&c, 1, "1@another-host", Duration::ZERO);
    let writer = {
        let c = c.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            c.put(1, "data-000.bin", 0, &[7; 16]);
            std::thread::sleep(Duration::from_millis(100));
            fs::remove_file(claim_file(&c, 1)).unwrap();
        })
    };
    let started = Instant::now();
    rt.block_on(c.wait_for_claimed(
        1,
        &[
            ("data-000.bin".to_string(), 0, 16),
            ("data-000.bin".to_string(), 1, 16),
        ],
        Instant::now() + CLAIM_STALE,
    ));
    let waited = started.elapsed();
    writer.join().unwrap();
    assert!(waited >= Duration::from_millis(200), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert!(
        claim_file(&c, 0).exists(),
        "the other's claim is not the waiter's to remove"
    );
}

#[test]
fn eviction_removes_claims_left_by_killed_writers_only_when_old() {
    let d = tempfile::tempdir().unwrap();
    let c = Cache::open(d.path(), 1 << 20, 16).unwrap();
    plant(&c, 0, "1@another-host", Duration::from_secs(7200));
    plant(&c, 1, "1@another-host", Duration::ZERO);
    let junk = claim_file(&c, 0).with_file_name(".claim-x");
    fs::write(&junk, "mine").unwrap();
    let old = fs::File::options().write(true).open(&junk).unwrap();
    old.set_modified(SystemTime::UNIX_EPOCH).unwrap();
    drop(Cache::open(d.path(), 1 << 20, 16).unwrap());
    assert!(!claim_file(&c, 0).exists());
    assert!(claim_file(&c, 1).exists());
    assert_eq!(
        fs::read(&junk).unwrap(),
        b"mine",
        "not a name the cache writes"
    );
}

#[test]
fn a_waiter_gives_up_at_its_bound_while_the_claim_stands() {
    let rt = timer_runtime();
    let d = tempfile::tempdir().unwrap();
    let c = Cache::open(d.path(), 1 << 20, 16).unwrap();
    plant(&c, 0, "1@another-host", Duration::ZERO);
    let started = Instant::now();
    rt.block_on(c.wait_for_claimed(
        1,
        &[("data-000.bin".to_string(), 0, 16)],
        started + Duration::from_millis(300),
    ));
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert!(claim_file(&c, 0).exists());
}
