//! One control plane for the tests of a test binary, which they take turns on: a start costs about two
//! CPU-seconds, a turn a namespace.
//!
//! ```no_run
//! use rustbuilder_envtest::{TestEnv, TestEnvBuilder, take_turn};
//!
//! /// Every test of the binary asks for the same env: the first one starts it.
//! fn shared_env() -> TestEnvBuilder {
//!     TestEnv::builder()
//! }
//!
//! # async fn demo() {
//! let env = take_turn(shared_env).await;
//! let namespace = env.namespace(); // empty, this test's own
//! # let _ = (env.client(), namespace);
//! # }
//! ```

use std::ops::Deref;
#[cfg(target_os = "linux")]
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{TestEnv, TestEnvBuilder};

/// Waits for this test's turn on the binary's shared env, starting it (as `start` configures it) if no
/// test has. One test holds a turn at a time, so what it counts on the API server (requests, watches
/// opened meanwhile) is its own doing, and it gets a namespace of its own.
///
/// `start` configures the env the first caller starts: give every test of a binary the same one. The e2e
/// module's `Cluster::start` takes its turns here too, on a cluster-mode env: an e2e test binary takes
/// them through `Cluster`. A test that needs a server of its own (a restart, other flags, a count of the
/// watches the server holds: an earlier test's watches close only when its runtime is gone, a moment
/// after its turn) starts its own.
///
/// The env lives on a thread of its own, whose runtime outlives every test's: its client, which that
/// runtime drives, serves them all. Its processes die with the test binary (`PR_SET_PDEATHSIG`), and
/// its directory is removed when the binary exits.
pub async fn take_turn(start: fn() -> TestEnvBuilder) -> Turn {
    static ENV: OnceLock<&'static TestEnv> = OnceLock::new();
    static TURNS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    static NAMESPACES: AtomicUsize = AtomicUsize::new(0);
    let turn = TURNS.lock().await;
    // Only the holder of a turn gets here: one thread starts the env, no other waits on it meanwhile.
    let env = *ENV.get_or_init(|| {
        let (started, env) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("envtest: a runtime for the shared env");
            runtime.block_on(async {
                let env: &'static TestEnv = Box::leak(Box::new(start().start().await));
                started
                    .send(env)
                    .expect("envtest: the test waits for its env");
                std::future::pending::<()>().await
            })
        });
        let env = env
            .recv()
            .expect("envtest: the shared env did not start (its panic is above)");
        remove_at_exit(env);
        env
    });
    let namespace = format!("turn-{}", NAMESPACES.fetch_add(1, Ordering::SeqCst));
    env.create_namespace(&namespace).await;
    Turn {
        env,
        namespace,
        _turn: turn,
    }
}

/// A test's turn on the shared env: derefs to it, and gives the test a namespace of its own. The next
/// test's turn begins when this is dropped.
pub struct Turn {
    env: &'static TestEnv,
    namespace: String,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl Turn {
    /// The namespace made for this turn (empty): create the test's objects here.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
}

impl Deref for Turn {
    type Target = TestEnv;

    fn deref(&self) -> &TestEnv {
        self.env
    }
}

/// Kills the shared env's processes and removes its directory when the test binary exits: a `static`
/// is never dropped. (Elsewhere than on Linux, the directory stays in the temporary directory.)
#[cfg(target_os = "linux")]
fn remove_at_exit(env: &'static TestEnv) {
    static SHARED: OnceLock<(Vec<u32>, PathBuf)> = OnceLock::new();
    extern "C" fn remove() {
        if let Some((pids, dir)) = SHARED.get() {
            for &pid in pids {
                // SAFETY: kill(2) with a pid of a child this process started and has not reaped.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    let pids = env.pids().into_iter().map(|(_, pid)| pid).collect();
    let dir = env
        .kubeconfig()
        .parent()
        .expect("envtest: the env's directory")
        .to_owned();
    if SHARED.set((pids, dir)).is_ok() {
        // SAFETY: registers a function that takes no arguments and does not unwind.
        unsafe { libc::atexit(remove) };
    }
}

#[cfg(not(target_os = "linux"))]
fn remove_at_exit(_env: &'static TestEnv) {}
