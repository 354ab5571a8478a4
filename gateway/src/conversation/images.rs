//! The images saved with an inbox row, read for the model when the row's turn runs. The inbox
//! keeps paths, never image bytes; a file that went missing is logged and left out (its note
//! in the text still says what it was).

use agent_core::llm::ImagePart;
use base64::Engine as _;

use super::ImageFile;

/// The images of an inbox row's payload (`images`), base64-encoded for the model.
pub async fn load(payload: &serde_json::Value) -> Vec<ImagePart> {
    let files: Vec<ImageFile> = payload
        .get("images")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    let mut images = Vec::with_capacity(files.len());
    for file in files {
        match tokio::fs::read(&file.path).await {
            Ok(bytes) => images.push(ImagePart {
                media_type: file.media_type,
                data: base64::engine::general_purpose::STANDARD.encode(bytes),
            }),
            Err(error) => {
                tracing::warn!(path = %file.path.display(), %error, "an image sent with a message cannot be read; the model gets its note only");
            }
        }
    }
    images
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn images_are_read_and_missing_ones_left_out() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("a.png");
        std::fs::write(&path, b"\x89PNG").expect("write");
        let payload = serde_json::json!({"images": [
            {"path": path, "media_type": "image/png"},
            {"path": dir.path().join("gone.jpg"), "media_type": "image/jpeg"},
        ]});
        let images = load(&payload).await;
        assert_eq!(
            images,
            [ImagePart {
                media_type: "image/png".into(),
                data: "iVBORw==".into()
            }]
        );
        assert!(load(&serde_json::json!({"text": "hi"})).await.is_empty());
    }
}
