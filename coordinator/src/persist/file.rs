//! [`MetadataFile`], the embedded default store: one JSON file on local disk, replaced
//! atomically: a save writes a temporary file, fsyncs it, renames it over the old one
//! and fsyncs the directory, so after a crash the file holds either the old or the new state,
//! never a mix. Saves block; the service runs them on the blocking pool, never on a
//! connection's reader task.

use super::MetadataStore;
use crate::metadata::Metadata;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

const FILE_NAME: &str = "metadata.json";

#[derive(Debug)]
pub struct MetadataFile {
    dir: PathBuf,
}

impl MetadataFile {
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }
}

impl MetadataStore for MetadataFile {
    fn describe(&self) -> String {
        self.path().display().to_string()
    }

    fn load(&self) -> Result<Metadata, String> {
        let path = self.path();
        match fs::read(&path) {
            Ok(bytes) => {
                let invalid = |e: String| {
                    format!("{} is not valid coordinator metadata: {e}", path.display())
                };
                let mut metadata: Metadata =
                    serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
                metadata.validate().map_err(invalid)?;
                metadata.upgrade_streams();
                Ok(metadata)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Metadata::default()),
            Err(e) => Err(format!("reading {}: {e}", path.display())),
        }
    }

    fn save(&self, _previous: &Metadata, metadata: &Metadata) -> Result<(), String> {
        let io = |what: &str, e: std::io::Error| format!("{what} in {}: {e}", self.dir.display());
        fs::create_dir_all(&self.dir).map_err(|e| io("creating data dir", e))?;
        let json = serde_json::to_vec_pretty(metadata).map_err(|e| e.to_string())?;
        let tmp = self.dir.join(format!("{FILE_NAME}.tmp"));
        let mut file = File::create(&tmp).map_err(|e| io("creating temp file", e))?;
        file.write_all(&json)
            .map_err(|e| io("writing metadata", e))?;
        file.sync_all().map_err(|e| io("syncing metadata", e))?;
        fs::rename(&tmp, self.path()).map_err(|e| io("renaming metadata", e))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io("syncing data dir", e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_metadata_loads_back_and_a_missing_file_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let file = MetadataFile::new(&dir.path().join("coordinator"));
        assert_eq!(file.load().unwrap(), Metadata::default());
        let mut metadata = Metadata::default();
        metadata
            .register_broker("127.0.0.1:1", "127.0.0.1:3", "127.0.0.1:2", "127.0.0.1:4")
            .unwrap();
        file.save(&Metadata::default(), &metadata).unwrap();
        assert_eq!(file.load().unwrap(), metadata);
        fs::write(file.path(), b"{ not json").unwrap();
        assert!(file.load().is_err());
    }
}
