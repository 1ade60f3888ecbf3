#!/usr/bin/python3
"""Step 3: the independent reference. Reads a llama2.c version-0 checkpoint
file (not the training code's model) and computes its forward in float64 with
PyTorch: the whole token stream at once, full causal attention with repeated KV
heads, rotary from the checkpoint's own tables on interleaved pairs. Writes the
logits of every position of each stream as float32 for the JS tests.
usage: /usr/bin/python3 scripts/llama/reference.py [--model models/fortunes]
       [--heldout tests/data/llama/heldout.txt] [--out tests/data/llama]"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tok import Tokenizer, read_tokenizer  # noqa: E402


def read_checkpoint(path):
    buf = open(path, 'rb').read()
    dim, hidden, L, nh, nkv, vocab, seq = struct.unpack_from('<7i', buf, 0)
    shared = vocab > 0
    vocab = abs(vocab)
    hs = dim // nh
    kv = nkv * hs
    f = np.frombuffer(buf, dtype='<f4', offset=28)
    off = 0

    def take(*shape):
        nonlocal off
        n = int(np.prod(shape))
        t = torch.from_numpy(f[off:off + n].astype(np.float64).reshape(shape))
        off += n
        return t
    w = dict(emb=take(vocab, dim), rms_att=take(L, dim), wq=take(L, dim, dim), wk=take(L, kv, dim),
             wv=take(L, kv, dim), wo=take(L, dim, dim), rms_ffn=take(L, dim), w1=take(L, hidden, dim),
             w2=take(L, dim, hidden), w3=take(L, hidden, dim), rms_final=take(dim),
             cos=take(seq, hs // 2), sin=take(seq, hs // 2))
    w['wcls'] = w['emb'] if shared else take(vocab, dim)
    assert off == len(f), 'checkpoint length does not match its header'
    cfg = dict(dim=dim, hidden=hidden, L=L, nh=nh, nkv=nkv, vocab=vocab, seq=seq, hs=hs)
    return cfg, w


def rmsnorm(x, g):
    return g * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5))


def rotate(x, cos, sin):                 # x [S, H, hs]; pairs (2j, 2j+1) at position s
    a, b = x[..., 0::2], x[..., 1::2]
    c, s = cos[:, None, :], sin[:, None, :]
    out = torch.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


@torch.no_grad()
def forward(cfg, w, tokens):
    S, hs, nh, nkv = len(tokens), cfg['hs'], cfg['nh'], cfg['nkv']
    x = w['emb'][torch.tensor(tokens)]
    cos, sin = w['cos'][:S], w['sin'][:S]
    mask = torch.ones(S, S, dtype=torch.bool).triu(1)
    for l in range(cfg['L']):
        h = rmsnorm(x, w['rms_att'][l])
        q = rotate((h @ w['wq'][l].T).view(S, nh, hs), cos, sin)
        k = rotate((h @ w['wk'][l].T).view(S, nkv, hs), cos, sin)
        v = (h @ w['wv'][l].T).view(S, nkv, hs)
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
        att = torch.einsum('shd,thd->hst', q, k) / np.sqrt(hs)
        att = torch.softmax(att.masked_fill(mask, float('-inf')), dim=-1)
        x = x + torch.einsum('hst,thd->shd', att, v).reshape(S, -1) @ w['wo'][l].T
        h = rmsnorm(x, w['rms_ffn'][l])
        a = h @ w['w1'][l].T
        x = x + ((a * torch.sigmoid(a)) * (h @ w['w3'][l].T)) @ w['w2'][l].T
    return rmsnorm(x, w['rms_final']) @ w['wcls'].T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--model', default='models/fortunes')
    ap.add_argument('--heldout', default='tests/data/llama/heldout.txt')
    ap.add_argument('--out', default='tests/data/llama')
    args = ap.parse_args()
    cfg, w = read_checkpoint(os.path.join(args.model, 'model.bin'))
    tok = Tokenizer(*read_tokenizer(os.path.join(args.model, 'tokenizer.bin'), cfg['vocab']))
    docs = open(args.heldout).read().rstrip('\n').split('\n%\n')
    held = []
    for d in docs:
        held += tok.encode(d, bos=True, eos=True)
    streams = {
        # the full context: held-out fortunes (BOS text EOS, one after another)
        'heldout-full': held[:cfg['seq']],
        # a prompt as a user types it
        'prompt': tok.encode('The meaning of life is', bos=True),
    }
    # the prompt's greedy continuation in float64 (the logits of its last row pick each next token)
    greedy = list(streams['prompt'])
    for _ in range(48):
        greedy.append(int(forward(cfg, w, greedy)[-1].argmax()))
    streams['prompt-greedy'] = greedy
    os.makedirs(args.out, exist_ok=True)
    index, blobs, offset = {}, [], 0
    for name, ids in streams.items():
        logits = forward(cfg, w, ids).numpy().astype('<f4')
        blobs.append(logits.tobytes())
        index[name] = dict(tokens=ids, offset=offset, rows=len(ids), maxAbs=float(np.abs(logits).max()))
        offset += logits.nbytes
        print(f'{name}: {len(ids)} tokens, max |logit| {np.abs(logits).max():.2f}')
    with open(os.path.join(args.out, 'reference.bin'), 'wb') as f:
        f.write(b''.join(blobs))
    meta = dict(model=args.model, vocabSize=cfg['vocab'], dtype='float32 little-endian, row-major [rows, vocabSize]',
                how='scripts/llama/reference.py: float64 PyTorch forward of the checkpoint file, whole stream at once',
                streams=index)
    with open(os.path.join(args.out, 'reference.json'), 'w') as f:
        json.dump(meta, f, indent=1)
        f.write('\n')


if __name__ == '__main__':
    main()
