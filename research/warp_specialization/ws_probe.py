"""Does Triton 3.6's Hopper warp specialization speed up a plain attention forward?

A minimal non-causal forward (host tensor descriptors, no masks) with `warp_specialize=True` on
4 warps (which Triton turns into a producer and two consumer warpgroups) or without it on 8 warps,
against ours and cuDNN. One implementation per process, so that a hang costs one timeout:
    python ws_probe.py OUT_DIR B,N,H,d IMPL     IMPL: ours | cudnn | mini_{ws4|plain8}_{BLOCK_N}_{stages}
appends a JSON line to OUT_DIR/ws_probe.jsonl (`ws_drive.sh` runs the grid).
"""
import json, sys
import torch, triton, triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
sys.path.insert(0, '.')  # run from the repository root
from kernels import flash_attn_func

@triton.jit
def fwd(DQ, DK, DV, O, N, qk_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
        WS: tl.constexpr, EARLY_EXIT: tl.constexpr = False):
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    start_m = pid * BLOCK_M
    if EARLY_EXIT:  # as our kernels leave programs past the sequence's end (ws_compile.py only)
        if start_m >= N:
            return
    q = DQ.load([bh, start_m, 0]).reshape(BLOCK_M, D)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for start_n in tl.range(0, N, BLOCK_N, warp_specialize=WS):
        k = DK.load([bh, start_n, 0]).reshape(BLOCK_N, D)
        v = DV.load([bh, start_n, 0]).reshape(BLOCK_N, D)
        qk = tl.dot(q, tl.trans(k))
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.bfloat16), v)
        m_i = m_new
    out = acc / l_i[:, None]
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    tl.store(O + bh * N * D + offs_m[:, None] * D + offs_d[None, :], out.to(tl.bfloat16))

def mini(q, k, v, bm, bn, warps, stages, ws):
    B, N, H, d = q.shape
    qt, kt, vt = (x.transpose(1, 2).reshape(B * H, N, d).contiguous() for x in (q, k, v))
    o = torch.empty_like(qt)
    dq = TensorDescriptor.from_tensor(qt, [1, bm, d])
    dk = TensorDescriptor.from_tensor(kt, [1, bn, d])
    dv = TensorDescriptor.from_tensor(vt, [1, bn, d])
    scale = d ** -0.5 * 1.4426950408889634
    grid = (N // bm, B * H)
    def run():
        fwd[grid](dq, dk, dv, o, N, scale, BLOCK_M=bm, BLOCK_N=bn, D=d, WS=ws, num_warps=warps, num_stages=stages)
        return o
    return run, lambda: o.reshape(B, H, N, d).transpose(1, 2)

def main(out_dir, shape, impl):
    torch.manual_seed(0)
    B, N, H, d = shape
    q, k, v = (torch.randn(B, N, H, d, device='cuda', dtype=torch.bfloat16) for _ in range(3))
    flops = 4 * B * H * N * N * d
    row = dict(shape=shape, impl=impl)
    if impl == 'ours':
        f = lambda: flash_attn_func(q, k, v)
    elif impl == 'cudnn':
        def f():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    else:
        _, kind, bn, stages = impl.split('_')
        ws = kind == 'ws4'
        f, get = mini(q, k, v, 128, int(bn), 4 if ws else 8, int(stages), ws)
        f(); torch.cuda.synchronize()
        ref = flash_attn_func(q, k, v).float()
        row['rel_err_vs_ours'] = ((get().float() - ref).norm() / ref.norm()).item()
    f(); torch.cuda.synchronize()
    ts = [triton.testing.do_bench(f, warmup=25, rep=200) for _ in range(3)]
    row['ms'] = sorted(ts)[1]
    row['tflops'] = flops / row['ms'] / 1e9
    print(json.dumps(row), flush=True)
    with open(f"{out_dir}/ws_probe.jsonl", "a") as fh:
        fh.write(json.dumps(row) + "\n")

if __name__ == '__main__':
    main(sys.argv[1], [int(x) for x in sys.argv[2].split(',')], sys.argv[3])
