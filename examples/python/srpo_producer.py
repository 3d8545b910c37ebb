#!/usr/bin/env python3
"""Produce SRPO agent events from Python: outputs, transitions and outcomes on Kafka.

An agent written in any language joins the pipeline by writing three kinds of
events that conform to ``schemas/*.avsc``, with Avro single-object encoding:

    C3 01 | 8-byte little-endian CRC-64-AVRO fingerprint of the schema's
          |   parsing canonical form
          | Avro binary body

The TypeScript materializer resolves the fingerprint to the writer schema, so
no schema registry is needed. Events are keyed by episode id and written with
librdkafka's Java-compatible ``murmur2_random`` partitioner, so every event of
an episode lands in the same partition of the three co-partitioned topics, and
with ``enable.idempotence`` (acks=all, no duplicates from retries).

This example plays a toy *joint* workflow with a random policy: for each task,
G rollouts; in each, N workers answer one digit token each and one transition
consumes all N outputs (an active set of K = N), rewarded immediately with the
share of workers that answered right. The transitions declare ``groupKey`` and
``expectedGroupSize`` = G, so the materializer emits one advantage group per
task as soon as its G sets are complete.

    python3 examples/python/srpo_producer.py --brokers 127.0.0.1:9092 --prefix srpo. --tasks 3

Requirements: ``examples/python/requirements.txt`` (fastavro, confluent-kafka).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import random
import sys
import time
import uuid
from typing import Any, Dict, List, Tuple

import fastavro
from confluent_kafka import Producer
from fastavro.schema import fingerprint, to_parsing_canonical_form

MAGIC = b"\xc3\x01"
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VOCAB_SIZE = 32  # the agents' vocabulary (libs/workflows/src/tokenizer.ts)
DIGIT0 = 2


class EventEncoder:
    """Avro single-object encoding of the SRPO events, from ``schemas/*.avsc``."""

    def __init__(self, schemas_dir: str) -> None:
        self.schemas: Dict[str, Any] = {}
        self.headers: Dict[str, bytes] = {}
        self.fingerprints: Dict[str, str] = {}
        for name in ("AgentOutput", "Transition", "EpisodeOutcome"):
            with open(os.path.join(schemas_dir, f"{name}.avsc"), encoding="utf-8") as f:
                parsed = fastavro.parse_schema(json.load(f))
            fp = fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO")  # hex of the little-endian bytes
            self.schemas[name] = parsed
            self.fingerprints[name] = fp
            self.headers[name] = MAGIC + bytes.fromhex(fp)

    def encode(self, name: str, record: Dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        buf.write(self.headers[name])
        # strict: a field the schema does not declare is an error, not silently dropped.
        fastavro.schemaless_writer(buf, self.schemas[name], record, strict=True)
        return buf.getvalue()


def check_output(o: Dict[str, Any]) -> None:
    """The SDK's domain rules for AgentOutput (libs/events/src/event-validation.ts), so a bad event never leaves."""
    n = len(o["responseTokenIds"])
    if n == 0:
        raise ValueError("AgentOutput.responseTokenIds: is empty")
    if len(o["behaviourLogProbs"]) != n or len(o["lossMask"]) != n:
        raise ValueError("AgentOutput: behaviourLogProbs and lossMask need one entry per response token")
    for i, lp in enumerate(o["behaviourLogProbs"]):
        if not math.isfinite(lp) or lp > 0:
            raise ValueError(f"AgentOutput.behaviourLogProbs[{i}]: must be finite and <= 0, got {lp}")
    if not any(o["lossMask"]):
        raise ValueError("AgentOutput.lossMask: at least one token must be trained on")
    if o["eventTimeMs"] < o["startedAtMs"]:
        raise ValueError("AgentOutput.eventTimeMs: is before startedAtMs")


def check_transition(t: Dict[str, Any]) -> None:
    ids = t["consumedOutputIds"]
    if not ids or len(set(ids)) != len(ids):
        raise ValueError("Transition.consumedOutputIds: must list at least one output, none twice")
    if t["expectedCardinality"] != len(ids):
        raise ValueError("Transition.expectedCardinality: must equal the number of consumed outputs")
    if t["expectedGroupSize"] is not None and t["groupKey"] is None:
        raise ValueError("Transition.expectedGroupSize: is set without a groupKey")


def play_task(task: int, args: argparse.Namespace, rng: random.Random, run_id: str) -> Tuple[List[tuple], List[tuple]]:
    """G rollouts of one joint task: (outputs and transitions, outcomes), each as (topic suffix, key, event type, record)."""
    slots = [rng.randrange(args.modulus) for _ in range(args.workers)]
    instance = f"py-{run_id}-{task}"
    events: List[tuple] = []
    outcomes: List[tuple] = []
    for g in range(args.group_size):
        episode = f"{instance}.r{g}"
        now = int(time.time() * 1000)
        outputs = []
        right = 0
        for i, value in enumerate(slots):
            context = [0, 15, 19 + i, DIGIT0 + value, 1]  # BOS WORK SLOTi digit SEP, as the TS workers see it
            token = rng.randrange(VOCAB_SIZE)  # a random policy: uniform over the vocabulary
            right += int(token == DIGIT0 + (value + 1) % args.modulus)
            out = {
                "outputId": f"{episode}.s0.worker-{i}",
                "episodeId": episode,
                "step": 0,
                "agentId": f"worker-{i}",
                "role": "worker",
                "policyId": args.policy,
                "policyVersion": 0,
                "contextRef": f"py:{instance}:worker-{i}",
                "contextTokenIds": context,
                "responseTokenIds": [token],
                "behaviourLogProbs": [-math.log(VOCAB_SIZE)],
                "lossMask": [True],
                "sampling": {"temperature": 1.0, "topK": 0, "maxNewTokens": 1, "seed": None, "stopTokenIds": []},
                "startedAtMs": now,
                "eventTimeMs": now,
                # fastavro writes every field of the schema, defaults included: ids as sampled.
                "tokenIdOrigin": "sampled",
                # A single-turn output: no parent, nothing to check for drift, no tool call.
                "turn": 0,
                "parentOutputId": None,
                "tokenDrift": None,
                "malformedToolCall": False,
                "subjectId": None,
                # In the clear: sealing needs the store's content keys (docs/erasure.md), which this example does not use.
                "sealed": None,
            }
            check_output(out)
            outputs.append(out)
            events.append(("agent-outputs", episode, "AgentOutput", out))
        transition = {
            "transitionId": f"{episode}.t0",
            "episodeId": episode,
            "step": 0,
            "preStateId": f"{episode}:0",
            "taskId": f"joint:{','.join(map(str, slots))}",
            "position": "work",
            "consumedOutputIds": [o["outputId"] for o in outputs],
            "expectedCardinality": len(outputs),
            "workflowKind": "JOINT",
            "routing": None,
            "groupKey": f"{instance}/work",
            "expectedGroupSize": args.group_size,
            "observationDigest": f"work:{'.'.join(str(o['responseTokenIds'][0]) for o in outputs)}",
            "reward": right / len(outputs),
            "done": True,
            "eventTimeMs": now,
            "rewardSource": None,
            "subjectId": None,
        }
        check_transition(transition)
        events.append(("transitions", episode, "Transition", transition))
        outcomes.append(
            (
                "episode-outcomes",
                episode,
                "EpisodeOutcome",
                {
                    "episodeId": episode,
                    "taskId": transition["taskId"],
                    "outcomeReward": float(right == len(outputs)),
                    "success": right == len(outputs),
                    "verifier": "python-example/joint@1",
                    "verifierDetails": {"workflow": "joint", "workersRight": str(right)},
                    "observationDigests": ["start", transition["observationDigest"]],
                    "turns": 1,
                    "eventTimeMs": now,
                    "rewardSource": "program",
                    "revision": 0,
                    "subjectId": None,
                },
            )
        )
    return events, outcomes


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--brokers", default=os.environ.get("KAFKA_BROKERS", "127.0.0.1:9092"))
    p.add_argument("--prefix", default=os.environ.get("SRPO_TOPIC_PREFIX", "srpo."), help="topic prefix (SRPO_TOPIC_PREFIX)")
    p.add_argument("--tasks", type=int, default=3)
    p.add_argument("--group-size", type=int, default=4, help="rollouts per task: the declared group size G")
    p.add_argument("--workers", type=int, default=2, help="workers per set: K")
    p.add_argument("--modulus", type=int, default=4)
    p.add_argument("--policy", default="python-agents")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--schemas", default=os.path.join(REPO, "schemas"))
    p.add_argument("--print-fingerprints", action="store_true", help="print the schema fingerprints as JSON and exit")
    args = p.parse_args(argv)

    encoder = EventEncoder(args.schemas)
    if args.print_fingerprints:
        print(json.dumps(encoder.fingerprints, sort_keys=True))
        return 0

    producer = Producer(
        {
            "bootstrap.servers": args.brokers,
            "client.id": "srpo-python-example",
            "enable.idempotence": True,
            "acks": "all",
            # Same partition for the same key as kafkajs and the Java client: the raw topics are co-partitioned by episode id.
            "partitioner": "murmur2_random",
            "linger.ms": 5,
        }
    )
    failures: List[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(f"{msg.topic()}: {err}")

    rng = random.Random(args.seed)
    run_id = uuid.uuid4().hex[:8]
    counts: Dict[str, int] = {}
    def send(batch: List[tuple]) -> None:
        for suffix, key, event_type, record in batch:
            producer.produce(args.prefix + suffix, key=key.encode("utf-8"), value=encoder.encode(event_type, record), on_delivery=delivered)
            counts[event_type] = counts.get(event_type, 0) + 1
            producer.poll(0)
        producer.flush(30)

    for task in range(args.tasks):
        body, outcomes = play_task(task, args, rng, run_id)
        # Outcomes only after the outputs and transitions are acknowledged. These episodes have one
        # transition each, so any arrival order is fine; in multi-step episodes an outcome that the
        # materializer reads before a later transition closes the episode early (the TypeScript agents
        # therefore wait until the materializer has consumed the transitions; see docs/demo.md).
        send(body)
        send(outcomes)
    left = producer.flush(30)
    if failures or left:
        print(f"delivery failed: {failures[:5]} ({left} undelivered)", file=sys.stderr)
        return 1
    print(json.dumps({"produced": counts, "runId": run_id, "fingerprints": encoder.fingerprints}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
