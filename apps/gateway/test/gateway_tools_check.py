#!/usr/bin/env python3
"""The official OpenAI Python client sends function tools through srpo gateway (apps/gateway/test/gateway.int-spec.ts runs it).

  python3 gateway_tools_check.py BASE_URL API_KEY MODEL DIR REFUSING_MODEL

Sends a chat with tools to MODEL, once whole and once streamed (episode ep-tools, steps 0 and 1),
then the same to REFUSING_MODEL, whose chat template does not render tools. Prints the recorded
output ids, the status and param of the refusal, and transformers' own prompt ids for the
request (`apply_chat_template(messages, tools=...)` on DIR, then encoded as a chat prompt is).
"""
import json
import sys

from openai import BadRequestError, OpenAI
from transformers import AutoTokenizer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Adds two numbers.",
            "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]},
        },
    }
]
MESSAGES = [{"role": "user", "content": "add 1 and 2"}]


def main() -> None:
    base_url, key, model, model_dir, refusing = sys.argv[1:6]
    headers = {"X-SRPO-Episode": "ep-tools", "X-SRPO-Role": "solver", "X-SRPO-Agent": "solver-py"}
    client = OpenAI(base_url=base_url, api_key=key, max_retries=0)
    chat = client.chat.completions.create(
        model=model, messages=MESSAGES, tools=TOOLS, tool_choice="auto", max_tokens=4, seed=5,
        extra_headers={**headers, "X-SRPO-Step": "0"},
    )
    streamed = []
    for chunk in client.chat.completions.create(
        model=model, messages=MESSAGES, tools=TOOLS, max_tokens=4, seed=6, stream=True,
        extra_headers={**headers, "X-SRPO-Step": "1"},
    ):
        extra = (chunk.model_extra or {}).get("srpo")
        if extra:
            streamed = extra["output_ids"]
    try:
        client.chat.completions.create(
            model=refusing, messages=MESSAGES, tools=TOOLS, max_tokens=4,
            extra_headers={**headers, "X-SRPO-Episode": "ep-tools-refused", "X-SRPO-Step": "0"},
        )
        refusal = None
    except BadRequestError as e:
        refusal = {"status": e.status_code, "param": (e.body or {}).get("param")}
    tok = AutoTokenizer.from_pretrained(model_dir)
    rendered = tok.apply_chat_template(MESSAGES, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    reference = tok(rendered, add_special_tokens=False)["input_ids"]
    print(json.dumps({
        "outputIds": (chat.model_extra or {})["srpo"]["output_ids"],
        "finishReason": chat.choices[0].finish_reason,
        "streamed": streamed,
        "refusal": refusal,
        "referencePromptIds": reference,
    }))


if __name__ == "__main__":
    main()
