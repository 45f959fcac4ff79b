//! A command run on a pseudo-terminal, as a user's shell runs it: its standard output and
//! error are the terminal (so it sees one and colours its lines), read back as they come,
//! with the time each byte arrived; signals go to it as Ctrl-C would. Entry point:
//! [`Terminal::spawn`].

use std::fs::File;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the terminal showed: each chunk read and when.
type Screen = Arc<Mutex<Vec<(Instant, Vec<u8>)>>>;

pub struct Terminal {
    child: Child,
    screen: Screen,
}

impl Terminal {
    /// Starts `command` with stdout and stderr on a new pseudo-terminal (stdin empty).
    pub fn spawn(mut command: Command) -> Terminal {
        let (mut master, mut slave) = (0, 0);
        // SAFETY: openpty writes two new descriptors into the two integers; the other
        // arguments may be null (no name, default settings and size).
        let opened = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors were just opened and are owned here alone.
        let (master, slave) =
            unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let err = slave
            .try_clone()
            .expect("a second descriptor of the terminal");
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::from(slave))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("starting the command on the terminal");
        // The command's copies are the only ones left open, so reading ends when it exits.
        drop(command);
        let screen: Screen = Arc::default();
        let shown = screen.clone();
        std::thread::spawn(move || {
            let mut master = File::from(master);
            let mut buf = [0u8; 8192];
            // A read fails (EIO) once the command closed its side.
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut s) = shown.lock() {
                    s.push((Instant::now(), buf[..n].to_vec()));
                }
            }
        });
        Terminal { child, screen }
    }

    /// Everything shown so far, as text.
    pub fn text(&self) -> String {
        let s = self.screen.lock().map(|s| s.clone()).unwrap_or_default();
        String::from_utf8_lossy(&s.into_iter().flat_map(|(_, b)| b).collect::<Vec<u8>>())
            .into_owned()
    }

    /// Waits until the text shows `needle`; when its first byte became whole on the screen.
    pub fn wait_for(&self, needle: &str, limit: Duration) -> Instant {
        let deadline = Instant::now() + limit;
        loop {
            let chunks = self.screen.lock().map(|s| s.clone()).unwrap_or_default();
            let mut text = Vec::new();
            for (at, bytes) in chunks {
                text.extend_from_slice(&bytes);
                if String::from_utf8_lossy(&text).contains(needle) {
                    return at;
                }
            }
            assert!(
                Instant::now() < deadline,
                "`{needle}` did not show within {limit:?}; the terminal shows:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends `signal` (`libc::SIGINT` is Ctrl-C's).
    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill with the id of a child this owns and has not reaped.
        let sent = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(sent, 0, "kill: {}", std::io::Error::last_os_error());
    }

    /// Waits for the command to exit: its exit code.
    pub fn exited(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("waiting for the command") {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "the command did not exit within {limit:?}; the terminal shows:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
