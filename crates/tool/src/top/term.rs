//! The terminal for `top`: raw keys without echo, the alternate screen,
//! and everything restored on the way out.

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags};
use rustix::termios::{self, OptionalActions, Termios};

/// Raw input while alive; the old settings and the main screen return on
/// drop (also when `top` fails or panics out of its loop).
pub struct Terminal {
    saved: Option<Termios>,
}

impl Terminal {
    pub fn open() -> io::Result<Terminal> {
        let stdin = io::stdin();
        let saved = if termios::isatty(stdin.as_fd()) {
            let saved = termios::tcgetattr(stdin.as_fd())?;
            let mut raw = saved.clone();
            raw.make_raw();
            // Keep output processing so "\n" still returns the carriage.
            raw.output_modes = saved.output_modes;
            termios::tcsetattr(stdin.as_fd(), OptionalActions::Now, &raw)?;
            Some(saved)
        } else {
            None
        };
        // Alternate screen, cursor hidden.
        print!("\x1b[?1049h\x1b[?25l");
        io::stdout().flush()?;
        Ok(Terminal { saved })
    }

    /// Columns and rows (80x24 when unknown).
    pub fn size(&self) -> (usize, usize) {
        match termios::tcgetwinsize(io::stdout().as_fd()) {
            Ok(w) if w.ws_col > 0 && w.ws_row > 0 => (w.ws_col.into(), w.ws_row.into()),
            _ => (80, 24),
        }
    }

    /// Replace the screen with `lines`.
    pub fn draw(&self, lines: &[String]) -> io::Result<()> {
        let mut out = String::from("\x1b[H\x1b[2J");
        for line in lines {
            out.push_str(line);
            out.push_str("\r\n");
        }
        let mut stdout = io::stdout().lock();
        stdout.write_all(out.as_bytes())?;
        stdout.flush()
    }

    /// A key pressed within `wait`, if any (None also at end of input).
    pub fn key(&self, wait: Duration) -> io::Result<Option<u8>> {
        let stdin = io::stdin();
        let mut fds = [PollFd::new(&stdin, PollFlags::IN)];
        let ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
        match poll(&mut fds, ms) {
            Ok(0) => return Ok(None),
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        let mut byte = [0u8; 1];
        match stdin.lock().read(&mut byte)? {
            0 => {
                // End of input: nobody will press a key; just wait.
                std::thread::sleep(wait);
                Ok(None)
            }
            _ => Ok(Some(byte[0])),
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        print!("\x1b[?25h\x1b[?1049l");
        let _ = io::stdout().flush();
        if let Some(saved) = &self.saved {
            let _ = termios::tcsetattr(io::stdin().as_fd(), OptionalActions::Now, saved);
        }
    }
}
