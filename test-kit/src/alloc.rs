//! A global allocator that counts the live heap of the threads that ask to be counted, and its
//! peak. Other threads allocate uncounted, so a test binary whose tests run side by side can
//! measure one of them: the threads of the measured call (the test's own, and those of a runtime
//! started with [`count_this_thread`] as its thread-start hook), nothing else.
//!
//! ```
//! use volume_health_test_kit::alloc::{Counting, measure};
//!
//! #[global_allocator]
//! static HEAP: Counting = Counting;
//!
//! fn main() {
//!     let (buffer, peak) = measure(|| vec![0u8; 1 << 20]);
//!     assert!(peak >= buffer.len());
//! }
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicIsize, Ordering};

/// The allocator: the system's, counting the bytes of counted threads.
pub struct Counting;

thread_local! {
    // Const-initialized and without a destructor: reading it never allocates.
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

/// Live bytes allocated by counted threads (less those they freed; it can go below its start
/// when they free what other threads allocated).
static LIVE: AtomicIsize = AtomicIsize::new(0);
/// The highest `LIVE` since the last [`measure`] began.
static PEAK: AtomicIsize = AtomicIsize::new(0);
/// One measurement at a time: the counts are the process's.
static MEASURING: Mutex<()> = Mutex::new(());

fn counted() -> bool {
    COUNTED.try_with(Cell::get).unwrap_or(false)
}

fn grow(bytes: usize) {
    let live = LIVE.fetch_add(bytes as isize, Ordering::Relaxed) + bytes as isize;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

fn shrink(bytes: usize) {
    LIVE.fetch_sub(bytes as isize, Ordering::Relaxed);
}

// The one unsafe code of the workspace, in test code only: a `GlobalAlloc` must be an unsafe
// impl. It forwards every call to `System` unchanged.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as given.
        let block = unsafe { System.alloc(layout) };
        if !block.is_null() && counted() {
            grow(layout.size());
        }
        block
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as given.
        let block = unsafe { System.alloc_zeroed(layout) };
        if !block.is_null() && counted() {
            grow(layout.size());
        }
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        if counted() {
            shrink(layout.size());
        }
        // SAFETY: forwarded as given.
        unsafe { System.dealloc(block, layout) }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as given.
        let moved = unsafe { System.realloc(block, layout, new_size) };
        if !moved.is_null() && counted() {
            shrink(layout.size());
            grow(new_size);
        }
        moved
    }
}

/// Counts the heap of the calling thread from now on: the thread-start hook of a runtime whose
/// threads serve the measured call (`tokio::runtime::Builder::on_thread_start`).
pub fn count_this_thread() {
    COUNTED.with(|counted| counted.set(true));
}

/// Runs `call` on this thread, counted, and returns its result with the peak of live heap it
/// added, in bytes, over the counted threads. Measurements run one at a time.
pub fn measure<R>(call: impl FnOnce() -> R) -> (R, usize) {
    let _alone = MEASURING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let was_counted = counted();
    count_this_thread();
    let start = LIVE.load(Ordering::Relaxed);
    PEAK.store(start, Ordering::Relaxed);
    let result = call();
    let peak = PEAK.load(Ordering::Relaxed);
    COUNTED.with(|counted| counted.set(was_counted));
    (result, peak.saturating_sub(start).max(0) as usize)
}
