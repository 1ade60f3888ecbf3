"""The tokenizer of llama2.c's tokenizer.bin format, in Python: the same encode
as llama2.c's run.c (code points looked up as pieces, bytes as <0xXX> otherwise,
then the adjacent pair whose concatenation is a piece with the highest score is
merged, leftmost on ties, until none is), so the training data is tokenized as
the JS runner (js/llama/tokenizer.js) and run.c tokenize a prompt."""
import re
import struct

UNK, BOS, EOS = 0, 1, 2
BYTE0 = 3                        # <0x00> .. <0xFF> are ids 3..258
WORD = re.compile(r' ?[^\s]+|\s')  # training splits words so; merges never cross them


def write_tokenizer(path, pieces, scores):
    data = [p.encode('utf-8') for p in pieces]
    with open(path, 'wb') as f:
        f.write(struct.pack('<i', max(len(b) for b in data)))
        for b, s in zip(data, scores):
            f.write(struct.pack('<fi', s, len(b)))
            f.write(b)


def read_tokenizer(path, vocab_size):
    buf = open(path, 'rb').read()
    (max_len,) = struct.unpack_from('<i', buf, 0)
    off, pieces, scores = 4, [], []
    for _ in range(vocab_size):
        s, n = struct.unpack_from('<fi', buf, off)
        off += 8
        pieces.append(buf[off:off + n])
        scores.append(s)
        off += n
    assert off == len(buf), 'tokenizer.bin has trailing bytes'
    return pieces, scores


class Tokenizer:
    def __init__(self, pieces, scores):
        self.pieces = [p if isinstance(p, bytes) else p.encode('utf-8') for p in pieces]
        self.scores = scores
        self.lookup = {}
        for i, p in enumerate(self.pieces):
            self.lookup.setdefault(p, i)   # run.c's bsearch over sorted pieces: first of equals
        self._cache = {}

    def _encode_raw(self, text):
        ids = []
        for ch in text:
            b = ch.encode('utf-8')
            i = self.lookup.get(b)
            if i is not None:
                ids.append(i)
            else:
                ids.extend(BYTE0 + x for x in b)
        while True:
            best, best_i = None, -1
            for i in range(len(ids) - 1):
                j = self.lookup.get(self.pieces[ids[i]] + self.pieces[ids[i + 1]])
                if j is not None and self.scores[j] > -1e10 and (best is None or self.scores[j] > self.scores[best]):
                    best, best_i = j, i
            if best is None:
                return ids
            ids[best_i:best_i + 2] = [best]

    def encode(self, text, bos=True, eos=False):
        """run.c's encode: a dummy-prefix space before non-empty text."""
        ids = [BOS] if bos else []
        if text:
            for w in WORD.findall(' ' + text):   # exact: no merge crosses a word (see train_tokenizer)
                r = self._cache.get(w)
                if r is None:
                    r = self._cache[w] = self._encode_raw(w)
                ids.extend(r)
        if eos:
            ids.append(EOS)
        return ids

    def decode(self, ids):
        out, prev = bytearray(), BOS
        for t in ids:
            if t < BYTE0:                # <unk>, <s>, </s> print nothing
                prev = t
                continue
            p = self.pieces[t]
            if prev == BOS and p.startswith(b' '):
                p = p[1:]
            m = re.fullmatch(rb'<0x([0-9A-F]{2})>', p)
            out += bytes([int(m.group(1), 16)]) if m else p
            prev = t
        return out.decode('utf-8', errors='replace')
