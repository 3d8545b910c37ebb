#!/usr/bin/env python3
"""The official OpenAI Python client against srpo serve (apps/serve/test/serve.int-spec.ts runs it).

  python3 openai_client_check.py BASE_URL

Prints one JSON object of what the client received; the test asserts on it.
"""
import json
import sys

from openai import OpenAI


def main() -> None:
    client = OpenAI(base_url=sys.argv[1], api_key="not-checked", max_retries=0)
    models = [m.id for m in client.models.list().data]
    params = dict(model="qwen2", messages=[{"role": "user", "content": "count to 3"}], max_tokens=6, seed=11, logprobs=True)
    whole = client.chat.completions.create(**params)
    text, logprobs = "", []
    for chunk in client.chat.completions.create(stream=True, **params):
        for c in chunk.choices:
            text += c.delta.content or ""
            logprobs += [t.logprob for t in (c.logprobs.content if c.logprobs and c.logprobs.content else [])]
    completion = client.completions.create(model="tiny", prompt="^S3|", max_tokens=2, n=3, logprobs=0)
    print(json.dumps({
        "models": models,
        "streamText": text,
        "wholeText": whole.choices[0].message.content,
        "streamLogprobs": logprobs,
        "wholeLogprobs": [t.logprob for t in whole.choices[0].logprobs.content],
        "completionChoices": len(completion.choices),
        "completionTokens": [len(c.logprobs.tokens) for c in completion.choices],
    }))


if __name__ == "__main__":
    main()
