#!/usr/bin/env python3
"""Writes synthetic allocation traces (tools/traces/README.md format) from a seed, for checking
that allocator policies are not tuned to the two shared traces.

  scripts/gen_traces.py OUT_DIR [--seeds 1,2,3]

Families (one file each per seed, named FAMILY_sSEED.trace):
  random_small   log-uniform 256 B .. 1 MiB, live set bounded near 1 GiB
  random_large   log-uniform 1 KiB .. 64 MiB, live set bounded near 4 GiB (random_mixed's family)
  random_wide    log-uniform 256 B .. 256 MiB, live set bounded near 6 GiB
  random_mid     log-uniform 512 KiB .. 8 MiB, live set bounded near 1 GiB (a granule's worth
                 or a few: where tail sharing's partial granules weigh the most)
  random_16m     log-uniform 1 KiB .. 16 MiB, live set bounded near 1 GiB (random_mixed's recipe
                 with a quarter of its largest size and of its live set)
  random_1g      log-uniform 1 KiB .. 64 MiB, live set bounded near 1 GiB (random_mixed's sizes,
                 a quarter of its live set)
  kv_inference   weights allocated once; requests arrive and finish, each growing KV-cache
                 blocks (one per layer every 16 tokens) and freeing them at the end; per-step
                 activations and workspaces
  kv_concat      the same with one contiguous KV tensor per request and layer that grows by
                 reallocation (new tensor, then the old one freed, every 8 tokens)
  transformer    training steps of a decoder with a sequence length that changes every step:
                 activations kept for backward, lazily created gradients and optimizer state,
                 workspaces
  kv_inference_small, kv_concat_small, transformer_small
                 the three recipes above for small models (d 256-1024, 4-16 layers): ~100 MiB
                 to 3 GiB live, where a 2 MiB page is a large share of a block
  kv_inference_mid, kv_concat_mid
                 the KV recipes at d 1280, 1600 and 2560 (24 or 36 layers), whose weights are not
                 whole 2 MiB pages: 1-9 GiB live
The generator is deterministic for a seed (Python's random.Random).
"""
import argparse
import math
import os
import random


class Writer:
    def __init__(self, name):
        self.name = name
        self.lines = []
        self.live = {}
        self.live_bytes = 0
        self.peak = 0
        self.next_id = 0

    def alloc(self, size):
        size = max(1, int(size))
        i = self.next_id
        self.next_id += 1
        self.lines.append(f"a {i} {size}")
        self.live[i] = size
        self.live_bytes += size
        self.peak = max(self.peak, self.live_bytes)
        return i

    def free(self, i):
        self.lines.append(f"f {i}")
        self.live_bytes -= self.live.pop(i)

    def write(self, path):
        for i in list(self.live):
            self.free(i)
        with open(path, "w") as f:
            f.write(f"# {self.name}\n# peak_live_bytes {self.peak}\n")
            f.write("\n".join(self.lines))
            f.write("\n")


def log_uniform(rng, lo, hi):
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def random_family(name, seed, lo, hi, bound, ops):
    rng = random.Random(seed)
    w = Writer(name)
    ids = []
    for _ in range(ops):
        if ids and (w.live_bytes > bound or rng.random() < 0.45):
            k = rng.randrange(len(ids))
            ids[k], ids[-1] = ids[-1], ids[k]
            w.free(ids.pop())
        else:
            ids.append(w.alloc(log_uniform(rng, lo, hi)))
    return w


def kv_inference(seed, family="kv_inference", layer_counts=(24, 32, 40), dims=(2048, 4096, 5120)):
    rng = random.Random(seed)
    w = Writer(f"{family}_s{seed}")
    layers = rng.choice(layer_counts)
    d = rng.choice(dims)
    # Weights: per layer 4 d^2 attention + 8 d^2 MLP in fp16, split into tensors; embeddings.
    for _ in range(layers):
        for m in (1, 1, 1, 1, 4, 4):
            w.alloc(m * d * d * 2)
        w.alloc(d * 2)
        w.alloc(d * 2)
    w.alloc(32000 * d * 2)
    kv_block = 16 * d * 2 * 2  # 16 tokens of K and V for one layer, fp16
    requests = {}  # id -> [tokens generated, target, [block ids]]
    next_req = 0
    max_batch = rng.choice([16, 32, 48])
    for step in range(rng.randint(600, 1000)):
        # Arrivals: the prompt's KV blocks at once.
        while len(requests) < max_batch and rng.random() < 0.35:
            prompt = log_uniform(rng, 16, 2048)
            target = prompt + log_uniform(rng, 8, 512)
            blocks = [w.alloc(kv_block) for _ in range(layers * math.ceil(prompt / 16))]
            requests[next_req] = [prompt, target, blocks]
            next_req += 1
        if not requests:
            continue
        batch = len(requests)
        tokens = batch
        # Per-step activations and workspaces (freed at the end of the step).
        acts = [w.alloc(tokens * d * 2 * rng.choice([1, 3, 4])) for _ in range(rng.randint(4, 10))]
        ws = w.alloc(rng.choice([4, 8, 32]) << 20)
        logits = w.alloc(tokens * 32000 * 2)
        for i in acts:
            w.free(i)
        w.free(ws)
        w.free(logits)
        for rid in list(requests):
            r = requests[rid]
            r[0] += 1
            if r[0] % 16 == 0:
                r[2].extend(w.alloc(kv_block) for _ in range(layers))
            if r[0] >= r[1]:
                for b in r[2]:
                    w.free(b)
                del requests[rid]
    return w


def kv_concat(seed, family="kv_concat", layer_counts=(16, 24, 32), dims=(2048, 4096)):
    """Inference with a contiguous KV cache per request and layer that grows by reallocation
    (the new, larger tensor is allocated before the old one is freed, as torch.cat does)."""
    rng = random.Random(seed)
    w = Writer(f"{family}_s{seed}")
    layers = rng.choice(layer_counts)
    d = rng.choice(dims)
    for _ in range(layers):
        for m in (1, 1, 1, 1, 4, 4):
            w.alloc(m * d * d * 2)
    w.alloc(32000 * d * 2)
    per_token = d * 2 * 2  # K and V, fp16, one layer
    requests = {}  # id -> [tokens, target, [per-layer block ids]]
    next_req = 0
    max_batch = rng.choice([4, 8, 16])
    for step in range(rng.randint(300, 500)):
        while len(requests) < max_batch and rng.random() < 0.2:
            prompt = log_uniform(rng, 16, 1024)
            target = prompt + log_uniform(rng, 8, 256)
            requests[next_req] = [prompt, target, [w.alloc(prompt * per_token) for _ in range(layers)]]
            next_req += 1
        if not requests:
            continue
        acts = [w.alloc(len(requests) * d * 2 * rng.choice([1, 4])) for _ in range(4)]
        for i in acts:
            w.free(i)
        for rid in list(requests):
            r = requests[rid]
            r[0] += 1
            # Every 8 tokens the cache grows (a new tensor, then the old one goes).
            if r[0] % 8 == 0:
                for li in range(layers):
                    n = w.alloc(r[0] * per_token)
                    w.free(r[2][li])
                    r[2][li] = n
            if r[0] >= r[1]:
                for b in r[2]:
                    w.free(b)
                del requests[rid]
    return w


def transformer(seed, family="transformer", layer_counts=(12, 16, 24), dims=(768, 1024, 1536),
                batches=(4, 8, 16)):
    rng = random.Random(seed)
    w = Writer(f"{family}_s{seed}")
    layers = rng.choice(layer_counts)
    d = rng.choice(dims)
    batch = rng.choice(batches)
    params = []
    for _ in range(layers):
        for m in (3, 1, 4, 4):
            params.append(w.alloc(m * d * d * 4))
        params.append(w.alloc(d * 4))
    params.append(w.alloc(50000 * d * 4))
    sizes = [w.live[p] for p in params]
    grads = {}
    opt = {}
    for step in range(rng.randint(6, 10)):
        seq = rng.choice([256, 384, 512, 768, 1024])
        t = batch * seq
        saved = []
        for _ in range(layers):
            saved.append(w.alloc(t * d * 4))  # input
            saved.append(w.alloc(t * 3 * d * 4))  # qkv
            saved.append(w.alloc(batch * 16 * seq * seq * 2))  # attention probs
            tmp = w.alloc(rng.choice([1, 4, 16]) << 20)  # workspace
            saved.append(w.alloc(t * 4 * d * 4))  # mlp hidden
            saved.append(w.alloc(t * 4))  # norm stats
            w.free(tmp)
        logits = w.alloc(t * 50000 // 8 * 4)
        w.free(logits)
        for k in range(len(saved) - 1, -1, -1):
            g = w.alloc(w.live[saved[k]])
            w.free(saved[k])
            if k % 5 == 0:
                p = params[(k // 5) % len(params)]
                if p not in grads:
                    grads[p] = w.alloc(sizes[params.index(p)])
            w.free(g)
        for p, s in zip(params, sizes):
            if p not in grads:
                grads[p] = w.alloc(s)
            if p not in opt:
                opt[p] = (w.alloc(s), w.alloc(s))
            tmp = w.alloc(s)
            w.free(tmp)
        for p in list(grads):
            w.free(grads.pop(p))
    return w


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seeds", default="1,2,3")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for seed in [int(s) for s in args.seeds.split(",")]:
        gens = {
            "random_small": lambda s: random_family(f"random_small_s{s}", s, 256, 1 << 20, 1 << 30, 100000),
            "random_large": lambda s: random_family(f"random_large_s{s}", s, 1024, 64 << 20, 4 << 30, 100000),
            "random_wide": lambda s: random_family(f"random_wide_s{s}", s, 256, 256 << 20, 6 << 30, 100000),
            "random_mid": lambda s: random_family(f"random_mid_s{s}", s, 512 << 10, 8 << 20, 1 << 30, 100000),
            "random_16m": lambda s: random_family(f"random_16m_s{s}", s, 1024, 16 << 20, 1 << 30, 100000),
            "random_1g": lambda s: random_family(f"random_1g_s{s}", s, 1024, 64 << 20, 1 << 30, 100000),
            "kv_inference": kv_inference,
            "kv_concat": kv_concat,
            "transformer": transformer,
            # The same recipes for small models (~100 MiB - 3 GiB live), where a 2 MiB page is
            # a larger share of every block.
            "kv_inference_small": lambda s: kv_inference(s, "kv_inference_small", (8, 12, 16), (512, 768, 1024)),
            "kv_concat_small": lambda s: kv_concat(s, "kv_concat_small", (8, 12), (512, 768)),
            "transformer_small": lambda s: transformer(s, "transformer_small", (4, 6, 8), (256, 384, 512), (2, 4, 8)),
            # Inference at widths whose weights are not whole 2 MiB pages (d 1280, 1600, 2560:
            # attention weights of 3.1, 4.9 and 12.5 MiB), 1-9 GiB live.
            "kv_inference_mid": lambda s: kv_inference(s, "kv_inference_mid", (24, 36), (1280, 1600, 2560)),
            "kv_concat_mid": lambda s: kv_concat(s, "kv_concat_mid", (24, 36), (1280, 1600, 2560)),
        }
        for fam, gen in gens.items():
            w = gen(seed)
            path = os.path.join(args.out, f"{fam}_s{seed}.trace")
            w.write(path)
            print(f"{path}: {len(w.lines)} events, peak live {w.peak / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
