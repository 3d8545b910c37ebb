#!/usr/bin/env python3
"""The official OpenAI Python client asks for a tool call through srpo gateway in front of an
upstream answering in vLLM's format (apps/gateway/test/gateway-vllm-tools.int-spec.ts runs it).

  python3 gateway_vllm_tools_check.py BASE_URL

Once whole (step 0) and once streamed (step 1), episode ep-vllm-tools. Prints the calls the client
got and the recorded output ids.
"""
import json
import sys

from openai import OpenAI

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}}]
MESSAGES = [{"role": "user", "content": "add 1 and 2"}]


def main() -> None:
    client = OpenAI(base_url=sys.argv[1], api_key="unused", max_retries=0)
    headers = {"X-SRPO-Episode": "ep-vllm-tools", "X-SRPO-Role": "solver", "X-SRPO-Agent": "py"}
    whole = client.chat.completions.create(model="actor", messages=MESSAGES, tools=TOOLS, extra_headers={**headers, "X-SRPO-Step": "0"})
    calls = {}
    streamed_ids = []
    finish = None
    for chunk in client.chat.completions.create(
        model="actor", messages=MESSAGES, tools=TOOLS, stream=True, extra_headers={**headers, "X-SRPO-Step": "1"}
    ):
        extra = (chunk.model_extra or {}).get("srpo")
        if extra:
            streamed_ids = extra["output_ids"]
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for tc in choice.delta.tool_calls or []:
                entry = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                entry["name"] += (tc.function.name or "") if tc.function else ""
                entry["arguments"] += (tc.function.arguments or "") if tc.function else ""
    message = whole.choices[0].message
    print(json.dumps({
        "whole": {
            "finish": whole.choices[0].finish_reason,
            "content": message.content,
            "calls": [{"name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls or []],
            "outputIds": (whole.model_extra or {})["srpo"]["output_ids"],
        },
        "streamed": {"finish": finish, "calls": [calls[k] for k in sorted(calls)], "outputIds": streamed_ids},
    }))


if __name__ == "__main__":
    main()
