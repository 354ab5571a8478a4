//! Files users send, downloaded through `getFile` into `<data dir>/media/telegram/<chat>/`
//! before the message is stored, so what the inbox holds is complete when Telegram is
//! acknowledged (and a turn resumed after a crash still finds its files). Only messages from
//! users who may talk to the bot get here: a stranger's file is never fetched.
//!
//! Each file becomes a note in the message text ([`adapters::media::note`]); photos (and
//! image documents) are also handed to the conversation as images for a model that sees them.
//! A file over the size limit, or one Telegram would not give, is noted as not downloaded —
//! the message still runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use adapters::media::{self, MissingFile, SavedFile};
use adapters::telegram::Bot;
use adapters::telegram::inbound::{Incoming, Media};
use teloxide_core::net::Download;
use teloxide_core::prelude::*;
use teloxide_core::types::FileId;

use crate::conversation::ImageFile;

/// Attempts at fetching one file when the network fails.
const ATTEMPTS: u32 = 3;

/// Where files go and how large they may be.
pub(super) struct Files {
    /// The data directory (`$IRIS_HOME`); notes show paths relative to it.
    pub home: PathBuf,
    /// Files larger than this are not downloaded (the Bot API serves at most 20 MB).
    pub max_bytes: u64,
}

/// A message's text with its files noted, and the images among them.
pub(super) struct Fetched {
    pub text: String,
    pub images: Vec<ImageFile>,
}

impl Files {
    /// Downloads every file of `message` (one already on disk is not fetched again).
    pub async fn fetch(&self, bot: &Bot, message: &Incoming) -> Fetched {
        let mut notes = Vec::new();
        let mut images = Vec::new();
        for item in &message.media {
            match self.fetch_one(bot, message.chat_id, item).await {
                Ok(saved) => {
                    if saved.is_model_image() {
                        images.push(ImageFile {
                            path: saved.path.clone(),
                            media_type: saved.info.media_type.clone(),
                        });
                    }
                    notes.push(media::note(&saved));
                }
                Err(reason) => {
                    tracing::warn!(chat = message.chat_id, file = %item.unique_id, %reason, "telegram: file not downloaded");
                    notes.push(media::missing_note(&MissingFile {
                        info: item.info.clone(),
                        reason,
                    }));
                }
            }
        }
        let mut text = message.text.clone();
        for note in notes {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&note);
        }
        Fetched { text, images }
    }

    async fn fetch_one(&self, bot: &Bot, chat_id: i64, item: &Media) -> Result<SavedFile, String> {
        if item.info.bytes > self.max_bytes {
            return Err(self.too_large());
        }
        let dir = self
            .home
            .join("media")
            .join("telegram")
            .join(chat_id.to_string());
        let name = format!(
            "{}.{}",
            safe_name(&item.unique_id),
            media::extension(&item.info)
        );
        let path = dir.join(&name);
        if tokio::fs::metadata(&path).await.is_err() {
            tokio::fs::create_dir_all(&dir)
                .await
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            self.download(bot, item, &path).await?;
        }
        let mut info = item.info.clone();
        let bytes = tokio::fs::read(&path)
            .await
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        info.bytes = bytes.len() as u64;
        Ok(SavedFile {
            text: media::inline_text(&info, &bytes),
            shown: shown(&self.home, &path),
            info,
            path,
        })
    }

    fn too_large(&self) -> String {
        format!(
            "larger than the {} limit",
            media::human_bytes(self.max_bytes)
        )
    }

    /// `getFile` and the download into `path` (through a temporary file, so a file that is
    /// there is whole), retried when the network fails.
    async fn download(&self, bot: &Bot, item: &Media, path: &Path) -> Result<(), String> {
        let partial = path.with_extension("part");
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(500 << attempt)).await;
            }
            let file = match bot.get_file(FileId(item.file_id.clone())).await {
                Ok(file) => file,
                Err(teloxide_core::RequestError::Api(error)) => {
                    return Err(format!("Telegram refused it: {error}"));
                }
                Err(error) => {
                    last = error.to_string();
                    continue;
                }
            };
            if u64::from(file.meta.size) > self.max_bytes {
                return Err(self.too_large());
            }
            let mut out = tokio::fs::File::create(&partial)
                .await
                .map_err(|e| format!("cannot write {}: {e}", partial.display()))?;
            match bot.download_file(&file.path, &mut out).await {
                Ok(()) => {
                    drop(out);
                    return tokio::fs::rename(&partial, path)
                        .await
                        .map_err(|e| format!("cannot write {}: {e}", path.display()));
                }
                Err(error) => last = error.to_string(),
            }
        }
        let _ = tokio::fs::remove_file(&partial).await;
        Err(format!("download failed: {last}"))
    }
}

/// `unique_id` as a file name: Telegram's ids are URL-safe base64, but nothing from outside
/// names a file unchecked.
fn safe_name(unique_id: &str) -> String {
    let name: String = unique_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() { "file".into() } else { name }
}

/// `path` relative to `home` for the note, or whole when it is elsewhere.
fn shown(home: &Path, path: &Path) -> String {
    path.strip_prefix(home)
        .unwrap_or(path)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_ids_are_made_safe_file_names() {
        assert_eq!(safe_name("AgADBAADr6cx"), "AgADBAADr6cx");
        assert_eq!(safe_name("../../etc"), "______etc");
        assert_eq!(safe_name(""), "file");
        assert_eq!(
            shown(Path::new("/h"), Path::new("/h/media/telegram/1/a.jpg")),
            "media/telegram/1/a.jpg"
        );
    }
}
