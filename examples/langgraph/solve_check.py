"""A two-node LangGraph workflow pointed at `srpo gateway` by its base URL only.

A solver node (a ChatOpenAI with one tool, `add`, bound with `bind_tools`; a ToolNode runs its
calls) answers "what is a + b?"; a checker node (a second ChatOpenAI, no tools) says whether the
answer is right. A rejected answer goes back to the solver with the checker's verdict, at most
`--attempts` times in all.

The episode headers are set once per run, in each ChatOpenAI's `default_headers`. By default both
nodes send the same headers, so the gateway numbers every call of the run as turns of one agent
(`.t1`, `.t2`, ...). With `--per-agent-headers` the solver and the checker name themselves in
`X-SRPO-Role` / `X-SRPO-Agent`. The gateway returns what it recorded in the `x-srpo-output-ids`
response header (`include_response_headers=True` puts it into each message's
`response_metadata`). After the run the episode's transition, consuming every recorded output,
and its outcome are posted to the gateway's /v1/srpo/transitions and /v1/srpo/outcomes.
Nothing of this project is imported.

    python3 examples/langgraph/solve_check.py --gateway http://127.0.0.1:8100/v1 --model actor --episode ep-1 --a 2 --b 3

Prints one JSON line: the episode, the recorded output ids in call order, the node of each call,
the tools each request offered, the last answer and the reward.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.request
from typing import Annotated, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    verdict: str
    attempts: int


def run_episode(args: argparse.Namespace) -> dict:
    base = args.gateway.rstrip("/")
    # Set once per run: every request of these clients carries them.
    episode = {"X-SRPO-Episode": args.episode, "X-SRPO-Step": "0", "X-SRPO-Role": "agent", "X-SRPO-Agent": "solve-check"}

    def chat(name: str) -> ChatOpenAI:
        headers = {**episode, "X-SRPO-Role": name, "X-SRPO-Agent": name} if args.per_agent_headers else episode
        return ChatOpenAI(
            model=args.model,
            base_url=base,
            api_key=args.api_key,
            default_headers=headers,
            max_tokens=args.max_tokens,
            temperature=1.0,
            max_retries=0,
            include_response_headers=True,
        )

    solver_llm = chat("solver").bind_tools([add])
    checker_llm = chat("checker")
    calls: list[dict] = []

    def record(node: str, msg: AIMessage, offered: list[str]) -> None:
        ids = (msg.response_metadata.get("headers") or {}).get("x-srpo-output-ids", "")
        calls.extend({"id": i, "node": node, "tools": offered} for i in ids.split(",") if i)

    def solver(state: State) -> dict:
        msg = solver_llm.invoke([SystemMessage("Use add, then answer with the sum only."), *state["messages"]])
        record("solver", msg, ["add"])
        return {"messages": [msg]}

    def checker(state: State) -> dict:
        answer = state["messages"][-1].content
        msg = checker_llm.invoke(
            [
                SystemMessage("Answer yes or no."),
                HumanMessage(f"Is {answer!r} the sum of {args.a} and {args.b}?"),
            ]
        )
        record("checker", msg, [])
        verdict = str(msg.content).strip().lower()
        feedback = [] if verdict.startswith("yes") else [HumanMessage("The checker rejected that. Answer with the sum only.")]
        return {"verdict": verdict, "attempts": state["attempts"] + 1, "messages": feedback}

    def after_check(state: State) -> str:
        return END if state["verdict"].startswith("yes") or state["attempts"] >= args.attempts else "solver"

    graph = StateGraph(State)
    graph.add_node("solver", solver)
    graph.add_node("tools", ToolNode([add]))
    graph.add_node("checker", checker)
    graph.add_edge(START, "solver")
    # A tool call goes to the tools and back to the solver; an answer goes to the checker.
    graph.add_conditional_edges("solver", tools_condition, {"tools": "tools", END: "checker"})
    graph.add_edge("tools", "solver")
    graph.add_conditional_edges("checker", after_check, {"solver": "solver", END: END})
    final = graph.compile().invoke(
        {"messages": [HumanMessage(f"What is {args.a} + {args.b}?")], "verdict": "", "attempts": 0},
        {"recursion_limit": 20},
    )
    answers = [m for m in final["messages"] if isinstance(m, AIMessage)]
    answer = str(answers[-1].content) if answers else ""
    reward = 1.0 if answer.strip() == str(args.a + args.b) else 0.0

    def post(route: str, body: dict) -> None:
        req = urllib.request.Request(
            f"{base}/srpo/{route}",
            data=json.dumps(body).encode(),
            headers={"content-type": "application/json", "authorization": f"Bearer {args.api_key}"},
        )
        with urllib.request.urlopen(req) as res:
            res.read()

    now = int(time.time() * 1000)
    task = f"add:{args.a}+{args.b}"
    ids = [c["id"] for c in calls]
    # One transition consumes every output of the run: the episode's one decision, rewarded by its outcome.
    post(
        "transitions",
        {
            "transitionId": f"{args.episode}.t0",
            "episodeId": args.episode,
            "step": 0,
            "preStateId": f"{args.episode}:0",
            "taskId": task,
            "position": "solve-check",
            "consumedOutputIds": ids,
            "expectedCardinality": len(ids),
            "workflowKind": "OTHER",
            "groupKey": args.group_key,
            "expectedGroupSize": args.group_size,
            "observationDigest": f"verdict:{final['verdict'][:32].encode('ascii', 'replace').decode() or '-'}",
            "done": True,
            "eventTimeMs": now,
        },
    )
    post(
        "outcomes",
        {
            "episodeId": args.episode,
            "taskId": task,
            "outcomeReward": reward,
            "success": reward == 1.0,
            "verifier": "langgraph-example@1",
            "turns": 1,
            "eventTimeMs": now,
        },
    )
    return {
        "episodeId": args.episode,
        "outputIds": ids,
        "nodes": [c["node"] for c in calls],
        "tools": [c["tools"] for c in calls],
        "answer": answer,
        "reward": reward,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gateway", default=os.environ.get("SRPO_GATEWAY_URL", "http://127.0.0.1:8100/v1"))
    p.add_argument("--api-key", default=os.environ.get("SRPO_AGENT_KEY", "unused"))
    p.add_argument("--model", default=os.environ.get("SRPO_MODEL", "actor"))
    p.add_argument("--episode", default=os.environ.get("SRPO_EPISODE", f"langgraph-{int(time.time() * 1000):x}"))
    p.add_argument("--a", type=int, default=2)
    p.add_argument("--b", type=int, default=3)
    p.add_argument("--group-key", default="langgraph/add")
    p.add_argument("--group-size", type=int, default=1)
    p.add_argument("--attempts", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--per-agent-headers", action="store_true")
    print(json.dumps(run_episode(p.parse_args())))


if __name__ == "__main__":
    main()
