#!/usr/bin/env python3
"""PyTorch's side of bench/learner/hf/gemm.ts: the HF bench's MLP GEMM (2048x512 by 512x1408) and
its two backward products, float32, on 2 threads. Prints one line per product."""
import torch, time
torch.set_num_threads(2)
M,K,N,it=2048,512,1408,50
x=torch.randn(M,K); w=torch.randn(N,K); dy=torch.randn(M,N)
def t(label,f):
    for _ in range(5): f()
    t0=time.perf_counter()
    for _ in range(it): f()
    ms=(time.perf_counter()-t0)/it*1000
    print(f"{label}: {ms:.2f} ms, {2*M*K*N/(ms*1e6):.1f} GFLOP/s")
t('torch x @ w.T (F.linear)', lambda: torch.nn.functional.linear(x,w))
t('torch dy.T @ x', lambda: dy.t()@x)
t('torch dy @ w', lambda: dy@w)
