//! The OpenAI-compatible API through a client library nobody here wrote: the `async-openai`
//! crate, as a Rust user of Iris would call it — a whole answer with usage, a streamed answer
//! with its usage chunk, a server-side conversation through a custom header, and the model list.

#[path = "common/daemon.rs"]
mod daemon_kit;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{
    ChatCompletionRequestUserMessageArgs, ChatCompletionStreamOptions, CreateChatCompletionRequest,
    CreateChatCompletionRequestArgs,
};
use daemon_kit::{API_KEY, daemon};
use futures_util::StreamExt;
use testkit::Reply;
use testkit::openai::FakeOpenAi;

fn request(text: &str, stream: bool) -> CreateChatCompletionRequest {
    let message = ChatCompletionRequestUserMessageArgs::default()
        .content(text)
        .build()
        .expect("message");
    let mut args = CreateChatCompletionRequestArgs::default();
    args.model("iris").messages([message.into()]);
    if stream {
        args.stream(true)
            .stream_options(ChatCompletionStreamOptions {
                include_usage: Some(true),
                include_obfuscation: None,
            });
    }
    args.build().expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_openai_talks_to_iris() {
    let fake = FakeOpenAi::start([
        Reply::text("Whole answer.").usage(30, 3),
        Reply::text("Streamed in several pieces.")
            .chunks(3)
            .usage(50, 6),
        Reply::echo(),
    ])
    .await
    .expect("fake");
    let d = daemon(&fake, "[api]\nenabled = true\nkey_env = \"API_KEY\"\n").await;
    let config = OpenAIConfig::new()
        .with_api_base(format!("{}/v1", d.base))
        .with_api_key(API_KEY)
        .with_header("x-iris-conversation", "rusty")
        .expect("header");
    let client = Client::with_config(config);

    let whole = client
        .chat()
        .create(request("hi", false))
        .await
        .expect("answer");
    assert_eq!(
        whole.choices[0].message.content.as_deref(),
        Some("Whole answer.")
    );
    let usage = whole.usage.expect("usage");
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens
        ),
        (30, 3, 33)
    );

    let mut stream = client
        .chat()
        .create_stream(request("again", true))
        .await
        .expect("stream");
    let (mut text, mut pieces, mut streamed_usage) = (String::new(), 0, None);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.expect("chunk");
        if let Some(delta) = chunk.choices.first().and_then(|c| c.delta.content.clone()) {
            if !delta.is_empty() {
                pieces += 1;
            }
            text.push_str(&delta);
        }
        if let Some(usage) = chunk.usage {
            streamed_usage = Some(usage.completion_tokens);
        }
    }
    assert_eq!(text, "Streamed in several pieces.");
    assert!(pieces >= 3, "{pieces}");
    assert_eq!(streamed_usage, Some(6));

    // The same conversation (header): the third request carries the earlier turns.
    let third = client
        .chat()
        .create(request("third", false))
        .await
        .expect("answer");
    assert_eq!(
        third.choices[0].message.content.as_deref(),
        Some("echo: hi | again | third")
    );

    let models = client.models().list().await.expect("models");
    assert_eq!(models.data[0].id, "main");
}
