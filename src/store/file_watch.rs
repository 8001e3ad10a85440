//! The SQLite file, watched: deleted or replaced while toolgate holds it
//! open, every row written after goes to a file no one can open again, and
//! the writer's batches still succeed. The watch notices and says so, in
//! `/readyz`, `toolgate_store_up` and the log.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub struct FileWatch {
    path: PathBuf,
    /// (device, inode) of the file opened.
    opened: (u64, u64),
    /// Why the file is not the one opened any more (it stays so).
    lost: Option<String>,
}

fn identity(path: &Path) -> std::io::Result<(u64, u64)> {
    let meta = std::fs::metadata(path)?;
    Ok((meta.dev(), meta.ino()))
}

impl FileWatch {
    /// Watches `path`, the file just opened (`None` if it cannot be read).
    pub fn start(path: &Path) -> Option<FileWatch> {
        let opened = identity(path).ok()?;
        Some(FileWatch {
            path: path.to_owned(),
            opened,
            lost: None,
        })
    }

    /// Looks at the file again; the reason it is lost, if it is.
    pub fn check(&mut self) -> Option<&str> {
        if self.lost.is_none() {
            let now = identity(&self.path);
            let what = match now {
                Ok(id) if id == self.opened => None,
                Ok(_) => Some("replaced"),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("deleted"),
                Err(_) => None,
            };
            if let Some(what) = what {
                let reason = format!(
                    "the database file {} was {what} while toolgate held it open: rows written now are lost when toolgate stops; restart toolgate to open the file anew",
                    self.path.display()
                );
                tracing::error!("store: {reason}");
                self.lost = Some(reason);
            }
        }
        self.lost.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_or_replaced_file_is_noticed_and_stays_lost() {
        let dir = std::env::temp_dir().join(format!("toolgate-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.db");
        std::fs::write(&path, b"x").unwrap();
        let mut watch = FileWatch::start(&path).unwrap();
        assert_eq!(watch.check(), None);
        std::fs::write(&path, b"y").unwrap();
        assert_eq!(watch.check(), None, "written in place: the same file");
        std::fs::remove_file(&path).unwrap();
        assert!(watch.check().unwrap().contains("was deleted"));
        std::fs::write(&path, b"z").unwrap();
        assert!(
            watch.check().unwrap().contains("was deleted"),
            "it stays lost"
        );

        let mut watch = FileWatch::start(&path).unwrap();
        let other = dir.join("other.db");
        std::fs::write(&other, b"w").unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert!(watch.check().unwrap().contains("was replaced"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
