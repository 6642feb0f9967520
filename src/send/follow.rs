//! `tail -F` for one file: reads it from the beginning, then whatever is appended; when the path
//! is renamed away and re-created (rotation) it finishes the old file and moves to the new one;
//! when the file shrinks (truncation) it starts over from its beginning. Polls, so it works the
//! same on every filesystem.

use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The file being read: its identity (device, inode), and how far it was read.
struct Current {
    file: File,
    identity: (u64, u64),
    offset: u64,
}

/// Calls `on_line` for every line of `path` as it is written, until `stop` is set; then reads
/// what is left and returns. A last line without its newline is passed on at rotation or stop.
pub(crate) fn follow(
    path: &Path,
    poll: Duration,
    stop: &AtomicBool,
    on_line: &mut dyn FnMut(&str),
) -> std::io::Result<()> {
    let mut current: Option<Current> = None;
    let mut partial: Vec<u8> = Vec::new();
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        if current.is_none() {
            current = open(path)?;
        }
        if let Some(reading) = current.as_mut() {
            // Truncated in place (copytruncate, `> file`): what we read is gone; start over.
            if reading.file.metadata()?.len() < reading.offset {
                reading.file.seek(SeekFrom::Start(0))?;
                reading.offset = 0;
                partial.clear();
            }
            drain(reading, &mut partial, on_line)?;
            let moved = match std::fs::metadata(path) {
                Ok(now) => (now.dev(), now.ino()) != reading.identity,
                // Renamed away and not re-created yet: keep reading the old file meanwhile.
                Err(err) if err.kind() == ErrorKind::NotFound => false,
                Err(err) => return Err(err),
            };
            if moved {
                // A writer may still have appended to the old file after our last read.
                drain(reading, &mut partial, on_line)?;
                flush_partial(&mut partial, on_line);
                current = open(path)?;
                continue;
            }
        }
        if stopping {
            flush_partial(&mut partial, on_line);
            return Ok(());
        }
        std::thread::sleep(poll);
    }
}

fn open(path: &Path) -> std::io::Result<Option<Current>> {
    match File::open(path) {
        Ok(file) => {
            let metadata = file.metadata()?;
            Ok(Some(Current {
                file,
                identity: (metadata.dev(), metadata.ino()),
                offset: 0,
            }))
        }
        Err(err) if err.kind() == ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

/// Reads to the current end, passing on every complete line.
fn drain(
    reading: &mut Current,
    partial: &mut Vec<u8>,
    on_line: &mut dyn FnMut(&str),
) -> std::io::Result<()> {
    let mut buffer = [0u8; 64 * 1024];
    loop {
        let read = reading.file.read(&mut buffer)?;
        if read == 0 {
            return Ok(());
        }
        reading.offset += read as u64;
        let mut rest = &buffer[..read];
        while let Some(newline) = rest.iter().position(|&byte| byte == b'\n') {
            partial.extend_from_slice(&rest[..newline]);
            on_line(String::from_utf8_lossy(partial).trim_end_matches('\r'));
            partial.clear();
            rest = &rest[newline + 1..];
        }
        partial.extend_from_slice(rest);
    }
}

fn flush_partial(partial: &mut Vec<u8>, on_line: &mut dyn FnMut(&str)) {
    if !partial.is_empty() {
        on_line(&String::from_utf8_lossy(partial));
        partial.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Arc;

    #[test]
    fn rotation_and_truncation_lose_and_repeat_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.log");
        std::fs::write(&path, "one\ntwo\n").unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
        let follower = {
            let (path, stop) = (path.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut on_line = |line: &str| lines_tx.send(line.to_owned()).unwrap();
                follow(&path, Duration::from_millis(10), &stop, &mut on_line).unwrap();
            })
        };
        let next = || lines.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!((next(), next()), ("one".into(), "two".into()));

        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(b"thr").unwrap();
        file.flush().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        file.write_all(b"ee\n").unwrap();
        assert_eq!(next(), "three");

        // Rotation: the old file gets one more line after the rename, then a new file appears.
        std::fs::rename(&path, dir.path().join("app.log.1")).unwrap();
        file.write_all(b"four\n").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        std::fs::write(&path, "five\n").unwrap();
        assert_eq!((next(), next()), ("four".into(), "five".into()));

        // Truncation, then a shorter content.
        std::fs::write(&path, "").unwrap();
        std::thread::sleep(Duration::from_millis(300));
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"six\nsev")
            .unwrap();
        assert_eq!(next(), "six");
        stop.store(true, Ordering::Relaxed);
        follower.join().unwrap();
        assert_eq!(next(), "sev");
        assert!(lines.try_recv().is_err());
    }
}
