#!/usr/bin/env python3
"""An agent written only with the official OpenAI Python client.

It plays the demo's fixed workflow through srpo gateway, as examples/openai-agent/fixed-agent.ts
does: a solver answers a digit task, a checker accepts or rejects, the gateway records every
completion; the agent posts its transitions and outcomes to /v1/srpo/*.

  python3 examples/openai-agent/fixed_agent.py --gateway http://127.0.0.1:8100/v1 --model actor --tasks 10

Prints one JSON line per task: {"task", "successes", "versions"}.
"""
import argparse
import json
import os
import random
import time

from openai import OpenAI

MODULUS = 4
FORMAT_BONUS = 0.1


def is_digit(c: str) -> bool:
    return len(c) == 1 and c.isdigit() and int(c) < MODULUS


def play_episode(args, api: OpenAI, task_id: str, digit: int, g: int) -> dict:
    episode = f"{task_id}.r{g}"

    def client(step: int, role: str) -> OpenAI:
        headers = {"X-SRPO-Episode": episode, "X-SRPO-Step": str(step), "X-SRPO-Role": role, "X-SRPO-Agent": f"{role}-0"}
        return OpenAI(base_url=args.gateway, api_key=args.api_key, max_retries=2, default_headers=headers)

    solver = client(0, "solver").completions.create(model=args.model, prompt=f"^S{digit}|", max_tokens=1, temperature=args.temperature)
    answer = solver.choices[0].text
    checker = client(1, "checker").completions.create(model=args.model, prompt=f"^C{answer}|", max_tokens=1, temperature=args.temperature)
    verdict = checker.choices[0].text
    correct = answer == str((digit + MODULUS - 1) % MODULUS)
    solver_reward = 1.0 if correct else FORMAT_BONUS if is_digit(answer) else 0.0
    judged = verdict in ("Y", "N")
    checker_reward = (1.0 if (verdict == "Y") == is_digit(answer) else FORMAT_BONUS) if judged else 0.0
    now = int(time.time() * 1000)
    common = {"episodeId": episode, "taskId": f"fixed:{digit}", "workflowKind": "FIXED", "expectedCardinality": 1,
              "expectedGroupSize": args.group_size, "eventTimeMs": now}

    def post(route: str, body: dict) -> None:
        # The client's own request method: same base URL and key, errors raised as APIError.
        api.post(f"/srpo/{route}", body=body, cast_to=object)

    post("transitions", {**common, "transitionId": f"{episode}.t0", "step": 0, "preStateId": f"{episode}:0", "position": "solve",
                         "consumedOutputIds": solver.model_extra["srpo"]["output_ids"], "groupKey": f"{task_id}/solve",
                         "observationDigest": f"answer:{answer}", "reward": solver_reward, "done": False})
    post("transitions", {**common, "transitionId": f"{episode}.t1", "step": 1, "preStateId": f"{episode}:1", "position": "check",
                         "consumedOutputIds": checker.model_extra["srpo"]["output_ids"], "groupKey": f"{task_id}/check",
                         "observationDigest": f"verdict:{verdict}", "reward": checker_reward, "done": True})
    success = correct and verdict == "Y"
    post("outcomes", {"episodeId": episode, "taskId": f"fixed:{digit}", "outcomeReward": 1.0 if success else 0.0, "success": success,
                      "verifier": "fixed-agent-py@1", "turns": 2, "eventTimeMs": now})
    return {"success": success, "version": solver.model_extra["srpo"]["policy_version"]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--gateway", default="http://127.0.0.1:8100/v1")
    p.add_argument("--api-key", default=os.environ.get("SRPO_AGENT_KEY", "unused"))
    p.add_argument("--model", default="actor")
    p.add_argument("--tasks", type=int, default=10)
    p.add_argument("--group-size", type=int, default=16)
    p.add_argument("--temperature", type=float, default=1.5)
    p.add_argument("--run-id", default=f"py{int(time.time())}")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    rng = random.Random(args.seed)
    api = OpenAI(base_url=args.gateway, api_key=args.api_key, max_retries=2)
    for task in range(args.tasks):
        digit = rng.randrange(MODULUS)
        episodes = [play_episode(args, api, f"{args.run_id}-t{task}", digit, g) for g in range(args.group_size)]
        print(json.dumps({"task": task, "successes": sum(e["success"] for e in episodes),
                          "versions": sorted({e["version"] for e in episodes})}), flush=True)


if __name__ == "__main__":
    main()
