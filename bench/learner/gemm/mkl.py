"""PyTorch's (MKL's) sgemm on the same shapes as harness.cc, one thread by default (run.sh)."""
import sys
import time

import torch

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
shapes=[(2048,384,128,0,0),(2048,128,128,0,0),(2048,512,128,0,0),(2048,128,512,0,0),(2048,64,128,0,1),(2048,128,384,0,1),(2048,128,512,0,1),(2048,512,128,0,1),(128,384,2048,1,0),(128,512,2048,1,0),(512,128,2048,1,0),(128,128,2048,1,0)]
tot=0
for m,n,k,ta,tb in shapes:
    a=torch.randn(k,m).t() if ta else torch.randn(m,k)
    b=torch.randn(n,k).t() if tb else torch.randn(k,n)
    for _ in range(5): torch.mm(a,b)
    best=1e9
    for _ in range(5):
        t=time.perf_counter()
        for _ in range(10): torch.mm(a,b)
        best=min(best,(time.perf_counter()-t)/10)
    tot+=best
    print(f"{m:5d} {n:5d} {k:5d} ta{ta} tb{tb} mkl {best*1e6:8.1f} us {2*m*n*k/best/1e9:6.1f} GF/s")
print(f"total {tot*1e6:.1f} us")
