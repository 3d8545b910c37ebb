#!/usr/bin/env python3
"""Runs the reference scripts of this directory in one process, one job per input line.

  python3 scripts/reference/worker.py

Importing torch, transformers and peft takes about 5 s of CPU per process; a test that calls
the reference a dozen times (test/hf-lora.int-spec.ts) pays that once here instead of once per
call. Each job is a JSON line on stdin, {"script": "score_peft.py", "args": [...]}, and runs the
script as `python3 scripts/reference/SCRIPT ARGS...` would (runpy, run_name "__main__",
sys.argv set), with torch's process-wide settings that the scripts change (threads,
deterministic algorithms) put back to their start values first, so no job sees another's.
The answer is one JSON line on stdout: {"status": 0, "stdout": ...} or {"status": 1,
"stdout": ..., "stderr": ...} (an exception's traceback, or sys.exit's message). The first line
written, before any job, is {"ready": true, "versions": {...}} once the imports succeeded.
"""
import contextlib
import io
import json
import os
import runpy
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# Answers go to the original stdout; anything else written to file descriptor 1 (a library
# printing, native code included) goes to stderr, so it cannot break the one-line answers.
REPLY = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
os.dup2(2, 1)
sys.stdout = os.fdopen(1, "w", buffering=1, encoding="utf-8", closefd=False)

import peft  # noqa: E402
import safetensors  # noqa: E402,F401
import torch  # noqa: E402
import transformers  # noqa: E402

THREADS = torch.get_num_threads()
DETERMINISTIC = torch.are_deterministic_algorithms_enabled()


def run(script: str, args: list) -> dict:
    path = os.path.join(HERE, os.path.basename(script))
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(DETERMINISTIC)
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = [path, *[str(a) for a in args]]
    status = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            status = 1
            if not isinstance(e.code, int):
                err.write(f"{e.code}\n")
    except BaseException:  # noqa: B036 - every failure is the job's answer, not the worker's end
        status = 1
        err.write(traceback.format_exc())
    finally:
        sys.argv = argv
    return {"status": status, "stdout": out.getvalue(), "stderr": err.getvalue()}


def main() -> None:
    reply = REPLY
    versions = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__}
    reply.write(json.dumps({"ready": True, "versions": versions}) + "\n")
    reply.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        reply.write(json.dumps(run(job["script"], job.get("args", []))) + "\n")
        reply.flush()


if __name__ == "__main__":
    main()
