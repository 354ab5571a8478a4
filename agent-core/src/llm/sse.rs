//! Incremental Server-Sent Events parsing for streamed model responses.
//!
//! Bytes arrive in arbitrary pieces: an event, a line, even a UTF-8 character can be split
//! across network reads. [`SseParser`] buffers until a blank line ends an event and yields the
//! event's `data` (multi-line data joined with `\n`, comments and other fields ignored), as
//! the SSE specification says. Both `\n` and `\r\n` line endings are accepted.

/// Accumulates bytes and yields complete events' data.
#[derive(Debug, Default)]
pub struct SseParser {
    buffer: Vec<u8>,
    data: Vec<String>,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds a chunk; returns the data of every event the chunk completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<String> {
        self.buffer.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
            let mut line: Vec<u8> = self.buffer.drain(..=end).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8_lossy(&line);
            if line.is_empty() {
                if !self.data.is_empty() {
                    events.push(std::mem::take(&mut self.data).join("\n"));
                }
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                None => (line.as_ref(), ""),
            };
            if field == "data" {
                self.data.push(value.to_owned());
            }
        }
        events
    }

    /// Ends the stream: an event not terminated by a blank line is still delivered.
    pub fn finish(&mut self) -> Option<String> {
        if !self.buffer.is_empty() {
            let rest = std::mem::take(&mut self.buffer);
            let mut events = self.push(&rest);
            events.extend(self.push(b"\n\n"));
            return events.pop();
        }
        (!self.data.is_empty()).then(|| std::mem::take(&mut self.data).join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_anywhere_come_out_whole() {
        let stream =
            "data: {\"a\":1}\n\n: keep-alive\n\ndata: héllo\r\ndata: world\r\n\r\ndata: [DONE]\n\n";
        let bytes = stream.as_bytes();
        for split in 0..bytes.len() {
            let mut parser = SseParser::new();
            let mut events = parser.push(&bytes[..split]);
            events.extend(parser.push(&bytes[split..]));
            assert_eq!(
                events,
                ["{\"a\":1}", "héllo\nworld", "[DONE]"],
                "split at {split}"
            );
        }
    }

    #[test]
    fn other_fields_are_ignored_and_an_unterminated_event_is_kept() {
        let mut parser = SseParser::new();
        assert!(
            parser
                .push(b"event: message\nid: 7\nretry: 10\n")
                .is_empty()
        );
        assert_eq!(parser.push(b"data:x\n\n"), ["x"]);
        assert!(parser.push(b"data: tail").is_empty());
        assert_eq!(parser.finish().as_deref(), Some("tail"));
    }
}
