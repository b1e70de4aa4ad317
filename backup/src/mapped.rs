//! A memory-mapped file: the backing of one replica buffer.
//!
//! This is the only module in Tailstream with `unsafe` code, and it has one unsafe call:
//! mapping the file. Everything else goes through the safe slice the mapping derefs to.

use memmap2::MmapMut;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

/// A file of fixed length, mapped read-write. New files are sparse and therefore read as
/// zeroes, which is what the trailer scheme needs from an unwritten buffer.
#[derive(Debug)]
pub struct MappedBuffer {
    file: File,
    map: MmapMut,
}

impl MappedBuffer {
    /// Creates (or truncates) `path` to `len` zero bytes and maps it.
    pub fn create(path: &Path, len: u32) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        file.set_len(u64::from(len))?;
        Self::map(file)
    }

    /// Creates `path` as `len` zero bytes, written (not sparse), and maps it. Pool buffers are
    /// made this way once and then reused: their pages are in the page cache, and the
    /// filesystem reserved their blocks at the write (a full disk fails here, not as a fault
    /// on the replication path).
    ///
    /// `synced`: written back before it is returned. An open buffer is only promised to survive
    /// the backup process, which the page cache does, so this is not for safety: unsynced
    /// zeros are written back later, and on ext4 (ordered mode) any fsync meanwhile (the
    /// coordinator's journal on the same disk, a closed segment's) waits for them too. Spares,
    /// made in the background, are synced; a buffer an open waits for is not (the sync
    /// doubled a fresh log's first append).
    pub fn create_allocated(path: &Path, len: u32, synced: bool) -> io::Result<Self> {
        use std::io::Write;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        let zeros = vec![0u8; 1 << 20];
        let mut left = len as usize;
        while left > 0 {
            let n = left.min(zeros.len());
            file.write_all(&zeros[..n])?;
            left -= n;
        }
        if synced {
            file.sync_all()?;
        }
        Self::map(file)
    }

    /// Maps an existing file (a replica that was open when the backup stopped).
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Self::map(file)
    }

    fn map(file: File) -> io::Result<Self> {
        // SAFETY: the mapping is only sound while nothing else changes the file underneath
        // it. The file lives in this backup's private data directory, is created and named
        // by this process alone, and every access to the mapping goes through `&self`/`&mut
        // self` of this type, which the replica store keeps behind a mutex. A file truncated
        // by an outside process would fault the backup, which is the same failure as any
        // other tampering with a server's private data directory.
        #[allow(unsafe_code)]
        let map = unsafe { MmapMut::map_mut(&file)? };
        Ok(Self { file, map })
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.map
    }

    /// Writes the mapping back to the file and the file to the device.
    pub fn flush(&self) -> io::Result<()> {
        self.map.flush()?;
        self.file.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_buffer_is_zeroed_and_what_is_written_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("buf");
        let mut buffer = MappedBuffer::create(&path, 8192).unwrap();
        assert!(buffer.bytes().iter().all(|b| *b == 0));
        buffer.bytes_mut()[100..105].copy_from_slice(b"hello");
        // No flush: a process crash keeps what is in the page cache; reopening sees it.
        drop(buffer);
        let again = MappedBuffer::open(&path).unwrap();
        assert_eq!(&again.bytes()[100..105], b"hello");
        assert_eq!(again.len(), 8192);
        again.flush().unwrap();
    }
}
