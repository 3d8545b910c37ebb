#!/usr/bin/env python3
"""The official OpenAI Python client through srpo gateway (apps/gateway/test/gateway.int-spec.ts runs it).

  python3 gateway_client_check.py BASE_URL API_KEY

Prints the output ids the gateway says it recorded, for a chat completion with n = 3 and a
streamed one; the episode fields ride in the X-SRPO-* headers.
"""
import json
import sys

from openai import OpenAI


def main() -> None:
    base_url, key = sys.argv[1], sys.argv[2]
    headers = {"X-SRPO-Episode": "ep-py", "X-SRPO-Role": "solver", "X-SRPO-Agent": "solver-py"}
    client = OpenAI(base_url=base_url, api_key=key, max_retries=0)
    chat = client.chat.completions.create(
        model="qwen2", messages=[{"role": "user", "content": "hi"}], n=3, max_tokens=4, seed=2,
        extra_headers={**headers, "X-SRPO-Step": "0"},
    )
    streamed, text = [], ""
    for chunk in client.chat.completions.create(
        model="qwen2", messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True,
        extra_headers={**headers, "X-SRPO-Step": "1"},
    ):
        for c in chunk.choices:
            text += c.delta.content or ""
        extra = (chunk.model_extra or {}).get("srpo")
        if extra:
            streamed = extra["output_ids"]
    print(json.dumps({"outputIds": (chat.model_extra or {})["srpo"]["output_ids"], "streamed": streamed, "text": text}))


if __name__ == "__main__":
    main()
