#!/usr/bin/env python3
"""Tokens jobs against Megatron-LM's GPT dataset and Grain's packing (issue 34), in one run, on
the same token files: packed sequences of L tokens delivered to one trainer process, per second.

The data: two Megatron-LM indexed datasets written with croupier.tokens.write_indexed_dataset
(uint16 tokens), --documents documents each (default 20,000), lengths lognormal with a median of
400 tokens (sigma 1), tokens random, everything seeded; in a temp folder the run removes. The two
sources are mixed 3:1, L = --length (2,048), --batch sequences a batch (8).

The systems, each in a process of its own (the "trainer"), started and measured one after the
other; every process a system starts is a descendant of its trainer and is stopped with it:

  croupier_concat    croupier.local_cluster(producers=1, threads=1): a dispatcher process and one
  croupier_best_fit  producer process making batches on one thread; a tokens job
                     (croupier.tokens.create_token_job, consumers=1, packing concat or best_fit,
                     the default packing window of 4,096 documents) read by a croupier.Consumer
                     of world 1 in the trainer. Batches: input_ids, labels, position_ids,
                     segment_ids, loss_mask, int32 [B, L].
  megatron           megatron-core's GPTDataset for each source, blended by
                     BlendedMegatronDatasetBuilder (weights 3:1, sequence_length L, the index
                     files built into a fresh cache folder: its build time is reported apart), read
                     by a torch DataLoader(batch_size=B, num_workers=1): one worker process.
                     create_attention_mask=False (croupier makes no mask either); positions,
                     attention and loss not reset at end-of-document tokens (Megatron's
                     defaults). A gloo process group of world 1 is set up, as the blended
                     dataset's cache needs torch.distributed. Batches: tokens, labels,
                     position_ids (int64), loss_mask (float32), [B, L].
  grain_concat       Grain 0.2.18: per source a MapDataset of the document pieces (documents
  grain_best_fit     longer than L cut into pieces of L, as croupier's best_fit does: Grain's
                     packers require elements no longer than L), shuffled (seeded), repeated,
                     each piece read with numpy from a memory mapping of the .bin (the .idx's
                     pointers); MapDataset.mix with weights 3:1; to_iter_dataset with
                     ReadOptions(num_threads=1); ConcatThenSplitIterDataset or
                     BestFitPackIterDataset (--grain-bins packing bins, default 128); batch(B);
                     labels, positions and segment ids made per batch with numpy; mp_prefetch
                     with one worker process. Batches: input_ids (uint16), labels,
                     position_ids, segment_ids (int32), [B, L].

  croupier_text      text tokenized online: the standard library's .py files (four copies, each
  grain_text         copy's documents starting "# copy K"; --quick: one) as one Parquet file of
                     row groups of 64 documents, and a byte-level BPE tokenizer of 8,192 tokens
                     trained on them; one source, concat packing, each document followed by
                     "<eod>". croupier: a tokens job over croupier.tokens.TextSource (its
                     documents' lengths counted when the job is created: lengths_and_job_create_s)
                     made by one `croupier produce --job bench --threads 1` process, which reads
                     a batch's documents from the Parquet file and tokenizes them
                     (encode_batch_fast; on jemalloc, as croupier produce runs itself when
                     it is installed: CROUPIER_MALLOC=system for glibc's malloc). Grain: MapDataset.source of the same documents,
                     shuffle, repeat, map(tokenizer.encode(text).ids + [eod]) per document,
                     ConcatThenSplitIterDataset, batch, mp_prefetch with one worker process. Same
                     tokenizer file, same tokens per document.

The budget: each system has exactly one process making batches (croupier: the producer, started
with threads=1; Megatron: the DataLoader's one worker; Grain: mp_prefetch's one worker, reading on
one thread) and the trainer receiving them; croupier also has its dispatcher process. From the
first batch on (the window), the trainer runs on one core and every process it started on the
other (sched_setaffinity of every thread; --no-pin leaves all of them on both cores): one core
for making batches, one for receiving them, for every system. Without pinning, croupier's producer
took 1.3 cores at threads=1 (its connection thread also makes a batch when none is ready), and
Megatron's worker up to 1.2. Each system's line gives the CPU seconds every one of its processes
used in the window (cpu_s_by_process) and their sum per second (cores_used); cpu_us_per_token is
that CPU over the tokens delivered, the figure that does not depend on the budget.

The measurement: after the trainer has its first batch (time-to-first-batch, reported with its
parts: cluster start and job creation; Megatron's index build; Grain's pipeline and worker
start), it reads batches for --seconds seconds; sequences/s and tokens/s are over that window
only. tokens/s counts the tokens of documents (padding left out); positions/s counts every
position (sequences x L). padding_fraction: the fraction of positions where segment_ids == 0
(Megatron's and the concat packings': 0, or the end of a source epoch).

Also, in the same run: `read_alone`, the same kind of work without packing or dealing: documents
of both sources in a seeded permutation, mixed 3:1, their tokens sliced from a numpy memory
mapping of the .bin and copied into int32 rows of L (one process, one thread), for the CPU per
token that reading the tokens costs; against it, the croupier producer's CPU per token delivered.

The ratios (croupier / peer, from the same run): croupier_concat / megatron, croupier_concat /
grain_concat, croupier_best_fit / grain_best_fit on tokens/s; best-fit padding fractions side by
side; CPU per token (all of a system's processes) croupier / peer; the producer's CPU per token
against read_alone's.

The padding, in the same run (system "padding"): best_fit's padding fraction over
--padding-sequences sequences (16,384) for croupier's packing_window 256, 1,024 and 4,096
documents and Grain's num_packing_bins 16, 128 and 1,024 (Grain in one process, no workers).

How long, here: about 4 minutes (six windows of 30 s, start-up, the padding figures); --quick
about 1 minute.

JSON lines on stdout: one per system {"bench": "tokens", "system", ...}, one per ratio
{"bench": "tokens", "case", "value", "baseline", "ratio"}; a table on stderr.

With the text systems (data written and the tokenizer trained once, reported as
text_write_and_train_s), add about 2 minutes.

usage: .venv/bin/python bench/bench_tokens.py [--quick] [--seconds 30] [--documents 20000]
       [--length 2048] [--batch 8] [--grain-bins 128] [--padding-sequences 16384] [--no-pin]
       [--systems croupier_concat,croupier_best_fit,megatron,grain_concat,grain_best_fit,
                  read_alone,padding,croupier_text,grain_text]
--quick: 2 x 4,000 documents, 5 s a system, 2,048 sequences a padding figure (by name only:
nothing else runs it; `make bench`, bench/run.py, runs the full one).
"""
import argparse
import json
import os
import pathlib
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))
import cpu_budget  # noqa: E402

SYSTEMS = ("croupier_concat", "croupier_best_fit", "megatron", "grain_concat", "grain_best_fit",
           "read_alone", "padding", "croupier_text", "grain_text")
WEIGHTS = (3.0, 1.0)
MEDIAN_LENGTH = 400
SIGMA = 1.0
VOCAB = 50_000


# --- The data ---------------------------------------------------------------------------------

def write_data(folder, documents, seed=1):
    """Two indexed datasets, folder/src0 and folder/src1; their prefixes."""
    from croupier import tokens
    rng = np.random.default_rng(seed)
    prefixes = []
    for s in range(2):
        lengths = np.maximum(1, np.round(rng.lognormal(np.log(MEDIAN_LENGTH), SIGMA, documents)))
        flat = rng.integers(1, VOCAB, int(lengths.sum()), dtype=np.uint16)
        ends = np.cumsum(lengths.astype(np.int64))
        docs = np.split(flat, ends[:-1])
        prefix = str(folder / f"src{s}")
        tokens.write_indexed_dataset(prefix, docs, dtype="uint16")
        prefixes.append(prefix)
    return prefixes


def read_index(prefix):
    """(byte offsets into the .bin, lengths in tokens) of every document of a uint16 source,
    from the croupier reader's lengths (the .idx checked) and their running sum."""
    from croupier import tokens
    lengths = np.asarray(tokens.IndexedDataset(prefix).lengths, dtype=np.int64)
    starts = np.zeros_like(lengths)
    starts[1:] = np.cumsum(lengths)[:-1]
    return starts, lengths


# --- CPU of a trainer and its descendants -------------------------------------------------------

def _label(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return f"pid{pid}"
    if not argv:
        return f"pid{pid}"
    name = os.path.basename(argv[0])
    if name.startswith("croupier") and len(argv) > 1:
        return argv[1]  # dispatcher / producer
    if "python" in name:
        return "python worker"
    return name


def cpu_snapshot():
    """{process label: CPU seconds} of this process ("trainer") and its live descendants."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    out = {"trainer": r.ru_utime + r.ru_stime}
    for pid, cpu in cpu_budget.descendants().items():
        label = _label(pid)
        out[label] = out.get(label, 0.0) + cpu
    return out


def cpu_delta(before, after):
    return {k: round(after[k] - before.get(k, 0.0), 2) for k in after}


def pin_tasks(pid, cpus):
    """Every thread of process `pid` onto `cpus` (threads it starts later inherit it)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (ProcessLookupError, FileNotFoundError):
            pass


def pin_run(maker_only=False):
    """The budget of the window: the trainer (this process) on the first core of this process's
    cores, every process it started (what makes the batches: the producer and the dispatcher, or
    the DataLoader's or Grain's worker) on the second. maker_only: this process makes the batches
    (read_alone), on the second core. None if there are fewer than 2 cores; else the pinning."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    trainer, maker = {cores[0]}, {cores[1]}
    pin_tasks(os.getpid(), maker if maker_only else trainer)
    others = list(cpu_budget.descendants())
    for pid in others:
        try:
            pin_tasks(pid, maker)
        except FileNotFoundError:
            pass
    return {"trainer": sorted(maker if maker_only else trainer),
            "makers": sorted(maker), "processes_pinned": len(others)}


class Window:
    """Counts what a trainer receives after its first batch, for `seconds`; `pin`: the trainer
    and the processes making its batches get a core each from the first batch on (pin_run)."""

    def __init__(self, seconds, length, pin=True, maker_only=False):
        self.seconds, self.length = seconds, length
        self.pin, self.maker_only = pin, maker_only
        self.pinned = None
        self.sequences = self.tokens = self.padding = self.batches = 0
        self.start = self.cpu0 = None

    def first(self):
        if self.pin:
            self.pinned = pin_run(self.maker_only)
        self.cpu0 = cpu_snapshot()
        self.start = time.perf_counter()

    def add(self, rows, pad_positions):
        self.batches += 1
        self.sequences += rows
        self.padding += int(pad_positions)
        self.tokens += rows * self.length - int(pad_positions)
        return time.perf_counter() - self.start >= self.seconds

    def read_segments(self, segments, t0, shape):
        """Counts the batches' segment_ids arrays from `segments`, the first (checked to be of
        `shape`) starting the window, until it ends. Returns (seconds from t0 to the first
        batch, result())."""
        first = None
        for seg in segments:
            if first is None:
                first = time.perf_counter() - t0
                self.first()
                assert seg.shape == shape, seg.shape
                continue
            if self.add(seg.shape[0], np.count_nonzero(seg == 0)):
                break
        return first, self.result()

    def result(self):
        wall = time.perf_counter() - self.start
        cpu = cpu_delta(self.cpu0, cpu_snapshot())
        positions = self.sequences * self.length
        return {"window_s": round(wall, 2), "sequences": self.sequences,
                "sequences_per_s": round(self.sequences / wall, 1),
                "tokens_per_s": round(self.tokens / wall),
                "positions_per_s": round(positions / wall),
                "padding_fraction": round(self.padding / max(1, positions), 4),
                "cpu_s_by_process": cpu, "cpu_s": round(sum(cpu.values()), 2),
                "cores_used": round(sum(cpu.values()) / wall, 2), "pinned": self.pinned,
                "cpu_us_per_token": round(1e6 * sum(cpu.values()) / max(1, self.tokens), 4)}


# --- The systems (each runs in its own trainer process: --role) --------------------------------

def run_croupier(args, prefixes, packing):
    import croupier
    from croupier import tokens
    t0 = time.perf_counter()
    with croupier.local_cluster(producers=1, threads=1, work_dir=args.work / "cluster") as cl:
        t_cluster = time.perf_counter() - t0
        steps = 10_000_000 // args.batch  # more than any window reads
        t1 = time.perf_counter()
        tokens.create_token_job(cl.address, "bench", prefixes, consumers=1,
                                sequence_length=args.length, global_batch=args.batch,
                                steps_per_epoch=steps, packing=packing, weights=list(WEIGHTS),
                                seed=1)
        t_job = time.perf_counter() - t1
        feed = cl.consumer("bench", 0, 1)
        w = Window(args.seconds, args.length, args.pin)
        try:
            first, out = w.read_segments((b["segment_ids"] for b in feed.epoch(0)), t0,
                                         (args.batch, args.length))
        finally:
            feed.close()
    out.update(first_batch_s=round(first, 3), cluster_start_s=round(t_cluster, 3),
               job_create_s=round(t_job, 3),
               producer_cpu_us_per_token=round(
                   1e6 * out["cpu_s_by_process"].get("producer", 0.0) / max(1, w.tokens), 4))
    return out


def run_megatron(args, prefixes):
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import torch
    import torch.distributed as dist
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder)
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    class Tokenizer:  # what GPTDataset asks of one: its ids and an identity for the cache
        vocab_size = 65536
        eod = 0
        pad = 0
        unique_identifiers = {"class": "bench_tokens.Tokenizer"}

    t0 = time.perf_counter()
    dist.init_process_group("gloo", init_method=f"file://{args.work}/pg", rank=0, world_size=1)
    config = GPTDatasetConfig(
        random_seed=1, sequence_length=args.length,
        blend_per_split=[(list(prefixes), list(WEIGHTS)), None, None],
        path_to_cache=str(args.work / "megatron-cache"), tokenizer=Tokenizer(),
        reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
        create_attention_mask=False)
    # As many samples as a window could read at 5,000 sequences/s (Megatron builds them all; it
    # delivered about 2,000 a second here).
    samples = int(5_000 * args.seconds) + 10 * args.batch
    t1 = time.perf_counter()
    train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [samples, None, None],
                                                lambda: True, config).build()
    t_build = time.perf_counter() - t1
    loader = torch.utils.data.DataLoader(train, batch_size=args.batch, num_workers=1)
    w = Window(args.seconds, args.length, args.pin)
    t2 = time.perf_counter()
    it = iter(loader)
    try:
        for i, batch in enumerate(it):
            if i == 0:
                first = time.perf_counter() - t0
                first_loader = time.perf_counter() - t2
                w.first()
                assert tuple(batch["tokens"].shape) == (args.batch, args.length)
                continue
            if w.add(batch["tokens"].shape[0], 0):
                break
        else:
            raise RuntimeError(f"Megatron's {samples} samples were read before the window ended")
        out = w.result()
    finally:
        del it
    dist.destroy_process_group()
    out.update(first_batch_s=round(first, 3), index_build_s=round(t_build, 3),
               loader_first_batch_s=round(first_loader, 3), samples_built=samples)
    return out


class _Pieces:
    """The pieces of one source's documents (documents longer than L cut into pieces of L) and
    a reader of them from a memory mapping of the .bin; picklable (it reopens the mapping)."""

    def __init__(self, prefix, length):
        starts, lengths = read_index(prefix)
        cuts = (lengths + length - 1) // length
        doc = np.repeat(np.arange(len(lengths)), cuts)
        first = np.cumsum(cuts) - cuts
        k = np.arange(len(doc)) - np.repeat(first, cuts)
        self.start = starts[doc] + k * length
        self.size = np.minimum(length, lengths[doc] - k * length)
        self.path = prefix + ".bin"
        self._bin = None

    def __len__(self):
        return len(self.start)

    def __getitem__(self, i):
        if self._bin is None:
            self._bin = np.memmap(self.path, dtype=np.uint16, mode="r")
        s = self.start[i]
        return {"input_ids": np.array(self._bin[s:s + self.size[i]])}

    def __getstate__(self):
        return {**self.__dict__, "_bin": None}


def _grain_columns(batch):
    """labels, position_ids and segment_ids as the other systems give them, from the packed
    batch: the next token within a segment, -100 at a segment's last token and at padding."""
    ids = batch["input_ids"]
    seg = batch["input_ids_segment_ids"]
    labels = np.full(ids.shape, -100, dtype=np.int32)
    same = (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] != 0)
    labels[:, :-1] = np.where(same, ids[:, 1:], -100)
    return {"input_ids": ids, "labels": labels,
            "position_ids": batch["input_ids_positions"].astype(np.int32),
            "segment_ids": seg.astype(np.int32)}


def grain_pipeline(prefixes, length, batch, packing, bins, workers=1):
    import grain
    sources = [grain.MapDataset.source(_Pieces(p, length)).shuffle(seed=1 + s).repeat()
               for s, p in enumerate(prefixes)]
    mixed = grain.MapDataset.mix(sources, weights=list(WEIGHTS))
    ds = mixed.to_iter_dataset(grain.ReadOptions(num_threads=1, prefetch_buffer_size=64))
    if packing == "concat":
        ds = grain.experimental.ConcatThenSplitIterDataset(ds, length_struct={"input_ids": length})
    else:
        ds = grain.experimental.BestFitPackIterDataset(
            ds, length_struct={"input_ids": length}, num_packing_bins=bins, seed=1,
            shuffle_bins=False)
    ds = ds.batch(batch, drop_remainder=True).map(_grain_columns)
    if workers:
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return ds


def run_grain(args, prefixes, packing):
    import logging
    from absl import flags
    logging.disable(logging.WARNING)
    # Grain 0.2.18 reads an absl flag when it starts its worker process, which fails in a program
    # that has not parsed absl's flags (as bench/map_roles.py does too).
    flags.FLAGS(sys.argv[:1])
    t0 = time.perf_counter()
    ds = grain_pipeline(prefixes, args.length, args.batch, packing, args.grain_bins)
    it = iter(ds)
    t_pipe = time.perf_counter() - t0
    w = Window(args.seconds, args.length, args.pin)
    try:
        first, out = w.read_segments((b["segment_ids"] for b in it), t0,
                                     (args.batch, args.length))
    finally:
        del it
    out.update(first_batch_s=round(first, 3), pipeline_s=round(t_pipe, 3),
               num_packing_bins=args.grain_bins if packing == "best_fit" else None)
    return out


def run_read_alone(args, prefixes):
    """Documents in a seeded permutation, mixed 3:1 (deficit order), sliced from a memory
    mapping and copied into int32 rows of L: the reading that any packing has to do."""
    bins, orders, index = [], [], []
    rng = np.random.default_rng(1)
    for p in prefixes:
        starts, lengths = read_index(p)
        bins.append(np.memmap(p + ".bin", dtype=np.uint16, mode="r"))
        index.append((starts, lengths))
        orders.append(rng.permutation(len(lengths)))
    pos = [0, 0]
    taken = [0.0, 0.0]
    total = sum(WEIGHTS)
    w = Window(args.seconds, args.length, args.pin, maker_only=True)
    w.first()
    row = np.empty(args.batch * args.length, dtype=np.int32)
    while True:
        filled = 0
        while filled < row.size:
            s = min((0, 1), key=lambda k: taken[k] - WEIGHTS[k] / total * (sum(taken) + 1))
            taken[s] += 1
            d = orders[s][pos[s] % len(orders[s])]
            pos[s] += 1
            start, n = index[s][0][d], index[s][1][d]
            n = min(n, row.size - filled)
            row[filled:filled + n] = bins[s][start:start + n]
            filled += n
        out = row.reshape(args.batch, args.length)
        if w.add(out.shape[0], 0):
            break
    return w.result()


def run_padding(args, prefixes):
    """best_fit padding at several packing windows: croupier's packing_window (documents) and
    Grain's num_packing_bins (bins), each over --padding-sequences sequences of the same files
    (Grain in this process, without worker processes: only the packing is looked at)."""
    import croupier
    from absl import flags
    from croupier import tokens
    flags.FLAGS(sys.argv[:1])
    n = args.padding_sequences
    out = {"sequences": n, "croupier": {}, "grain": {}}
    with croupier.local_cluster(producers=1, threads=1, work_dir=args.work / "cluster") as cl:
        for window in (256, 1024, 4096):
            name = f"pad{window}"
            tokens.create_token_job(cl.address, name, prefixes, consumers=1,
                                    sequence_length=args.length, global_batch=args.batch,
                                    steps_per_epoch=n // args.batch, packing="best_fit",
                                    packing_window=window, weights=list(WEIGHTS), seed=1, epochs=1)
            feed = cl.consumer(name, 0, 1)
            pad = total = 0
            try:
                for batch in feed.epoch(0):
                    pad += np.count_nonzero(batch["segment_ids"] == 0)
                    total += batch["segment_ids"].size
            finally:
                feed.close()
            out["croupier"][f"packing_window={window}"] = round(pad / total, 4)
    for bins in (16, 128, 1024):
        ds = grain_pipeline(prefixes, args.length, args.batch, "best_fit", bins, workers=0)
        pad = total = 0
        for i, b in enumerate(ds):
            pad += np.count_nonzero(b["segment_ids"] == 0)
            total += b["segment_ids"].size
            if (i + 1) * args.batch >= n:
                break
        out["grain"][f"num_packing_bins={bins}"] = round(pad / total, 4)
    return out


# --- Text tokenized online (croupier_text, grain_text) ---------------------------------------

TEXT_VOCAB = 8192


def write_text(folder, copies):
    """The standard library's modules (every .py file under it but site-packages), `copies` times
    over (each copy's documents start with a line of their own, "# copy K"), as one Parquet file
    of documents (row groups of 64), and a byte-level BPE tokenizer trained on one copy:
    (parquet path, tokenizer path, documents). The copies make a corpus that one window does not
    read through: a producer's cache of tokenized documents (8 MiB) then holds no document a
    later source epoch asks for again, as with any real corpus."""
    import sysconfig

    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "idlelib", "lib2to3", "site-packages", "dist-packages", "tkinter",
            "turtledemo"}
    paths = sorted(p for p in root.rglob("*.py") if not skip & set(p.relative_to(root).parts))
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in paths]
    corpus = [f"# copy {k}\n{t}" for k in range(copies) for t in texts]
    pq.write_table(pa.table({"text": corpus}), folder / "text.parquet", row_group_size=64)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=TEXT_VOCAB, special_tokens=["<eod>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder / "text.parquet", folder / "tokenizer.json", len(corpus)


def run_croupier_text(args, parquet, tokenizer):
    import croupier
    from croupier import tokens
    t0 = time.perf_counter()
    with croupier.local_cluster(producers=0, threads=1, work_dir=args.work / "cluster") as cl:
        t_cluster = time.perf_counter() - t0
        t1 = time.perf_counter()
        source = tokens.TextSource([str(parquet)], str(tokenizer), eod_token="<eod>",
                                   lengths_dir=str(args.work / "lengths"))
        tokens.create_token_job(cl.address, "bench", [source], consumers=1,
                                sequence_length=args.length, global_batch=args.batch,
                                steps_per_epoch=10_000_000 // args.batch, packing="concat",
                                seed=1)
        t_job = time.perf_counter() - t1  # the documents' lengths counted once, in it
        producer = subprocess.Popen(
            [croupier.croupier_binary(), "produce", "--dispatcher", cl.address, "--job", "bench",
             "--threads", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=dict(os.environ, CROUPIER_PYTHON=sys.executable))
        feed = cl.consumer("bench", 0, 1)
        w = Window(args.seconds, args.length, args.pin)
        try:
            first, out = w.read_segments((b["segment_ids"] for b in feed.epoch(0)), t0,
                                         (args.batch, args.length))
        finally:
            feed.close()
            producer.kill()
            producer.wait()
    out.update(first_batch_s=round(first, 3), cluster_start_s=round(t_cluster, 3),
               lengths_and_job_create_s=round(t_job, 3))
    return out


class _TextSource:
    """Grain's source: the Parquet file's documents, read in each process that uses it."""

    def __init__(self, parquet):
        self.parquet = str(parquet)
        self.texts = None

    def __len__(self):
        import pyarrow.parquet as pq
        return pq.ParquetFile(self.parquet).metadata.num_rows

    def __getitem__(self, i):
        if self.texts is None:
            import pyarrow.parquet as pq
            self.texts = pq.read_table(self.parquet).column("text").to_pylist()
        return self.texts[i]


class _Tokenize:
    """Grain's map: a document's token ids and the end-of-document id, as croupier's."""

    def __init__(self, tokenizer):
        self.path = str(tokenizer)
        self.tokenizer = None

    def __call__(self, text):
        if self.tokenizer is None:
            from tokenizers import Tokenizer
            self.tokenizer = Tokenizer.from_file(self.path)
            self.eod = self.tokenizer.token_to_id("<eod>")
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        ids.append(self.eod)
        return {"input_ids": np.asarray(ids, dtype=np.int32)}


def run_grain_text(args, parquet, tokenizer):
    import logging

    import grain
    from absl import flags
    logging.disable(logging.WARNING)
    flags.FLAGS(sys.argv[:1])
    t0 = time.perf_counter()
    ds = (grain.MapDataset.source(_TextSource(parquet)).shuffle(seed=1).repeat()
          .map(_Tokenize(tokenizer))
          .to_iter_dataset(grain.ReadOptions(num_threads=1, prefetch_buffer_size=64)))
    ds = grain.experimental.ConcatThenSplitIterDataset(ds, length_struct={"input_ids": args.length})
    ds = ds.batch(args.batch, drop_remainder=True).map(_grain_columns)
    ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=1))
    it = iter(ds)
    t_pipe = time.perf_counter() - t0
    w = Window(args.seconds, args.length, args.pin)
    try:
        first, out = w.read_segments((b["segment_ids"] for b in it), t0,
                                     (args.batch, args.length))
    finally:
        del it
    out.update(first_batch_s=round(first, 3), pipeline_s=round(t_pipe, 3))
    return out


def role_main(args):
    prefixes = [str(args.work.parent / "data" / f"src{s}") for s in range(2)]
    if args.role.startswith("croupier_") and args.role != "croupier_text":
        out = run_croupier(args, prefixes, args.role[len("croupier_"):])
    elif args.role == "megatron":
        out = run_megatron(args, prefixes)
    elif args.role.startswith("grain_") and args.role != "grain_text":
        out = run_grain(args, prefixes, args.role[len("grain_"):])
    elif args.role in ("croupier_text", "grain_text"):
        text = args.work.parent / "text"
        run = run_croupier_text if args.role == "croupier_text" else run_grain_text
        out = run(args, text / "text.parquet", text / "tokenizer.json")
    elif args.role == "padding":
        out = run_padding(args, prefixes)
    else:
        out = run_read_alone(args, prefixes)
    print("RESULT " + json.dumps(out), flush=True)


# --- The driver -------------------------------------------------------------------------------

def run_system(args, name, root):
    """Runs one system's trainer in its own session; kills that session (its process group,
    by id) if it outlives --seconds plus a bound for start-up."""
    work = root / name
    work.mkdir()
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--role", name,
           "--work", str(work), "--seconds", str(args.seconds), "--length", str(args.length),
           "--batch", str(args.batch), "--grain-bins", str(args.grain_bins),
           "--padding-sequences", str(args.padding_sequences), *([] if args.pin else ["--no-pin"])]
    bound = args.seconds + 180
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=bound)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return {"error": f"did not end within {bound} s", "stderr": err[-2000:]}
    finally:
        try:  # whatever the trainer left behind in its session
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"error": f"exit status {proc.returncode}", "stderr": err[-3000:]}


def machine_load():
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seconds", type=float, default=None, help="the window of each system")
    p.add_argument("--documents", type=int, default=None, help="documents per source")
    p.add_argument("--length", type=int, default=2048)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--grain-bins", type=int, default=128)
    p.add_argument("--padding-sequences", type=int, default=None,
                   help="sequences read for each padding figure (default 16,384; --quick 2,048)")
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--no-pin", dest="pin", action="store_false",
                   help="leave every process on all cores during the window")
    p.add_argument("--role", help=argparse.SUPPRESS)
    p.add_argument("--work", type=pathlib.Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.seconds is None:
        args.seconds = 5.0 if args.quick else 30.0
    if args.padding_sequences is None:
        args.padding_sequences = 2_048 if args.quick else 16_384
    if args.role:
        return role_main(args)
    documents = args.documents or (4_000 if args.quick else 20_000)
    systems = [s for s in args.systems.split(",") if s]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        p.error(f"unknown systems {sorted(unknown)}")

    root = pathlib.Path(tempfile.mkdtemp(prefix="croupier-bench-tokens-"))
    results = {}
    try:
        t = time.perf_counter()
        (root / "data").mkdir()
        prefixes = write_data(root / "data", documents)
        lengths = np.concatenate([read_index(q)[1] for q in prefixes])
        data = {"documents_per_source": documents, "tokens": int(lengths.sum()),
                "median_length": float(np.median(lengths)), "mean_length":
                round(float(lengths.mean()), 1), "longer_than_L": int((lengths > args.length).sum()),
                "write_s": round(time.perf_counter() - t, 2)}
        if {"croupier_text", "grain_text"} & set(systems):
            (root / "text").mkdir()
            t = time.perf_counter()
            _, _, count = write_text(root / "text", 1 if args.quick else 4)
            data.update(text_documents=count, text_write_and_train_s=round(
                time.perf_counter() - t, 2))
        print(json.dumps({"bench": "tokens", "data": data, "length": args.length,
                          "batch": args.batch, "weights": WEIGHTS, "seconds": args.seconds,
                          "load_before": machine_load()}), flush=True)
        for name in systems:
            r = run_system(args, name, root)
            r.update(bench="tokens", system=name, load_after=machine_load())
            results[name] = r
            print(json.dumps(r), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def ratio(case, a, b, key="tokens_per_s", unit="tokens/s"):
        """A ratio line as bench/run.py's table takes it (no goal: issue 34 sets none)."""
        if a in results and b in results and results[a].get(key) is not None \
                and results[b].get(key):
            va, vb = results[a][key], results[b][key]
            print(json.dumps({"bench": "tokens", "case": case, "unit": unit, "value": va,
                              "baseline": b, "baseline_value": vb, "ratio": round(va / vb, 2),
                              "goal": "none", "met": None}), flush=True)
    ratio("croupier concat tokens/s vs Megatron-LM", "croupier_concat", "megatron")
    ratio("croupier concat tokens/s vs Grain concat", "croupier_concat", "grain_concat")
    ratio("croupier best_fit tokens/s vs Grain best_fit", "croupier_best_fit", "grain_best_fit")
    ratio("croupier tokens/s vs Grain, text tokenized online (concat)", "croupier_text",
          "grain_text")
    ratio("croupier text CPU per token (all its processes) vs Grain", "croupier_text",
          "grain_text", "cpu_us_per_token", "us/token")
    ratio("croupier best_fit padding vs Grain best_fit", "croupier_best_fit", "grain_best_fit",
          "padding_fraction", "fraction")
    for a, b in (("croupier_concat", "megatron"), ("croupier_concat", "grain_concat"),
                 ("croupier_best_fit", "grain_best_fit")):
        ratio(f"{a} CPU per token (all its processes) vs {b}", a, b, "cpu_us_per_token",
              "us/token")
    if "read_alone" in results:  # its one process does all the reading
        results["read_alone"]["cpu_us_per_token_producer"] = results["read_alone"].get(
            "cpu_us_per_token")
    for packing in ("concat", "best_fit"):
        name = f"croupier_{packing}"
        if name in results and "read_alone" in results:
            results[name]["cpu_us_per_token_producer"] = results[name].get(
                "producer_cpu_us_per_token")
            ratio(f"croupier {packing} producer CPU per token vs reading the tokens alone",
                  name, "read_alone", "cpu_us_per_token_producer", "us/token")

    print(f"\n{'system':18} {'seq/s':>9} {'tokens/s':>12} {'padding':>8} {'1st batch s':>11} "
          f"{'CPU s':>6}  CPU s by process", file=sys.stderr)
    for name, r in results.items():
        if name == "padding" and "error" not in r:
            print(f"best_fit padding over {r['sequences']} sequences: croupier {r['croupier']}, "
                  f"Grain {r['grain']}", file=sys.stderr)
            continue
        if "error" in r:
            print(f"{name:18} failed: {r['error']}\n{r.get('stderr', '')}", file=sys.stderr)
            continue
        print(f"{name:18} {r['sequences_per_s']:9.1f} {r['tokens_per_s']:12,} "
              f"{r['padding_fraction']:8.4f} {r.get('first_batch_s', 0):11.3f} {r['cpu_s']:6.1f}  "
              f"{r['cpu_s_by_process']}", file=sys.stderr)


if __name__ == "__main__":
    main()
