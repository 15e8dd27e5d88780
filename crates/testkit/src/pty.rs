//! A program on a real pseudo-terminal, as a person runs it: its standard input, output and
//! error are the terminal (so `isatty` holds for each), the terminal is its controlling one
//! (`setsid --ctty`, so Ctrl-C typed into it is SIGINT from the line discipline), and what it
//! writes is read back through a terminal emulator ([`vt100`]) into the screen a person sees.

use std::io::{Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// The terminal's size: wide enough that no result line wraps, and tall enough that no
/// command's output scrolls off it.
const ROWS: std::num::NonZeroU16 = std::num::NonZeroU16::new(200).unwrap();
const COLS: std::num::NonZeroU16 = std::num::NonZeroU16::new(200).unwrap();

/// A process running on a pseudo-terminal of its own.
pub struct OnPty {
    child: Child,
    master: std::fs::File,
    bytes: Receiver<Vec<u8>>,
    raw: Vec<u8>,
    screen: vt100::Parser,
}

/// How a process on a terminal ended, and what the terminal showed.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    /// How long after the wait began it ended.
    pub took: Duration,
    /// The screen at the end, as text.
    pub screen: String,
    /// Everything written to the terminal, escape sequences included.
    pub raw: Vec<u8>,
}

impl Finished {
    /// The exit code (panics on a death by signal, saying which).
    pub fn code(&self) -> i32 {
        use std::os::unix::process::ExitStatusExt as _;
        self.status.code().unwrap_or_else(|| {
            panic!(
                "killed by signal {:?}; the screen:\n{}",
                self.status.signal(),
                self.screen
            )
        })
    }

    /// Everything written, with escape sequences left in, as text.
    pub fn raw_text(&self) -> String {
        String::from_utf8_lossy(&self.raw).into_owned()
    }
}

/// Opens a pseudo-terminal: its master, and its subordinate's path.
fn open() -> (OwnedFd, std::path::PathBuf) {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    let master =
        openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).expect("openpt");
    grantpt(&master).expect("grantpt");
    unlockpt(&master).expect("unlockpt");
    let name = ptsname(&master, Vec::new()).expect("ptsname");
    let size = rustix::termios::Winsize {
        ws_row: ROWS.get(),
        ws_col: COLS.get(),
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    rustix::termios::tcsetwinsize(&master, size).expect("set the window size");
    let path = std::path::PathBuf::from(name.to_str().expect("a pty's name is text"));
    (master, path)
}

impl OnPty {
    /// Starts `program` with `args` in `dir` on a new terminal, with `env` added to this
    /// process's environment (and `TERM` set, as a terminal emulator sets it).
    pub fn spawn(program: &Path, args: &[&str], env: &[(&str, &str)], dir: &Path) -> Self {
        let (master, subordinate) = open();
        let tty = || {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&subordinate)
                .expect("open the pty's subordinate")
        };
        let mut cmd = Command::new("setsid");
        cmd.arg("--ctty")
            .arg(program)
            .args(args)
            .current_dir(dir)
            .env("TERM", "xterm-256color")
            .env_remove("NO_COLOR")
            .stdin(Stdio::from(tty()))
            .stdout(Stdio::from(tty()))
            .stderr(Stdio::from(tty()));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start the program on the pty (setsid)");
        // The command's copies of the subordinate are closed with it: once the program exits,
        // a read of the master ends (EIO).
        drop(cmd);
        let master = std::fs::File::from(master);
        let mut reader = master.try_clone().expect("clone the master");
        let (tx, bytes) = channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if tx.send(buf[..n].to_vec()).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Self {
            child,
            master,
            bytes,
            raw: Vec::new(),
            screen: vt100::Parser::new(ROWS, COLS, 0),
        }
    }

    /// The process id (for signals).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Types `bytes` into the terminal (`b"\x03"` is Ctrl-C).
    pub fn type_in(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).expect("write to the pty");
    }

    fn take(&mut self, chunk: Vec<u8>) {
        self.screen.process(&chunk);
        self.raw.extend_from_slice(&chunk);
    }

    /// Everything on the screen now.
    pub fn screen_text(&self) -> String {
        self.screen.screen().contents()
    }

    /// Waits until the screen shows `text`, for at most `timeout`; panics with the screen when
    /// it does not.
    pub fn wait_for(&mut self, text: &str, timeout: Duration) {
        let end = Instant::now() + timeout;
        loop {
            if String::from_utf8_lossy(&self.raw).contains(text) {
                return;
            }
            let left = end.saturating_duration_since(Instant::now());
            match self.bytes.recv_timeout(left) {
                Ok(chunk) => self.take(chunk),
                Err(RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    panic!(
                        "`{text}` did not appear within {timeout:?}; the screen:\n{}",
                        self.screen_text()
                    );
                }
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "the program ended before `{text}` appeared; the screen:\n{}",
                    self.screen_text()
                ),
            }
        }
    }

    /// Waits for the program to exit and its output to be read, for at most `timeout`; kills it
    /// and panics with the screen when it does not end in time.
    pub fn finish(mut self, timeout: Duration) -> Finished {
        let started = Instant::now();
        let end = started + timeout;
        // Output ends when the last holder of the subordinate (the program) exits.
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.bytes.recv_timeout(left) {
                Ok(chunk) => self.take(chunk),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    panic!(
                        "the program did not end within {timeout:?} (it hung); the screen:\n{}",
                        self.screen_text()
                    );
                }
            }
        }
        let status = self.child.wait().expect("wait for the program");
        let took = started.elapsed();
        Finished {
            status,
            took,
            screen: self.screen_text(),
            raw: std::mem::take(&mut self.raw),
        }
    }
}

impl Drop for OnPty {
    fn drop(&mut self) {
        // A test that failed midway leaves no program behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `signal` (`"TERM"`, `"INT"`) to process `pid`.
pub fn signal(pid: u32, signal: &str) {
    use rustix::process::{Pid, Signal, kill_process};
    let signal = match signal {
        "TERM" => Signal::TERM,
        "INT" => Signal::INT,
        other => panic!("no such signal here: {other}"),
    };
    let pid = Pid::from_raw(i32::try_from(pid).expect("a pid")).expect("a pid is not 0");
    kill_process(pid, signal).expect("send the signal");
}
