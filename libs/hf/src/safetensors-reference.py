#!/usr/bin/env python3
"""Reference side of safetensors.spec.ts / hf-weights.spec.ts: the real Python `safetensors`
(with torch for bfloat16) writes files for our reader and reads the files our writer made, so
the TypeScript code is checked against the library everyone else uses, not against itself.

  probe                          import check; prints versions as JSON
  write FILE                     writes F32/F16/BF16 tensors with safetensors.torch.save_file;
                                 prints what Python holds: dtype, shape, float32 bits
  read FILE                      loads FILE with safe_open; prints metadata, dtype, shape, the
                                 stored bits, float32 bits, and torch's own float16/bfloat16
                                 rounding of every F32 tensor (to check our narrowing)
  check-dir DIR ORDER_JSON MAX   loads a saved HF directory shard by shard and checks the index
                                 the way transformers writes it; prints {"errors": [...], ...}

Bits are unsigned integers so that NaN payloads and -0 survive JSON.
"""
import json
import os
import sys


def bits32(t):
    import numpy as np
    import torch
    if t.dtype == torch.float16:
        # numpy widens float16 bit-exactly (NaN payloads kept); torch canonicalises NaNs to 0x7fffffff.
        return [int(x) for x in t.contiguous().numpy().astype(np.float32).view(np.uint32).flatten()]
    return [x & 0xFFFFFFFF for x in t.float().contiguous().view(torch.int32).flatten().tolist()]


def bits16(t):
    import torch
    return [x & 0xFFFF for x in t.contiguous().view(torch.int16).flatten().tolist()]


DTYPE_NAMES = {}


def dtype_name(t):
    import torch
    if not DTYPE_NAMES:
        DTYPE_NAMES.update({torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"})
    return DTYPE_NAMES.get(t.dtype, str(t.dtype))


def describe(name, t):
    return {"dtype": dtype_name(t), "shape": list(t.shape), "f32bits": bits32(t)}


def probe():
    import numpy
    import safetensors
    import torch
    print(json.dumps({"safetensors": safetensors.__version__, "numpy": numpy.__version__, "torch": torch.__version__}))


def write(path):
    import torch
    from safetensors.torch import save_file
    every16 = torch.arange(65536, dtype=torch.int32).to(torch.int16)  # wraps: every 16-bit pattern once
    f32_bits = [0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F7FFFFF, 0xFF7FFFFF,
                0x00000001, 0x007FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0x40490FDB]
    tensors = {
        "all.f16": every16.view(torch.float16).reshape(256, 256),
        "all.bf16": every16.view(torch.bfloat16).clone(),
        "edge.f32": torch.tensor(f32_bits, dtype=torch.int64).to(torch.int32).view(torch.float32).reshape(3, 4),
        "scalar.f32": torch.tensor(-2.5, dtype=torch.float32),
        "empty.f16": torch.zeros((0, 3), dtype=torch.float16),
        "normal.bf16": torch.randn(5, 7, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16),
    }
    metadata = {"format": "pt", "written_by": "safetensors-reference.py", "unicode": "\u00fcnicode \u2713"}
    save_file(tensors, path, metadata=metadata)
    print(json.dumps({"metadata": metadata, "tensors": {k: describe(k, v) for k, v in tensors.items()}}))


def read(path):
    import torch
    from safetensors import safe_open
    out = {"tensors": {}}
    with safe_open(path, framework="pt") as f:
        out["metadata"] = f.metadata()
        for name in f.keys():
            t = f.get_tensor(name)
            d = describe(name, t)
            d["stored"] = bits32(t) if t.dtype == torch.float32 else bits16(t)
            if t.dtype == torch.float32:
                d["torch_f16"] = bits16(t.to(torch.float16))
                d["torch_bf16"] = bits16(t.to(torch.bfloat16))
            out["tensors"][name] = d
    print(json.dumps(out))


def check_dir(directory, order_file, max_shard):
    import torch
    from safetensors import safe_open
    errors = []
    state = {}
    index_file = os.path.join(directory, "model.safetensors.index.json")
    with open(index_file, encoding="utf-8") as fh:
        text = fh.read()
    index = json.loads(text)
    if sorted(index.keys()) != ["metadata", "weight_map"]:
        errors.append(f"index keys {sorted(index.keys())}")
    if not isinstance(index.get("metadata", {}).get("total_size"), int):
        errors.append("metadata.total_size is not an int")
    if text != json.dumps(index, indent=2, sort_keys=True) + "\n":
        errors.append("index text differs from json.dumps(index, indent=2, sort_keys=True)")
    shards = sorted(set(index["weight_map"].values()))
    for shard in shards:
        with safe_open(os.path.join(directory, shard), framework="pt") as f:
            if (f.metadata() or {}).get("format") != "pt":
                errors.append(f"{shard}: metadata format is {(f.metadata() or {}).get('format')!r}, transformers wants 'pt'")
            for name in f.keys():
                if index["weight_map"].get(name) != shard:
                    errors.append(f"{shard}: {name} not mapped to this shard")
                state[name] = f.get_tensor(name).clone()
    if set(state) != set(index["weight_map"]):
        errors.append("weight_map names differ from the shards' tensors")
    total = sum(t.numel() * t.element_size() for t in state.values())
    if index["metadata"].get("total_size") != total:
        errors.append(f"total_size {index['metadata'].get('total_size')} != {total}")
    try:
        from transformers.modeling_utils import load_state_dict
        for shard in shards:
            load_state_dict(os.path.join(directory, shard))
        transformers_loaded = True
    except ImportError:
        transformers_loaded = False
    with open(order_file, encoding="utf-8") as fh:
        order = json.load(fh)
    from huggingface_hub import split_torch_state_dict_into_shards
    split = split_torch_state_dict_into_shards({k: state[k] for k in order}, filename_pattern="model{suffix}.safetensors",
                                               max_shard_size=int(max_shard))
    if split.tensor_to_filename != index["weight_map"]:
        errors.append(f"huggingface_hub would shard as {split.filename_to_tensors}")
    values = {k: bits32(v) for k, v in state.items()}
    print(json.dumps({"errors": errors, "shards": shards, "transformers_loaded": transformers_loaded, "values": values,
                      "dtypes": {k: dtype_name(v) for k, v in state.items()}}))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"probe": probe, "write": write, "read": read, "check-dir": check_dir}[cmd](*args)
