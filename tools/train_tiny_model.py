#!/usr/bin/python3
"""Trains the tiny model that vkattn-generate runs by default, and writes it in the llama2.c
format (a 7-int32 header and float32 weights) with a run.c-style tokenizer.bin.

Corpus: the King James Version of the Bible as Debian's bible-kjv-text package ships it
(read with the `bible` program from bible-kjv). The KJV text is in the public domain (its
translation dates from 1611; the Crown's letters patent apply in the United Kingdom only),
and the package's copyright file grants unrestricted use of its data file. Verse numbers are
dropped; each chapter ("Genesis 1" and its verses, one per line) is one document starting
with BOS. Every 40th chapter is held out for the validation loss.

Tokenizer: byte-pair merges learned on the corpus. Layout as in Llama's vocab, which is what
run.c expects: <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>, one token per character
of the corpus, then the merges, scored so that run.c's greedy "merge the best-scoring pair"
reproduces them. The corpus is encoded with that same greedy rule.

Model: Llama-style. RMSNorm (eps 1e-5), RoPE (interleaved pairs, base 10000, as run.c),
grouped-query attention (fewer KV heads than query heads), SwiGLU MLP, classifier tied to the
token embedding. Attention is a causal sliding window of WINDOW tokens, trained on sequences
twice as long, so a ring KV cache of WINDOW slots reproduces training exactly however long
generation runs. The header's seq_len is WINDOW: the span a token attends to.

Usage (Debian 12: apt-get install python3-torch libopenblas0-pthread bible-kjv; about 30 minutes on 2
cores; without OpenBLAS, torch falls back to the reference BLAS and is about 7 times slower):
    /usr/bin/python3 tools/train_tiny_model.py [--out models] [--steps N]
The outputs are committed; the build and CI never retrain. The run's figures are written to
OUT/kjv-tiny.txt.
"""
import argparse
import collections
import math
import os
import re
import struct
import subprocess
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# Hyper-parameters. Kept small so that the checkpoint is ~4 MB and trains on a laptop CPU.
VOCAB = 1024
DIM = 128
N_LAYERS = 4
N_HEADS = 4
N_KV_HEADS = 2
HIDDEN = 384
WINDOW = 128          # sliding attention window = default KV cache capacity
SEQ = 2 * WINDOW      # training sequence length
BATCH = 16
LR = 3e-3
MIN_LR = 3e-4
WARMUP = 100
WEIGHT_DECAY = 0.1
ROPE_BASE = 10000.0
EPS = 1e-5
HOLDOUT_EVERY = 40

BOS, EOS = 1, 2
PIECE = re.compile(r" ?[A-Za-z]+| ?[0-9]+| ?[^A-Za-z0-9\s]+|\s")


def read_corpus():
    text = subprocess.run(["bible", "-l100000", "gen1:1-rev22:21"], check=True, capture_output=True,
                          text=True).stdout
    chapters, current = [], None
    for line in text.splitlines():
        verse = re.match(r"^\s+\d+ (.*)$", line)
        if verse:
            current.append(verse.group(1).strip())
        elif line.strip():
            current = [line.strip()]
            chapters.append(current)
    return ["\n".join(c) + "\n" for c in chapters]


def train_tokenizer(docs):
    # Pieces never span a word boundary, so merges learned per piece tokenize a whole text
    # the same way run.c's greedy encoder does (no vocab entry can straddle two pieces).
    counts = collections.Counter()
    for d in docs:
        counts.update(PIECE.findall(" " + d))
    chars = sorted({ch for p in counts for ch in p})
    vocab = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + chars
    scores = [0.0] * len(vocab)
    words = [(list(p), n) for p, n in counts.items()]
    while len(vocab) < VOCAB:
        pairs = collections.Counter()
        for sym, n in words:
            for a, b in zip(sym, sym[1:]):
                pairs[a, b] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merged = a + b
        vocab.append(merged)
        scores.append(-float(len(vocab)))  # earlier merges score higher
        for sym, _ in words:
            i = 0
            while i + 1 < len(sym):
                if sym[i] == a and sym[i + 1] == b:
                    sym[i:i + 2] = [merged]
                i += 1
    return vocab, scores


class Encoder:
    """run.c's encode, per piece, with a cache."""

    def __init__(self, vocab, scores):
        self.index = {s: i for i, s in enumerate(vocab)}
        self.vocab, self.scores = vocab, scores
        self.cache = {}

    def piece(self, p):
        if p in self.cache:
            return self.cache[p]
        toks = []
        for ch in p:
            if ch in self.index:
                toks.append(self.index[ch])
            else:
                toks += [self.index["<0x%02X>" % b] for b in ch.encode("utf-8")]
        while True:
            best, best_at = None, -1
            for i in range(len(toks) - 1):
                j = self.index.get(self.vocab[toks[i]] + self.vocab[toks[i + 1]])
                if j is not None and (best is None or self.scores[j] > self.scores[best]):
                    best, best_at = j, i
            if best is None:
                break
            toks[best_at:best_at + 2] = [best]
        self.cache[p] = toks
        return toks

    def document(self, text):
        out = [BOS]
        for p in PIECE.findall(" " + text):  # " ": sentencepiece's dummy prefix
            out += self.piece(p)
        return out


def rope_tables(n_pos, head_size):
    freqs = 1.0 / (ROPE_BASE ** (torch.arange(0, head_size, 2).float() / head_size))
    angles = torch.outer(torch.arange(n_pos).float(), freqs)
    return torch.cos(angles), torch.sin(angles)


def rope(x, cos, sin):
    # x: [B, T, H, hs]; pairs (x[2i], x[2i+1]) rotate together, as in run.c.
    xr, xi = x.float().reshape(*x.shape[:-1], -1, 2).unbind(-1)
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack((xr * c - xi * s, xr * s + xi * c), dim=-1).flatten(3)


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * self.weight


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        hs = DIM // N_HEADS
        self.attention_norm, self.ffn_norm = RMSNorm(DIM), RMSNorm(DIM)
        self.wq = nn.Linear(DIM, N_HEADS * hs, bias=False)
        self.wk = nn.Linear(DIM, N_KV_HEADS * hs, bias=False)
        self.wv = nn.Linear(DIM, N_KV_HEADS * hs, bias=False)
        self.wo = nn.Linear(N_HEADS * hs, DIM, bias=False)
        self.w1 = nn.Linear(DIM, HIDDEN, bias=False)
        self.w2 = nn.Linear(HIDDEN, DIM, bias=False)
        self.w3 = nn.Linear(DIM, HIDDEN, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        hs = DIM // N_HEADS
        h = self.attention_norm(x)
        q = rope(self.wq(h).view(B, T, N_HEADS, hs), cos, sin)
        k = rope(self.wk(h).view(B, T, N_KV_HEADS, hs), cos, sin)
        v = self.wv(h).view(B, T, N_KV_HEADS, hs)
        rep = N_HEADS // N_KV_HEADS  # query head h reads KV head h // rep
        k = k.repeat_interleave(rep, dim=2).transpose(1, 2)
        v = v.repeat_interleave(rep, dim=2).transpose(1, 2)
        s = (q.transpose(1, 2) @ k.transpose(-1, -2)) / math.sqrt(hs) + mask
        a = (F.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, DIM)
        x = x + self.wo(a)
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(N_LAYERS))
        self.norm = RMSNorm(DIM)
        cos, sin = rope_tables(SEQ, DIM // N_HEADS)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        i = torch.arange(SEQ)
        d = i[:, None] - i[None, :]
        visible = (d >= 0) & (d < WINDOW)
        self.register_buffer("mask", torch.where(visible, 0.0, float("-inf")), persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * N_LAYERS) if name.endswith(("wo.weight", "w2.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.tok(idx)
        for layer in self.layers:
            x = layer(x, self.cos[:T], self.sin[:T], self.mask[:T, :T])
        logits = self.norm(x) @ self.tok.weight.T
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def batches(stream, gen):
    starts = torch.randint(0, len(stream) - SEQ - 1, (BATCH,), generator=gen)
    rows = torch.stack([stream[s:s + SEQ + 1] for s in starts.tolist()])
    return rows[:, :-1], rows[:, 1:]


@torch.no_grad()
def evaluate(model, stream):
    model.eval()
    losses = []
    for s in range(0, len(stream) - SEQ - 1, SEQ):
        row = stream[s:s + SEQ + 1][None]
        losses.append(model(row[:, :-1], row[:, 1:]).item())
    model.train()
    return sum(losses) / len(losses)


def write_checkpoint(model, path):
    hs = DIM // N_HEADS
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    L = range(N_LAYERS)
    with open(path, "wb") as f:
        # vocab_size positive: the classifier shares the token embedding.
        f.write(struct.pack("7i", DIM, HIDDEN, N_LAYERS, N_HEADS, N_KV_HEADS, VOCAB, WINDOW))
        parts = [sd["tok.weight"]]
        for name in ("attention_norm.weight", "wq.weight", "wk.weight", "wv.weight", "wo.weight",
                     "ffn_norm.weight", "w1.weight", "w2.weight", "w3.weight"):
            parts += [sd[f"layers.{i}.{name}"] for i in L]
        parts.append(sd["norm.weight"])
        cos, sin = rope_tables(WINDOW, hs)  # legacy freq_cis tables; run.c skips them
        parts += [cos.numpy(), sin.numpy()]
        for p in parts:
            f.write(np.ascontiguousarray(p, dtype="<f4").tobytes())


def write_tokenizer(vocab, scores, path):
    data = [s.encode("utf-8") for s in vocab]
    with open(path, "wb") as f:
        f.write(struct.pack("i", max(len(b) for b in data)))
        for b, sc in zip(data, scores):
            f.write(struct.pack("fi", sc, len(b)) + b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "models"))
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    torch.manual_seed(1611)
    torch.set_num_threads(args.threads)
    t0 = time.time()

    docs = read_corpus()
    vocab, scores = train_tokenizer(docs)
    enc = Encoder(vocab, scores)
    train_docs = [d for i, d in enumerate(docs) if i % HOLDOUT_EVERY]
    val_docs = [d for i, d in enumerate(docs) if i % HOLDOUT_EVERY == 0]
    train = torch.tensor([t for d in train_docs for t in enc.document(d)], dtype=torch.long)
    val = torch.tensor([t for d in val_docs for t in enc.document(d)], dtype=torch.long)
    chars = sum(len(d) for d in docs)
    print(f"{len(docs)} chapters, {chars} characters; vocab {len(vocab)}; {len(train)} train and {len(val)} "
          f"validation tokens ({chars / (len(train) + len(val)):.2f} characters/token); {time.time() - t0:.0f} s",
          flush=True)

    model = Model()
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(7)
    t_train = time.time()
    for step in range(args.steps):
        lr = LR * (step + 1) / WARMUP if step < WARMUP else \
            MIN_LR + 0.5 * (LR - MIN_LR) * (1 + math.cos(math.pi * (step - WARMUP) / max(1, args.steps - WARMUP)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batches(train, gen)
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step:5d}  loss {loss.item():.3f}  lr {lr:.2e}  {time.time() - t_train:.0f} s", flush=True)
    train_s = time.time() - t_train
    val_loss = evaluate(model, val)
    train_loss = evaluate(model, train[:len(val)])

    os.makedirs(args.out, exist_ok=True)
    write_checkpoint(model, os.path.join(args.out, "kjv-tiny.bin"))
    write_tokenizer(vocab, scores, os.path.join(args.out, "kjv-tokenizer.bin"))
    tokens_seen = args.steps * BATCH * SEQ
    record = f"""kjv-tiny: the default model of vkattn-generate, written by tools/train_tiny_model.py
corpus: King James Version (Debian bible-kjv-text), public domain; {len(docs)} chapters, {chars} characters
tokenizer: {len(vocab)} tokens (byte-pair merges), {chars / (len(train) + len(val)):.2f} characters per token
model: dim {DIM}, hidden {HIDDEN}, {N_LAYERS} layers, {N_HEADS} heads, {N_KV_HEADS} KV heads, head size {DIM // N_HEADS}, tied classifier; {n_params} parameters
attention: causal sliding window of {WINDOW} tokens (header seq_len), RoPE base {ROPE_BASE:g} interleaved
training: {args.steps} steps of {BATCH} x {SEQ} tokens ({tokens_seen} tokens, {tokens_seen / len(train):.1f} epochs), AdamW lr {LR:g} -> {MIN_LR:g} cosine, warmup {WARMUP}, weight decay {WEIGHT_DECAY}, seed 1611
training time: {train_s / 60:.1f} min on {args.threads} CPU threads (torch {torch.__version__})
final loss (nats/token): train {train_loss:.3f}, validation {val_loss:.3f} (every {HOLDOUT_EVERY}th chapter held out)
"""
    with open(os.path.join(args.out, "kjv-tiny.txt"), "w") as f:
        f.write(record)
    print(record)


if __name__ == "__main__":
    main()
