//! Stopping on a signal, for every command: SIGINT (Ctrl-C), SIGTERM and SIGHUP (the terminal
//! closed). The handlers run on a thread of their own, so a signal is served even while the
//! main thread computes (model inference is not async). On a signal, every watched sandbox
//! stops creating containers and removes everything its run made; finished results are
//! already on disk; then the binary's own `exit` ends the process (the library never does).

use std::future::Future;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};

use crate::sandbox::DockerSandbox;

/// Longest the cleanup may take before the process exits anyway.
const CLEANUP_LIMIT: Duration = Duration::from_secs(120);

static STOPPING: AtomicBool = AtomicBool::new(false);
static WATCHED: Mutex<Vec<DockerSandbox>> = Mutex::new(Vec::new());
static NOTE: Mutex<Option<String>> = Mutex::new(None);
type StopHook = Box<dyn Fn() + Send>;
static ON_STOP: Mutex<Vec<StopHook>> = Mutex::new(Vec::new());
static STOP: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Installs the handlers. Call once, before anything that makes containers. After a signal's
/// cleanup, `exit` is called on the handlers' thread: it ends the process (the binary's
/// `std::process::exit` with its interrupted status).
pub fn install(exit: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // Registered now, so from here on no signal falls to its default action (death with no
    // cleanup).
    let mut signals = runtime.block_on(async {
        Ok::<_, std::io::Error>([
            ("SIGINT", signal(SignalKind::interrupt())?),
            ("SIGTERM", signal(SignalKind::terminate())?),
            ("SIGHUP", signal(SignalKind::hangup())?),
        ])
    })?;
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        runtime.block_on(async move {
            let [(int, a), (term, b), (hup, c)] = &mut signals;
            let name = tokio::select! {
                _ = a.recv() => *int,
                _ = b.recv() => *term,
                _ = c.recv() => *hup,
            };
            stop(name).await
        });
        exit()
    })?;
    Ok(())
}

/// Removes everything `sandbox`'s run made when a signal arrives.
pub fn watch(sandbox: &DockerSandbox) {
    WATCHED.lock().unwrap_or_else(|e| e.into_inner()).push(sandbox.clone());
}

/// Runs `hook` on a signal, before the sandboxes are cleaned (stopping work sent elsewhere:
/// a cluster's jobs). It runs on the handlers' thread and may block.
pub fn on_stop(hook: impl Fn() + Send + 'static) {
    ON_STOP.lock().unwrap_or_else(|e| e.into_inner()).push(Box::new(hook));
}

/// What to tell the user on a signal (e.g. where finished results are, how to resume).
pub fn note(text: impl Into<String>) {
    *NOTE.lock().unwrap_or_else(|e| e.into_inner()) = Some(text.into());
}

/// Whether a signal arrived (the process is about to exit).
pub fn is_stopping() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

/// Runs `work` until it ends or a signal arrives; then it is dropped, so it starts nothing
/// more, and this waits for the handler to end the process.
pub async fn until_stopped<T>(work: impl Future<Output = T>) -> T {
    let stopped = STOP.notified();
    tokio::pin!(stopped);
    stopped.as_mut().enable();
    if is_stopping() {
        return std::future::pending().await;
    }
    tokio::select! {
        value = work => value,
        _ = stopped => std::future::pending().await,
    }
}

/// Blocks the calling thread for good once a signal arrived: the handler ends the process
/// after its cleanup, with the interrupted status, whatever the command itself came to.
pub fn wait_if_stopping() {
    while is_stopping() {
        std::thread::sleep(Duration::from_secs(1));
    }
}

async fn stop(signal: &str) {
    STOPPING.store(true, Ordering::SeqCst);
    STOP.notify_waiters();
    let hooks: Vec<StopHook> = std::mem::take(&mut *ON_STOP.lock().unwrap_or_else(|e| e.into_inner()));
    if !hooks.is_empty() {
        // The hooks block (HTTP calls); the handlers' runtime has nothing else to do meanwhile.
        let _ = tokio::task::spawn_blocking(move || hooks.iter().for_each(|hook| hook())).await;
    }
    let sandboxes = WATCHED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut stderr = std::io::stderr();
    let cleanup = async {
        for sandbox in &sandboxes {
            match sandbox.stop_and_remove().await {
                Ok(r) => tracing::info!(
                    "removed {} containers, {} networks, {} volumes of run {}",
                    r.containers,
                    r.networks,
                    r.volumes,
                    sandbox.run_id()
                ),
                // The next start of any command reaps what is left (its creator is gone).
                Err(e) => {
                    let _ = writeln!(stderr, "error: cleaning up after {signal}: {}", crate::error_chain(&e));
                }
            }
        }
    };
    if tokio::time::timeout(CLEANUP_LIMIT, cleanup).await.is_err() {
        let _ =
            writeln!(stderr, "error: cleanup after {signal} took too long; the next run removes the rest");
    }
    let note = NOTE.lock().unwrap_or_else(|e| e.into_inner()).clone();
    // The terminal may be gone (SIGHUP): writing can fail, which must not stop the exit.
    let _ = match note {
        Some(note) => writeln!(stderr, "interrupted ({signal}): removed what the run made; {note}"),
        None => writeln!(stderr, "interrupted ({signal}): removed what the run made"),
    };
}
