//! The one tokio runtime of a process, made on first use. A forked child
//! inherits the parent's bookkeeping but none of its threads, so the child makes
//! its own the first time it asks, and forgets (never drops) the inherited one:
//! dropping it would wait for threads that do not exist.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use loaderx_gather::{Error, PerProcess, Result};
use tokio::runtime::Runtime;

/// Threads that drive requests. They only wait on sockets; decoding runs on the
/// gather engine's threads once the bytes are in.
const IO_THREADS: usize = 2;

static RUNTIME: PerProcess<Runtime> = PerProcess::new();

/// The process's id, for telling a forked child from its parent.
pub(crate) fn pid() -> u32 {
    std::process::id()
}

fn runtime() -> Result<Arc<Runtime>> {
    RUNTIME.get(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(IO_THREADS)
            .thread_name("loaderx-io")
            .enable_all()
            .build()
            .map_err(|e| Error::io("tokio runtime", e))?;
        Ok(Arc::new(rt))
    })
}

/// Starts `fut` on the process's runtime and returns at once; awaiting (or
/// [`block_on`]) the handle gives its result. A panic inside becomes an
/// internal error when the handle is awaited.
pub(crate) fn spawn<T: Send + 'static>(
    fut: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<tokio::task::JoinHandle<Result<T>>> {
    Ok(runtime()?.spawn(fut))
}

/// Runs `fut` to completion on the process's runtime from the calling thread.
/// A panic inside becomes an internal error rather than crossing into the caller.
pub(crate) fn block_on<T>(fut: impl Future<Output = Result<T>>) -> Result<T> {
    let rt = runtime()?;
    catch_unwind(AssertUnwindSafe(|| rt.block_on(fut))).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(zrecord::Error::Internal(format!("a remote request panicked: {msg}")).into())
    })
}
