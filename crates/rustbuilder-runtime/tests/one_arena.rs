//! `allocator::one_arena`: the threads a process starts after it share one malloc arena. In a
//! process of its own, without the test harness: the harness starts threads first, and a thread
//! keeps the arena it was given.

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn main() {
    use std::sync::{Arc, Barrier};

    rustbuilder_runtime::allocator::one_arena();
    // Four threads, each allocating while the others live: glibc would give each an arena of its own.
    let together = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|n| {
            let together = together.clone();
            std::thread::spawn(move || {
                let allocated = vec![n; 4096];
                together.wait();
                allocated.len()
            })
        })
        .collect();
    for thread in threads {
        assert_eq!(thread.join().expect("the thread ran"), 4096);
    }
    let heaps = arenas();
    assert_eq!(
        heaps, 1,
        "malloc arenas after four threads allocated: {heaps}, not 1"
    );
    println!("one_arena: four threads allocated in 1 arena");
}

/// How many arenas glibc's `malloc_info` reports: one `<heap nr="...">` element each.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn arenas() -> usize {
    let mut buffer: *mut libc::c_char = std::ptr::null_mut();
    let mut size: libc::size_t = 0;
    // SAFETY: the stream writes into a buffer it allocates, which is read once the stream is
    // closed and then freed, as `open_memstream` documents.
    let report = unsafe {
        let stream = libc::open_memstream(&mut buffer, &mut size);
        assert!(!stream.is_null(), "open_memstream failed");
        assert_eq!(libc::malloc_info(0, stream), 0, "malloc_info failed");
        libc::fclose(stream);
        let report = std::slice::from_raw_parts(buffer.cast::<u8>(), size).to_vec();
        libc::free(buffer.cast());
        String::from_utf8(report).expect("malloc_info writes XML")
    };
    report.matches("<heap nr=").count()
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn main() {
    println!("one_arena: not glibc, nothing to check");
}
