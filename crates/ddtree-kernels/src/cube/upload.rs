//! Small index arrays uploaded once per distinct content.
//!
//! A block's conv windows, its delta-rule walk and its tree's ancestor bits are the same for
//! every layer of a forward, and a commit's walk the same for every layer it replays: uploading
//! them per layer cost a 64-layer hybrid about 200 uploads per step, each a host round through
//! the runtime like a launch. Each distinct array is uploaded once and its buffer handed to the
//! layers after; kernels only read these buffers, or leave them as they found them (the counters
//! of [`super::fence::last_cube()`], zero between launches). The newest [`KEPT`] arrays are kept,
//! keyed by runtime, device and thread (burn gives each thread its own stream, in order).

use std::any::TypeId;
use std::cell::Cell;
use std::sync::{Mutex, PoisonError};
use std::thread::ThreadId;

use burn_cubecl::CubeRuntime;
use cubecl::device::{Device, DeviceId};
use cubecl::prelude::*;
use cubecl::server::Handle;

/// Arrays kept: a forward uses at most four (windows and the walk's three arrays, or the
/// ancestor bits), a commit three more; a few rounds' worth stay.
pub const KEPT: usize = 16;

struct Upload {
    runtime: TypeId,
    device: DeviceId,
    thread: ThreadId,
    words: Vec<u32>,
    handle: Handle,
}

static UPLOADS: Mutex<Vec<Upload>> = Mutex::new(Vec::new());

thread_local! {
    static FRESH: Cell<usize> = const { Cell::new(0) };
}

/// The uploads this thread has made so far: arrays not found among the kept ones (the
/// benchmark reports them per step beside the launches).
pub fn fresh_uploads() -> usize {
    FRESH.get()
}

/// `words` on `device` as an array argument ([`upload_handle`]).
pub fn upload_words<R: CubeRuntime>(
    client: &ComputeClient<R>,
    device: &R::Device,
    words: &[u32],
) -> ArrayArg<R> {
    let handle = upload_handle(client, device, words);
    // SAFETY: the handle holds `words.len()` u32 values.
    unsafe { ArrayArg::from_raw_parts(handle, words.len()) }
}

/// The buffer of an earlier upload of the same `words` on this runtime, device and thread if one
/// is kept, else a new upload.
pub fn upload_handle<R: CubeRuntime>(client: &ComputeClient<R>, device: &R::Device, words: &[u32]) -> Handle {
    let (runtime, device, thread) = (TypeId::of::<R>(), device.to_id(), std::thread::current().id());
    let mut uploads = UPLOADS.lock().unwrap_or_else(PoisonError::into_inner);
    let kept = uploads
        .iter()
        .position(|u| u.runtime == runtime && u.device == device && u.thread == thread && u.words == words);
    match kept {
        // Most recently used last.
        Some(at) => {
            let upload = uploads.remove(at);
            let handle = upload.handle.clone();
            uploads.push(upload);
            handle
        }
        None => {
            let handle = client.create_from_slice(<u32 as cubecl::CubeElement>::as_bytes(words));
            FRESH.set(FRESH.get() + 1);
            if uploads.len() == KEPT {
                uploads.remove(0);
            }
            uploads.push(Upload {
                runtime,
                device,
                thread,
                words: words.to_vec(),
                handle: handle.clone(),
            });
            handle
        }
    }
}

#[cfg(all(test, feature = "wgpu"))]
mod tests {
    use super::*;
    use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

    fn read(client: &ComputeClient<WgpuRuntime>, handle: Handle) -> Vec<u32> {
        let bytes = client.read_one(handle).expect("read back");
        bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    }

    /// Repeated words reuse their buffer (no fresh upload) while kept; every buffer handed out
    /// holds its own words — past the eviction of the oldest, and on another thread, which
    /// uploads its own.
    #[test]
    fn uploads_are_kept_by_content() {
        let device = WgpuDevice::default();
        let client = WgpuRuntime::client(&device);
        let arrays: Vec<Vec<u32>> = (0..KEPT as u32 + 4).map(|i| vec![i, i * 7, 3]).collect();
        let before = fresh_uploads();
        for words in &arrays[..4] {
            assert_eq!(read(&client, upload_handle(&client, &device, words)), *words);
        }
        for words in &arrays[..4] {
            assert_eq!(read(&client, upload_handle(&client, &device, words)), *words);
        }
        assert_eq!(fresh_uploads() - before, 4, "kept arrays were uploaded again");
        // Past `KEPT` distinct arrays the oldest are dropped, and uploaded afresh when asked for.
        for words in &arrays {
            assert_eq!(read(&client, upload_handle(&client, &device, words)), *words);
        }
        assert_eq!(fresh_uploads() - before, arrays.len());
        assert_eq!(
            read(&client, upload_handle(&client, &device, &arrays[0])),
            arrays[0]
        );
        assert_eq!(
            fresh_uploads() - before,
            arrays.len() + 1,
            "an evicted array came back"
        );
        let last = arrays.last().unwrap().clone();
        let other = std::thread::spawn(move || {
            let client = WgpuRuntime::client(&device);
            let words = read(&client, upload_handle(&client, &device, &last));
            (words == last, fresh_uploads())
        });
        assert_eq!(
            other.join().unwrap(),
            (true, 1),
            "another thread shares no buffer"
        );
    }
}
