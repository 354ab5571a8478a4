//! Files users send, downloaded (by the platform's [`Platform::fetch`]) into
//! `<data dir>/media/<platform>/<chat>/` before the message is stored, so what the inbox holds
//! is complete when the platform is told it is stored (and a turn resumed after a crash still
//! finds its files). Only messages from users who may talk to the bot get here: a stranger's
//! file is never fetched.
//!
//! Each file becomes a note in the message text ([`adapters::media::note`]); photos (and
//! image documents) are also handed to the conversation as images for a model that sees them.
//! A file over the size limit, or one Telegram would not give, is noted as not downloaded —
//! the message still runs.

use std::path::{Path, PathBuf};

use adapters::media::{self, MissingFile, SavedFile};
use adapters::platform::{FileRef, InboundMessage, Platform};

use crate::conversation::ImageFile;

/// Where one platform's files go.
pub(super) struct Files {
    /// The data directory (`$IRIS_HOME`); notes show paths relative to it.
    home: PathBuf,
    /// `media/<platform>` under it.
    dir: PathBuf,
}

/// A message's text with its files noted, and the images among them.
pub(super) struct Fetched {
    pub text: String,
    pub images: Vec<ImageFile>,
}

impl Files {
    pub fn new(home: &Path, platform: &str) -> Self {
        Self {
            home: home.to_owned(),
            dir: home.join("media").join(platform),
        }
    }

    /// Downloads every file of `message` (one already on disk is not fetched again).
    pub async fn fetch(&self, platform: &dyn Platform, message: &InboundMessage) -> Fetched {
        let mut notes = Vec::new();
        let mut images = Vec::new();
        for item in &message.files {
            match self.fetch_one(platform, &message.chat, item).await {
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
                    tracing::warn!(chat = %message.chat, file = %item.unique_id, %reason, "file not downloaded");
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

    async fn fetch_one(
        &self,
        platform: &dyn Platform,
        chat: &str,
        item: &FileRef,
    ) -> Result<SavedFile, String> {
        let dir = self.dir.join(safe_name(chat));
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
            platform.fetch(item, &path).await?;
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
}

/// An id from outside as a file name: platform ids are digits or URL-safe base64, but nothing
/// from outside names a file unchecked.
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
