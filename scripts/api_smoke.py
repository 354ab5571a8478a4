"""The official `openai` package against Iris's OpenAI-compatible API (see api-smoke.sh)."""

import sys

import openai

base_url, key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=120)
conversation = {"X-Iris-Conversation": "python-smoke"}

models = client.models.list()
assert [m.id for m in models.data] == ["smollm2"], models

raw = client.chat.completions.with_raw_response.create(
    model="smollm2",
    messages=[{"role": "user", "content": "Say hello in one short sentence."}],
    extra_headers=conversation,
)
session = raw.headers.get("x-iris-session-id", "")
whole = raw.parse()
text = whole.choices[0].message.content or ""
assert text.strip(), whole
assert whole.usage is not None and whole.usage.prompt_tokens > 0, whole.usage
assert len(session) == 22, session

stream = client.chat.completions.create(
    model="smollm2",
    messages=[{"role": "user", "content": "Now say goodbye."}],
    stream=True,
    stream_options={"include_usage": True},
    extra_headers=conversation,
)
streamed, pieces, usage = "", 0, None
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        streamed += chunk.choices[0].delta.content
        pieces += 1
    if chunk.usage:
        usage = chunk.usage
assert streamed.strip() and pieces >= 1, streamed
assert usage is not None and usage.completion_tokens > 0, usage

try:
    openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0).models.list()
    raise AssertionError("a wrong key was accepted")
except openai.AuthenticationError:
    pass

print(f"api smoke: ok (openai {openai.__version__}; session {session}; "
      f"{len(text)} + {len(streamed)} chars in {pieces} streamed pieces)")
