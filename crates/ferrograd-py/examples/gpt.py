"""A character-level GPT on Shakespeare from Python, written as a PyTorch user writes it: the
model, optimizer, schedule and data split of nanoGPT's configuration for a CPU, with `import
ferrograd as fg` where a PyTorch script imports torch.

    python crates/ferrograd-py/examples/gpt.py [--text data/shakespeare/shakespeare.txt]
    python crates/ferrograd-py/examples/gpt.py --framework torch [--threads 2]

Prints the train and validation loss every --eval-interval steps, the median time per step
(the first 10 excluded) and a sample of generated text. With `--framework torch` the same
lines run on PyTorch (the names are the same), the side-by-side comparison of the README.
"""

import argparse
import math
import statistics
import sys
import time

import numpy as np

if "--framework" in sys.argv and sys.argv[sys.argv.index("--framework") + 1 :][:1] == ["torch"]:
    import torch as fg
    import torch.nn as nn
    import torch.nn.functional as F
else:
    import ferrograd as fg
    import ferrograd.nn as nn
    import ferrograd.nn.functional as F


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width)
        self.attn = nn.Linear(width, 3 * width)
        self.attn_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.fc_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, context, width, heads, layers):
        super().__init__()
        self.context = context
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tok.weight  # weight tying: one parameter, two layers
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(fg.arange(t))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    @fg.no_grad()
    def generate(self, idx, n, temperature=1.0, top_k=None):
        for _ in range(n):
            logits, _ = self(idx[:, -self.context :])
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                kth = fg.topk(logits, top_k)[0][:, -1:]
                logits = logits.masked_fill(logits < kth, -float("inf"))
            idx = fg.cat([idx, fg.multinomial(F.softmax(logits, dim=-1), 1)], dim=1)
        return idx


def lr_at(it, iters, warmup=100, lr=1e-3, min_lr=1e-4):
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    ratio = (it - warmup) / max(1, iters - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * min(1.0, ratio))) * (lr - min_lr)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--text", default="data/shakespeare/shakespeare.txt")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--eval-interval", type=int, default=250)
    ap.add_argument("--eval-iters", type=int, default=20)
    ap.add_argument("--sample", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--framework", choices=["ferrograd", "torch"], default="ferrograd")
    ap.add_argument("--threads", type=int, default=2, help="PyTorch's threads")
    args = ap.parse_args(argv)
    if args.framework == "torch":
        fg.set_num_threads(args.threads)
    fg.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    text = open(args.text, encoding="utf-8").read()
    chars = sorted(set(text))
    code = {ch: i for i, ch in enumerate(chars)}
    data = np.array([code[ch] for ch in text], dtype=np.int64)
    split = int(0.9 * len(data))
    parts = {"train": data[:split], "val": data[split:]}

    def batch(part):
        d = parts[part]
        starts = rng.integers(0, len(d) - args.context - 1, size=args.batch)
        x = np.stack([d[s : s + args.context] for s in starts])
        y = np.stack([d[s + 1 : s + 1 + args.context] for s in starts])
        return fg.from_numpy(x), fg.from_numpy(y)

    model = GPT(len(chars), args.context, args.width, args.heads, args.layers)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = fg.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-3, betas=(0.9, 0.99)
    )
    print(f"{args.framework} {fg.__version__} chars={len(text)} vocab={len(chars)} params={n_params}")

    @fg.no_grad()
    def evaluate():
        model.eval()
        out = {}
        for part in ("train", "val"):
            out[part] = statistics.fmean(model(*batch(part))[1].item() for _ in range(args.eval_iters))
        model.train()
        return out

    times = []
    t_start = time.perf_counter()
    for it in range(args.iters + 1):
        if it % args.eval_interval == 0 or it == args.iters:
            losses = evaluate()
            print(
                f"iter {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}, "
                f"{time.perf_counter() - t_start:.1f} s",
                flush=True,
            )
        if it == args.iters:
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(it, args.iters)
        x, y = batch("train")
        t0 = time.perf_counter()
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    if len(times) > 10:
        ms = 1000 * statistics.median(times[10:])
        print(f"ms per iteration (median): {ms:.2f}; total {time.perf_counter() - t_start:.1f} s")
    model.eval()
    start = fg.tensor([[code["\n"]]], dtype=fg.int64)
    sample = model.generate(start, args.sample, temperature=0.8, top_k=20)[0].tolist()
    print("sample:\n" + "".join(chars[i] for i in sample))
    return losses


if __name__ == "__main__":
    main()
