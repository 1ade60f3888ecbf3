#!/usr/bin/python3
"""Step 2 of the shipped model: train it (llama2.c's model.py architecture:
RMSNorm, rotary on interleaved pairs, SwiGLU, GQA, tied classifier) on
prepare.py's train.bin, then write the checkpoint in llama2.c's version-0
format (run.c reads it as is). Seeded; CPU; about 30 minutes on 2 cores.
usage: /usr/bin/python3 scripts/llama/train.py [--data build/llama] [--minutes 30]
       [--out models/fortunes]"""
import argparse
import math
import os
import struct
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

CONFIG = dict(dim=256, hidden_dim=640, n_layers=5, n_heads=4, n_kv_heads=2, vocab_size=512, seq_len=512)


def rope_tables(head_size, seq_len, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, head_size, 2)[: head_size // 2].float() / head_size))
    freqs = torch.outer(torch.arange(seq_len).float(), freqs)
    return torch.cos(freqs), torch.sin(freqs)          # float32 [seq_len, head_size/2], as llama2.c


def rotate(x, cos, sin):                               # x [B,S,H,hs], pairs (2j, 2j+1)
    xr, xi = x.float().reshape(*x.shape[:-1], -1, 2).unbind(-1)
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack([xr * c - xi * s, xr * s + xi * c], -1).flatten(3).type_as(x)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        hs = c['dim'] // c['n_heads']
        self.nh, self.nkv, self.hs = c['n_heads'], c['n_kv_heads'], hs
        self.wq = nn.Linear(c['dim'], c['n_heads'] * hs, bias=False)
        self.wk = nn.Linear(c['dim'], c['n_kv_heads'] * hs, bias=False)
        self.wv = nn.Linear(c['dim'], c['n_kv_heads'] * hs, bias=False)
        self.wo = nn.Linear(c['n_heads'] * hs, c['dim'], bias=False)
        self.w1 = nn.Linear(c['dim'], c['hidden_dim'], bias=False)
        self.w2 = nn.Linear(c['hidden_dim'], c['dim'], bias=False)
        self.w3 = nn.Linear(c['dim'], c['hidden_dim'], bias=False)
        self.attention_norm, self.ffn_norm = RMSNorm(c['dim']), RMSNorm(c['dim'])

    def forward(self, x, cos, sin):
        B, S, _ = x.shape
        h = self.attention_norm(x)
        q = rotate(self.wq(h).view(B, S, self.nh, self.hs), cos, sin)
        k = rotate(self.wk(h).view(B, S, self.nkv, self.hs), cos, sin)
        v = self.wv(h).view(B, S, self.nkv, self.hs)
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)   # torch 1.13: no F.sdpa
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.hs)
        scores = scores.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float('-inf'))
        a = torch.softmax(scores.float(), dim=-1).type_as(q) @ v
        x = x + self.wo(a.transpose(1, 2).reshape(B, S, -1))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Transformer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.tok_embeddings = nn.Embedding(c['vocab_size'], c['dim'])
        self.layers = nn.ModuleList(Block(c) for _ in range(c['n_layers']))
        self.norm = RMSNorm(c['dim'])
        self.output = nn.Linear(c['dim'], c['vocab_size'], bias=False)
        self.output.weight = self.tok_embeddings.weight             # tied, as llama2.c
        cos, sin = rope_tables(c['dim'] // c['n_heads'], c['seq_len'])
        self.register_buffer('freqs_cos', cos, persistent=False)
        self.register_buffer('freqs_sin', sin, persistent=False)
        self.apply(self._init)
        for n, p in self.named_parameters():                       # llama2.c's scaled init
            if n.endswith('w3.weight') or n.endswith('wo.weight'):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c['n_layers']))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, tokens):
        S = tokens.shape[1]
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, self.freqs_cos[:S], self.freqs_sin[:S])
        return self.output(self.norm(x))


def export_v0(model, path):
    """llama2.c's legacy_export: header, then run.c's order; positive vocab_size = shared classifier."""
    c = model.c
    with open(path, 'wb') as f:
        f.write(struct.pack('<7i', c['dim'], c['hidden_dim'], c['n_layers'], c['n_heads'],
                            c['n_kv_heads'], c['vocab_size'], c['seq_len']))

        def w(t):
            f.write(t.detach().cpu().contiguous().view(-1).to(torch.float32).numpy().astype('<f4').tobytes())
        w(model.tok_embeddings.weight)
        for name in ('attention_norm', 'wq', 'wk', 'wv', 'wo', 'ffn_norm', 'w1', 'w2', 'w3'):
            for layer in model.layers:
                w(getattr(layer, name).weight)
        w(model.norm.weight)
        w(model.freqs_cos[:c['seq_len']])
        w(model.freqs_sin[:c['seq_len']])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--data', default='build/llama')
    ap.add_argument('--out', default='models/fortunes')
    ap.add_argument('--minutes', type=float, default=30)
    ap.add_argument('--batch', type=int, default=8)
    ap.add_argument('--lr', type=float, default=2e-3)
    ap.add_argument('--seed', type=int, default=1337)
    ap.add_argument('--threads', type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    train = torch.from_numpy(np.fromfile(os.path.join(args.data, 'train.bin'), dtype=np.uint16).astype(np.int64))
    held = torch.from_numpy(np.fromfile(os.path.join(args.data, 'heldout.bin'), dtype=np.uint16).astype(np.int64))
    c = CONFIG
    model = Transformer(c)
    print(f'{sum(p.numel() for p in model.parameters())} parameters; train {len(train)} tokens, held-out {len(held)}')
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    S, B = c['seq_len'], args.batch

    def batch(data):
        ix = rng.integers(0, len(data) - S - 1, B)
        x = torch.stack([data[i:i + S] for i in ix])
        y = torch.stack([data[i + 1:i + S + 1] for i in ix])
        return x, y

    @torch.no_grad()
    def held_loss():
        model.eval()
        losses = []
        for i in range(0, len(held) - S - 1, S):
            x, y = held[i:i + S][None], held[i + 1:i + S + 1][None]
            losses.append(F.cross_entropy(model(x).view(-1, c['vocab_size']), y.view(-1)).item())
        model.train()
        return sum(losses) / len(losses)

    # the schedule is set by time: a step's cost is measured over the first steps
    t0 = time.time()
    budget = args.minutes * 60
    warmup, step, total = 50, 0, None
    while True:
        elapsed = time.time() - t0
        if step == 20:
            total = max(100, int(budget / (elapsed / 20)))
            print(f'{elapsed / 20:.2f} s/step: {total} steps in {args.minutes} min')
        if total is not None and step >= total:
            break
        lr = args.lr * min(1.0, (step + 1) / warmup)
        if total is not None:
            lr = args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / total))))
            lr = min(lr, args.lr * (step + 1) / warmup)
        for g in opt.param_groups:
            g['lr'] = lr
        x, y = batch(train)
        loss = F.cross_entropy(model(x).view(-1, c['vocab_size']), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            print(f'step {step} loss {loss.item():.3f} lr {lr:.2e} {time.time() - t0:.0f} s', flush=True)
        if step % 500 == 0 and step:
            print(f'  held-out loss {held_loss():.3f}', flush=True)
        step += 1
    hl = held_loss()
    print(f'done: {step} steps, {step * B * S} tokens, held-out loss {hl:.3f} (perplexity {math.exp(hl):.2f}), {time.time() - t0:.0f} s')
    torch.save(model.state_dict(), os.path.join(args.data, 'model.pt'))
    os.makedirs(args.out, exist_ok=True)
    export_v0(model, os.path.join(args.out, 'model.bin'))


if __name__ == '__main__':
    main()
