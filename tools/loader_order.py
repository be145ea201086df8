#!/usr/bin/python3
"""tools/loader_order.py — qsync's data order and token streams in Python (pure Python, no
dependencies), so that a PyTorch script trains on exactly the batches qsync trains on.

Ports, bit for bit:
  include/qsync/rng.h, src/core/rng.c   Philox-4x32-10 (philox4x32), the key derivation
                                        qs_rng_key (FNV-1a of the purpose, splitmix64 mixing),
                                        the sequential stream (Rng: qs_rng_init / qs_rng_u32), the
                                        unbiased qs_rng_below and the Fisher–Yates
                                        qs_rng_shuffle_i64
  src/data/loader.c                     the order of epoch e: the identity, shuffled (shuffle on)
                                        by Rng(qs_rng_key(seed, "loader-shuffle", e), 0); global
                                        batch b of epoch e is positions [b·B, (b+1)·B) of that
                                        order, and a rank takes its contiguous slice of it (an
                                        even split: ranks below B % world get one sample more);
                                        an epoch has n // B batches with drop_last (training),
                                        ceil(n / B) without (evaluation: no shuffle, the last
                                        batch padded by repeating the last sample)

For a token stream (a language-modelling data set) sample i is the window
x = tokens[i·T : i·T + T], y = tokens[i·T + 1 : i·T + T + 1], n = (len(tokens) - 1) // T.
token_stream(data, data_dir, train) reads the streams of qsync's data names (src/data/, docs/DATA.md):
  fortunes[:T]          (T 256) the Debian fortune files of data_dir (/usr/share/games/fortunes):
                        plain files other than hidden, *.dat and *.u8, in byte order of their
                        names, split at lines that are exactly "%", trailing newlines removed,
                        empty fortunes skipped; fortune k is a test fortune when k % 10 == 9;
                        each fortune then "\n\n"; vocabulary 256 (bytes)
  tokens:PATH[:T[:V]]   (T 1024, V 50257) an llm.c token file (header of 256 int32: 20240520,
                        1, count; uint16 tokens; plain or gzip); the test split is the file
                        whose name has its last "train" replaced by "val"
  synthetic-text:V:T    the Philox stream of qs_dataset_synthetic_text (seed 0x5EED; stream 0
                        train, 1 test)

Library use:
    import loader_order as lo
    order = lo.Loader(n, batch=B, seed=S)            # training: shuffle, drop_last, world 1
    for step in range(steps): idx = order.next()     # the sample indices of step `step`
    lo.batch_indices(n, B, S, epoch, b)              # one batch, without state
Command line (tests/test_transformer_torch.c compares it with the C loader):
    loader_order.py indices --n N --batch B --seed S --steps K [--world W --rank R] [--no-shuffle]
        one line per step: the sample indices of this rank's slice
    loader_order.py key --seed S --purpose P --index I     qs_rng_key as 0x%016x
    loader_order.py stream --data NAME [--data-dir DIR] [--test]
        "<tokens> <T> <V> <FNV-1a 64 of the tokens (as uint16 values), 0x%016x>"
"""
import argparse
import gzip
import os
import stat
import sys

M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


def philox4x32(key, ctr_hi, ctr_lo):
    """One Philox-4x32-10 block: 4 uint32 for a 64-bit key and the counter (hi, lo)."""
    c0, c1, c2, c3 = ctr_lo & M32, (ctr_lo >> 32) & M32, ctr_hi & M32, (ctr_hi >> 32) & M32
    k0, k1 = key & M32, (key >> 32) & M32
    for _ in range(10):
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c3 ^ k1) & M32, p0 & M32
        k0 = (k0 + 0x9E3779B9) & M32
        k1 = (k1 + 0xBB67AE85) & M32
    return [c0, c1, c2, c3]


def _mix64(z):
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def rng_key(seed, purpose, index):
    """qs_rng_key(seed, purpose, index)."""
    h = 0xCBF29CE484222325
    for b in purpose.encode():
        h = ((h ^ b) * 0x100000001B3) & M64
    return _mix64(_mix64(seed & M64) ^ h ^ _mix64((index + 0x632BE59BD9B4E019) & M64))


class Rng:
    """qs_rng: a sequential stream over one key; counter counts 128-bit blocks."""

    def __init__(self, key, counter=0):
        self.key, self.counter, self.buf, self.used = key & M64, counter, None, 4

    def u32(self):
        if self.used >= 4:
            self.buf = philox4x32(self.key, 0, self.counter)
            self.counter = (self.counter + 1) & M64
            self.used = 0
        v = self.buf[self.used]
        self.used += 1
        return v

    def below(self, n):
        """qs_rng_below: uniform in [0, n), unbiased by rejection."""
        if n <= 1:
            return 0
        if n <= M32:
            limit = M32 - (M32 % n + 1) % n
            while True:
                v = self.u32()
                if v <= limit:
                    return v % n
        limit = M64 - (M64 % n + 1) % n
        while True:
            v = (self.u32() << 32) | self.u32()
            if v <= limit:
                return v % n

    def shuffle(self, perm):
        """qs_rng_shuffle_i64 (Fisher–Yates from the end), in place."""
        for i in range(len(perm) - 1, 0, -1):
            j = self.below(i + 1)
            perm[i], perm[j] = perm[j], perm[i]
        return perm


def permutation(n, seed, epoch, shuffle=True):
    """The visiting order of epoch `epoch` (loader.c build_perm)."""
    perm = list(range(n))
    if shuffle:
        Rng(rng_key(seed, "loader-shuffle", epoch), 0).shuffle(perm)
    return perm


def rank_slice(batch, world, rank):
    """(offset, local) of rank's slice of a global batch (qs_loader_init's even split)."""
    base, rem = divmod(batch, world)
    return rank * base + min(rank, rem), base + (1 if rank < rem else 0)


def steps_per_epoch(n, batch, drop_last=True):
    return n // batch if drop_last else (n + batch - 1) // batch


def batch_indices(n, batch, seed, epoch, b, shuffle=True, world=1, rank=0, perm=None):
    """Sample indices of global batch b of epoch `epoch` for `rank` (positions past the end
    repeat the last sample, as the loader pads an evaluation batch)."""
    perm = perm if perm is not None else permutation(n, seed, epoch, shuffle)
    off, local = rank_slice(batch, world, rank)
    first = b * batch + off
    return [perm[min(p, n - 1)] for p in range(first, first + local)]


class Loader:
    """qs_loader_next's sequence of batches: epoch after epoch, starting at (epoch, batch)."""

    def __init__(self, n, batch, seed, shuffle=True, drop_last=True, world=1, rank=0, epoch=0, batch_in_epoch=0):
        if n < 1 or batch < world or (drop_last and n < batch):
            raise ValueError("loader: %d samples, global batch %d, %d ranks" % (n, batch, world))
        self.n, self.batch, self.seed, self.shuffle = n, batch, seed, shuffle
        self.world, self.rank = world, rank
        self.steps = steps_per_epoch(n, batch, drop_last)
        self.epoch, self.b = epoch, batch_in_epoch
        self._perm, self._perm_epoch = None, None

    def next(self):
        """The sample indices of the next step (this rank's slice)."""
        if self.b >= self.steps:
            self.epoch, self.b = self.epoch + 1, 0
        if self._perm_epoch != self.epoch:
            self._perm, self._perm_epoch = permutation(self.n, self.seed, self.epoch, self.shuffle), self.epoch
        idx = batch_indices(self.n, self.batch, self.seed, self.epoch, self.b, self.shuffle, self.world, self.rank,
                            self._perm)
        self.b += 1
        return idx


# ---------------------------------------------------------------- token streams
FORTUNES_DIR = "/usr/share/games/fortunes"
SYNTHETIC_SEED = 0x5EED
TOKEN_MAGIC, TOKEN_VERSION, TOKEN_HEADER = 20240520, 1, 1024


def _fortunes(data_dir):
    """The corpus' fortunes (bytes) in order (src/data/fortunes.c)."""
    names = []
    for name in os.listdir(data_dir):
        if name.startswith(".") or name.endswith(".dat") or name.endswith(".u8"):
            continue
        if stat.S_ISREG(os.lstat(os.path.join(data_dir, name)).st_mode):
            names.append(name)
    if not names:
        raise FileNotFoundError("%s holds no fortune files (Debian packages fortunes, fortunes-min)" % data_dir)
    out = []
    for name in sorted(names, key=os.fsencode):
        with open(os.path.join(data_dir, name), "rb") as f:
            text = f.read()
        start, line, n = 0, 0, len(text)
        while line <= n:
            nl = text.find(b"\n", line)
            end = nl if nl >= 0 else n
            sep = end - line == 1 and text[line:line + 1] == b"%"
            if sep or end == n:
                stop = line if sep else n
                while stop > start and text[stop - 1] == 0x0A:
                    stop -= 1
                if stop > start:
                    out.append(text[start:stop])
                start = end + 1
            if end == n:
                break
            line = end + 1
    return out


def fortunes_stream(data_dir=None, train=True):
    """Token ids (a list of ints) of the fortunes split (qs_fortunes_load)."""
    parts = []
    for k, f in enumerate(_fortunes(data_dir or FORTUNES_DIR)):
        if (k % 10 == 9) != train:
            parts.append(f + b"\n\n")
    return list(b"".join(parts))


def read_token_file(path, vocab=65536):
    """The tokens of an llm.c token file (plain or gzip), checked as qs_token_file_read does."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < TOKEN_HEADER:
        raise ValueError("%s: malformed header" % path)
    magic, version, n = (int.from_bytes(raw[i:i + 4], "little", signed=True) for i in (0, 4, 8))
    if magic != TOKEN_MAGIC or version != TOKEN_VERSION or n < 0 or len(raw) != TOKEN_HEADER + 2 * n:
        raise ValueError("%s: not an llm.c token file of %d tokens (magic %d, version %d)" % (path, n, magic, version))
    body = raw[TOKEN_HEADER:]
    toks = [body[2 * i] | (body[2 * i + 1] << 8) for i in range(n)]
    if toks and max(toks) >= vocab:
        raise ValueError("%s: token %d is not below the vocabulary size %d" % (path, max(toks), vocab))
    return toks


def synthetic_text(vocab, n_tokens, stream, seed=SYNTHETIC_SEED):
    """qs_dataset_synthetic_text's stream."""
    r = Rng(rng_key(seed, "synthetic-text-next", 0), 0)
    nxt = [r.below(vocab) for _ in range(vocab)]
    r = Rng(rng_key(seed, "synthetic-text-stream", stream), 0)
    toks = [r.below(vocab)]
    follow_below = 0.800000011920928955078125  # 0.8f
    for _ in range(1, n_tokens):
        follow = (r.u32() >> 8) * (1.0 / 16777216.0) < follow_below
        noise = r.below(vocab)
        toks.append(nxt[toks[-1]] if follow else noise)
    return toks


def _split_tokens_spec(spec):
    """tokens:PATH[:T[:V]] → (path, T, V): a trailing field counts if it is 1..9 digits."""
    path, nums = spec, []
    while len(nums) < 2:
        head, sep, tail = path.rpartition(":")
        if not sep or not head or not (tail.isdigit() and len(tail) <= 9):
            break
        nums.append(int(tail))
        path = head
    T, V = 1024, 50257
    if len(nums) == 1:
        T = nums[0]
    elif len(nums) == 2:
        V, T = nums
    return path, T, V


def _val_sibling(path):
    d, base = os.path.split(path)
    i = base.rfind("train")
    if i < 0:
        raise FileNotFoundError("tokens:%s has no test split (no \"train\" in the file name)" % path)
    return os.path.join(d, base[:i] + "val" + base[i + 5:])


def token_stream(data, data_dir=None, train=True):
    """(tokens, T, vocabulary) of qsync data name `data` (fortunes[:T], tokens:PATH[:T[:V]],
    synthetic-text:V:T) and split."""
    if data == "fortunes" or data.startswith("fortunes:"):
        T = int(data.split(":", 1)[1]) if ":" in data else 256
        return fortunes_stream(data_dir, train), T, 256
    if data.startswith("tokens:"):
        path, T, V = _split_tokens_spec(data[len("tokens:"):])
        return read_token_file(path if train else _val_sibling(path), V), T, V
    if data.startswith("synthetic-text:"):
        V, T = (int(v) for v in data.split(":")[1:3])
        n = (max(T * 256, 100000) + 1) if train else (max(T * 64, 20000) + 1)
        return synthetic_text(V, n, 0 if train else 1), T, V
    raise ValueError("unsupported data %r: use fortunes[:T], tokens:PATH[:T[:V]] or synthetic-text:V:T" % data)


def fnv1a64(tokens):
    h = 0xCBF29CE484222325
    for t in tokens:
        h = ((h ^ t) * 0x100000001B3) & M64
    return h


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("indices")
    a.add_argument("--n", type=int, required=True)
    a.add_argument("--batch", type=int, required=True)
    a.add_argument("--seed", type=int, required=True)
    a.add_argument("--steps", type=int, required=True)
    a.add_argument("--world", type=int, default=1)
    a.add_argument("--rank", type=int, default=0)
    a.add_argument("--no-shuffle", action="store_true")
    a.add_argument("--keep-last", action="store_true", help="no drop_last (evaluation order)")
    st = sub.add_parser("stream")
    st.add_argument("--data", required=True)
    st.add_argument("--data-dir")
    st.add_argument("--test", action="store_true", help="the test split (default: training)")
    k = sub.add_parser("key")
    k.add_argument("--seed", type=int, required=True)
    k.add_argument("--purpose", required=True)
    k.add_argument("--index", type=int, required=True)
    args = ap.parse_args(argv)
    if args.cmd == "stream":
        toks, T, V = token_stream(args.data, args.data_dir, not args.test)
        print("%d %d %d 0x%016x" % (len(toks), T, V, fnv1a64(toks)))
        return 0
    if args.cmd == "key":
        print("0x%016x" % rng_key(args.seed, args.purpose, args.index))
        return 0
    ld = Loader(args.n, args.batch, args.seed, shuffle=not args.no_shuffle, drop_last=not args.keep_last,
                world=args.world, rank=args.rank)
    out = []
    for _ in range(args.steps):
        out.append(" ".join(str(i) for i in ld.next()))
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
