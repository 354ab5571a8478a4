//! Files users send (photos, documents, voice and audio, video), platform-neutral: how a saved
//! file is described in the message text the store keeps and every model reads, and which files
//! a model that sees images gets as images.
//!
//! The text note is what stays: image bytes never enter the store (DESIGN.md §4), so after its
//! turn an image is known to the conversation by its note (kind, size, where it was saved). A
//! small text document is put into the message whole, since no tool could read it later.

use std::path::PathBuf;

/// What kind of file a user sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaKind {
    Photo,
    Document,
    Voice,
    Audio,
    Video,
}

impl MediaKind {
    fn word(self) -> &'static str {
        match self {
            Self::Photo => "photo",
            Self::Document => "document",
            Self::Voice => "voice message",
            Self::Audio => "audio",
            Self::Video => "video",
        }
    }
}

/// What the platform said about a file, before or without downloading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    pub kind: MediaKind,
    /// `image/jpeg`, `application/pdf`…; guessed from the kind when the platform gave none.
    pub media_type: String,
    /// Bytes, as the platform reported them (0 when unknown).
    pub bytes: u64,
    /// The file name the user's client gave, if any.
    pub name: Option<String>,
    pub duration_secs: Option<u32>,
    /// Width × height, for photos and videos.
    pub dimensions: Option<(u32, u32)>,
}

/// A file that was downloaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedFile {
    pub info: FileInfo,
    /// Where it is on disk.
    pub path: PathBuf,
    /// The path shown in the note (relative to the data directory).
    pub shown: String,
    /// The file's text, when it is a small text document (see [`inline_text`]).
    pub text: Option<String>,
}

/// A file that could not be downloaded, and why (shown to the model in the note).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingFile {
    pub info: FileInfo,
    pub reason: String,
}

/// Image types the model APIs take inline.
pub const MODEL_IMAGE_TYPES: &[&str] = &["image/jpeg", "image/png", "image/gif", "image/webp"];
/// The largest image sent to a model (Anthropic's limit per image).
pub const MAX_MODEL_IMAGE_BYTES: u64 = 5 * 1024 * 1024;
/// The largest text document put into the message whole.
pub const MAX_INLINE_TEXT_BYTES: usize = 32 * 1024;

impl SavedFile {
    /// Whether a model that sees images should get this file as one.
    pub fn is_model_image(&self) -> bool {
        MODEL_IMAGE_TYPES.contains(&self.info.media_type.as_str())
            && self.info.bytes <= MAX_MODEL_IMAGE_BYTES
    }
}

/// The note that stands for a saved file in the message text, with the file's text after it
/// when it has some.
pub fn note(file: &SavedFile) -> String {
    let mut out = format!(
        "[{}: {}]",
        describe(&file.info),
        file.shown.replace(['[', ']'], "_")
    );
    if let Some(text) = &file.text {
        out.push_str("\n```\n");
        out.push_str(text.trim_end());
        out.push_str("\n```");
    }
    out
}

/// The note for a file that could not be downloaded.
pub fn missing_note(file: &MissingFile) -> String {
    format!(
        "[{}, not downloaded: {}]",
        describe(&file.info),
        file.reason
    )
}

/// `photo 1280×720, 84 KB`, `voice message 0:07, audio/ogg, 12 KB`, `document "a.pdf",
/// application/pdf, 1.2 MB`.
fn describe(info: &FileInfo) -> String {
    let mut out = info.kind.word().to_owned();
    if let Some(name) = &info.name {
        out.push_str(&format!(" \"{}\"", name.replace(['"', '[', ']'], "_")));
    }
    let mut details = Vec::new();
    if let Some((w, h)) = info.dimensions {
        details.push(format!("{w}×{h}"));
    }
    if let Some(secs) = info.duration_secs {
        details.push(format!("{}:{:02}", secs / 60, secs % 60));
    }
    if info.kind != MediaKind::Photo {
        details.push(info.media_type.clone());
    }
    if info.bytes > 0 {
        details.push(human_bytes(info.bytes));
    }
    if !details.is_empty() {
        out.push(' ');
        out.push_str(&details.join(", "));
    }
    out
}

/// `812 B`, `84 KB`, `1.2 MB`.
pub fn human_bytes(bytes: u64) -> String {
    const KB: u64 = 1024;
    const MB: u64 = 1024 * 1024;
    match bytes {
        b if b < KB => format!("{b} B"),
        b if b < MB => format!("{} KB", b.div_ceil(KB)),
        b => format!("{:.1} MB", b as f64 / MB as f64),
    }
}

/// The text of a document worth putting in the message: a text type (or a name with a text
/// extension), at most [`MAX_INLINE_TEXT_BYTES`], valid UTF-8.
pub fn inline_text(info: &FileInfo, bytes: &[u8]) -> Option<String> {
    if info.kind != MediaKind::Document || bytes.len() > MAX_INLINE_TEXT_BYTES {
        return None;
    }
    const TEXT_TYPES: &[&str] = &[
        "application/json",
        "application/xml",
        "application/x-yaml",
        "application/toml",
        "application/x-sh",
        "application/javascript",
    ];
    const TEXT_EXTENSIONS: &[&str] = &[
        "txt", "md", "csv", "tsv", "json", "yaml", "yml", "toml", "xml", "log", "py", "rs", "js",
        "ts", "go", "java", "c", "h", "cpp", "sh", "sql", "html", "css", "ini", "cfg",
    ];
    let by_type =
        info.media_type.starts_with("text/") || TEXT_TYPES.contains(&info.media_type.as_str());
    let by_name = info
        .name
        .as_deref()
        .and_then(|n| n.rsplit_once('.'))
        .is_some_and(|(_, ext)| TEXT_EXTENSIONS.contains(&ext.to_ascii_lowercase().as_str()));
    if !(by_type || by_name) {
        return None;
    }
    String::from_utf8(bytes.to_vec()).ok()
}

/// Writes `bytes` to `path` whole or not at all: through a temporary file, flushed and synced
/// before it is renamed into place.
pub async fn write_whole(path: &std::path::Path, bytes: &[u8]) -> Result<(), String> {
    use tokio::io::AsyncWriteExt as _;
    let partial = path.with_extension("part");
    let written = async {
        let mut out = tokio::fs::File::create(&partial).await?;
        out.write_all(bytes).await?;
        out.flush().await?;
        out.sync_all().await?;
        tokio::fs::rename(&partial, path).await
    }
    .await;
    if let Err(error) = written {
        let _ = tokio::fs::remove_file(&partial).await;
        return Err(format!("cannot write {}: {error}", path.display()));
    }
    Ok(())
}

/// A file extension for `info`: the name's own when it has a short one, else one for the type.
pub fn extension(info: &FileInfo) -> String {
    if let Some((_, ext)) = info.name.as_deref().and_then(|n| n.rsplit_once('.'))
        && (1..=8).contains(&ext.len())
        && ext.chars().all(|c| c.is_ascii_alphanumeric())
    {
        return ext.to_ascii_lowercase();
    }
    match info.media_type.as_str() {
        "image/jpeg" => "jpg",
        "image/png" => "png",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "audio/ogg" => "ogg",
        "audio/mpeg" => "mp3",
        "audio/mp4" => "m4a",
        "video/mp4" => "mp4",
        "application/pdf" => "pdf",
        "text/plain" => "txt",
        _ => "bin",
    }
    .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(kind: MediaKind, media_type: &str, name: Option<&str>) -> FileInfo {
        FileInfo {
            kind,
            media_type: media_type.into(),
            bytes: 86_000,
            name: name.map(str::to_owned),
            duration_secs: None,
            dimensions: None,
        }
    }

    #[test]
    fn notes_say_what_the_file_is_and_where_it_went() {
        let photo = SavedFile {
            info: FileInfo {
                dimensions: Some((1280, 720)),
                ..info(MediaKind::Photo, "image/jpeg", None)
            },
            path: "/data/media/x.jpg".into(),
            shown: "media/telegram/1/5-x.jpg".into(),
            text: None,
        };
        assert_eq!(
            note(&photo),
            "[photo 1280×720, 84 KB: media/telegram/1/5-x.jpg]"
        );
        assert!(photo.is_model_image());
        let voice = MissingFile {
            info: FileInfo {
                duration_secs: Some(67),
                ..info(MediaKind::Voice, "audio/ogg", None)
            },
            reason: "larger than the 20 MB limit".into(),
        };
        assert_eq!(
            missing_note(&voice),
            "[voice message 1:07, audio/ogg, 84 KB, not downloaded: larger than the 20 MB limit]"
        );
        let doc = SavedFile {
            text: Some("a,b\n1,2\n".into()),
            ..photo.clone()
        };
        assert!(note(&doc).ends_with("]\n```\na,b\n1,2\n```"));
    }

    #[test]
    fn only_small_utf8_text_documents_are_inlined() {
        let csv = info(
            MediaKind::Document,
            "application/octet-stream",
            Some("t.CSV"),
        );
        assert_eq!(inline_text(&csv, b"a,b"), Some("a,b".into()));
        let txt = info(MediaKind::Document, "text/plain", None);
        assert_eq!(inline_text(&txt, &[0xff, 0xfe]), None, "not UTF-8");
        assert_eq!(inline_text(&txt, &vec![b'a'; 40_000]), None, "too big");
        let pdf = info(MediaKind::Document, "application/pdf", Some("r.pdf"));
        assert_eq!(inline_text(&pdf, b"%PDF"), None);
        assert_eq!(extension(&pdf), "pdf");
        assert_eq!(
            extension(&info(MediaKind::Photo, "image/jpeg", None)),
            "jpg"
        );
        assert_eq!(
            extension(&info(MediaKind::Document, "x/y", Some("../../etc/passwd"))),
            "bin",
            "a name is never a path"
        );
    }
}
