#!/usr/bin/python3
"""Step 1 of the shipped model: the corpus and the tokenizer.

Reads the fortune databases of Debian's `fortunes` and `fortunes-min` packages
(/usr/share/games/fortunes, every database but ascii-art), splits them into a
training set and a held-out set (a fortune is held out when crc32(text) % 20 == 0:
about 5%, decided by the text alone), learns a byte-fallback BPE tokenizer of
VOCAB pieces on the training set, and writes
  <out>/tokenizer.bin     llama2.c's format (run.c reads it)
  <out>/train.bin         uint16 token ids, one document = BOS text EOS
  <out>/heldout.bin       the same for the held-out set
  <out>/heldout.txt       the held-out fortunes, separated by lines of '%'
Deterministic: the same packages give the same bytes.
usage: /usr/bin/python3 scripts/llama/prepare.py [--out build/llama]"""
import argparse
import collections
import os
import zlib

import numpy as np

from tok import BOS, EOS, WORD, Tokenizer, write_tokenizer

FORTUNES = '/usr/share/games/fortunes'
SKIP = {'ascii-art'}
VOCAB = 512
MIN_CHAR_COUNT = 20            # rarer characters are spelled as bytes (<0xXX>)


def read_fortunes():
    docs = []
    for name in sorted(os.listdir(FORTUNES)):
        path = os.path.join(FORTUNES, name)
        if '.' in name or name in SKIP or os.path.islink(path) or not os.path.isfile(path):
            continue
        text = open(path, 'rb').read().decode('utf-8', errors='replace')
        for entry in text.split('\n%\n'):
            entry = entry.strip('%\n').rstrip()
            if entry.strip():
                docs.append(entry)
    return docs


def train_tokenizer(docs):
    """BPE over words (WORD): pieces never span a word, so run.c's encode of a
    text is the concatenation of its words' encodings (tok.Tokenizer relies on it)."""
    words = collections.Counter()
    chars = collections.Counter()
    for d in docs:
        for w in WORD.findall(' ' + d):
            words[w] += 1
        chars.update(d)
    chars[' '] += 1
    base = sorted(c for c, n in chars.items() if n >= MIN_CHAR_COUNT)
    pieces = ['<unk>', '<s>', '</s>'] + ['<0x%02X>' % b for b in range(256)] + base
    scores = [0.0] * len(pieces)
    known = set(base)
    # each word as a list of symbols (unknown characters stay as themselves and never merge)
    seqs = [[list(w), n] for w, n in words.items()]
    merges = VOCAB - len(pieces)
    for m in range(merges):
        pairs = collections.Counter()
        for s, n in seqs:
            for a, b in zip(s, s[1:]):
                if a in known and b in known:
                    pairs[a, b] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        ab = a + b
        pieces.append(ab)
        scores.append(-float(m))         # earlier merges win (sentencepiece's scores)
        known.add(ab)
        for item in seqs:
            s = item[0]
            if len(s) < 2:
                continue
            i, out = 0, []
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(ab)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            item[0] = out
    return pieces, scores


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default='build/llama')
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    docs = read_fortunes()
    held = [d for d in docs if zlib.crc32(d.encode()) % 20 == 0]
    train = [d for d in docs if zlib.crc32(d.encode()) % 20 != 0]
    pieces, scores = train_tokenizer(train)
    write_tokenizer(os.path.join(args.out, 'tokenizer.bin'), pieces, scores)
    tok = Tokenizer(pieces, scores)
    for name, part in (('train', train), ('heldout', held)):
        ids = []
        for d in part:
            ids += tok.encode(d, bos=True, eos=True)
        np.array(ids, dtype=np.uint16).tofile(os.path.join(args.out, name + '.bin'))
        chars = sum(len(d) for d in part)
        print(f'{name}: {len(part)} fortunes, {chars} characters, {len(ids)} tokens ({chars / len(ids):.2f} chars/token)')
    with open(os.path.join(args.out, 'heldout.txt'), 'w') as f:
        f.write('\n%\n'.join(held) + '\n')
    assert tok.decode(tok.encode(held[0])) == held[0]
    print(f'vocab {len(pieces)}; last merges: {pieces[-5:]}')


if __name__ == '__main__':
    main()
