"""The smoke workload's model and data: a tiny decoder-only transformer LM trained on synthetic
tokens that are a pure function of (seed, step, rank, micro-batch), so a resumed run sees exactly
the data an uninterrupted one would. Needs only torch."""

from __future__ import annotations

import hashlib

import torch
import torch.nn as nn
import torch.nn.functional as F

DATA_NOISE = 0.1  # probability that a synthetic token ignores the bigram chain


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, x):
        b, t, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        q, k, v = (z.view(b, t, self.heads, h // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyGPT(nn.Module):
    """Decoder-only transformer LM (pre-LN, causal self-attention, learned positions)."""

    def __init__(self, vocab: int, seq: int, hidden: int, layers: int, heads: int, ffn: int):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, hidden)
        self.pos_emb = nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, ffn) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def _mix_seed(*parts) -> int:
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def bigram_table(seed: int, vocab: int):
    g = torch.Generator().manual_seed(_mix_seed("bigram", seed, vocab))
    return torch.randperm(vocab, generator=g)


def synthetic_batch(seed, step, rank, micro, batch, seq, vocab, table, stream="data"):
    """Tokens are a pure function of (stream, seed, step, rank, micro): a noisy walk on a fixed
    bigram permutation, so next-token prediction is learnable and resumed runs see identical
    data. Validation and test batches come from their own streams."""
    g = torch.Generator().manual_seed(_mix_seed(stream, seed, step, rank, micro))
    n = seq + 1
    toks = torch.empty(batch, n, dtype=torch.long)
    toks[:, 0] = torch.randint(vocab, (batch,), generator=g)
    noise = torch.rand(batch, n, generator=g) < DATA_NOISE
    rnd = torch.randint(vocab, (batch, n), generator=g)
    for i in range(1, n):
        toks[:, i] = torch.where(noise[:, i], rnd[:, i], table[toks[:, i - 1]])
    return toks[:, :-1], toks[:, 1:]


class StepBatches(torch.utils.data.Dataset):
    """This rank's training micro-batches from `start` on, in order: item i is micro-batch
    i % accum of step start + i // accum. Read through a torch DataLoader, so its worker
    processes are real (and die of a signal sent to the trainer's process group, as Bridge's do)."""

    def __init__(self, *, seed, rank, start, iters, accum, batch, seq, vocab, table):
        self.args = (seed, rank, start, iters, accum, batch, seq, vocab, table)

    def __len__(self):
        _, _, start, iters, accum, *_ = self.args
        return max(0, iters - start + 1) * accum

    def __getitem__(self, i):
        seed, rank, start, _, accum, batch, seq, vocab, table = self.args
        return synthetic_batch(seed, start + i // accum, rank, i % accum, batch, seq, vocab, table)
