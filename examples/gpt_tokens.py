"""A small GPT learns Python from the standard library, fed by a croupier tokens job, and a run
resumed from 4 ranks to 2 mid-way continues the same loss curve.

    python examples/gpt_tokens.py demo --out /tmp/gpt          # all of it, about a minute

The steps, each a subcommand:
  prepare  the corpus that every Python install has offline: the standard library's modules
           (source "modules") and its packages' modules (source "packages"), one document per
           file; a byte-level BPE tokenizer trained on it; both tokenized with croupier tokenize's
           code into indexed datasets.
  train    one rank of torch.distributed (gloo) training under torchrun: a 2-layer GPT on the
           tokens job's packed sequences (best fit, the two sources 3:1), attention kept within
           each document (segment_ids), the loss a mean over every counted token of the global
           batch, so that it is the same sum whatever the number of ranks. Rank 0 writes, per
           global step, the loss and a digest of the global batch's sequences. With
           --checkpoint-at S it saves the model, the optimizer and the feed's state after step S
           and stops; with --resume it loads them and creates a job that goes on from there
           (create_token_job(..., resume_from=state)) with this run's number of ranks.
  demo     prepare; a local croupier cluster; 4 ranks for --steps steps; 4 ranks to half-way,
           checkpointed; 2 ranks from that checkpoint to the end; a plot of both curves
           (loss.png) and the largest difference between them.
"""
import argparse
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import sysconfig
import time

L = 128          # tokens per sequence
B = 16           # sequences per global step
VOCAB = 2048
D, HEADS, LAYERS = 128, 4, 2
# position_ids count from a document's start, so a long document's later pieces go past L: the
# position table covers 16,384 and longer documents share its last entry.
POSITIONS = 16384


def stdlib_documents():
    """(modules, packages): the standard library's top-level modules and its packages' modules,
    as text, in path order."""
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    modules = sorted(root.glob("*.py"))
    skip = {"test", "idlelib", "lib2to3", "site-packages", "dist-packages", "tkinter", "turtledemo"}
    packages = sorted(p for p in root.glob("*/*.py") if p.parent.name not in skip)
    read = lambda paths: [p.read_text(encoding="utf-8", errors="replace") for p in paths]
    return read(modules), read(packages)


def prepare(out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from croupier.lm.corpus import tokenize_corpus
    out.mkdir(parents=True, exist_ok=True)
    modules, packages = stdlib_documents()
    for name, docs in (("modules", modules), ("packages", packages)):
        with open(out / f"{name}.jsonl", "w") as f:
            for text in docs:
                f.write(json.dumps({"text": text}) + "\n")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        modules + packages, trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<eod>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer.save(str(out / "tokenizer.json"))
    for name in ("modules", "packages"):
        count, tokens = tokenize_corpus([str(out / f"{name}.jsonl")], str(out / "tokenizer.json"),
                                        str(out / name), eod_token="<eod>")
        print(f"{name}: {count} documents, {tokens} tokens", flush=True)


def model_and_optimizer():
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = torch.nn.LayerNorm(D), torch.nn.LayerNorm(D)
            self.qkv, self.proj = torch.nn.Linear(D, 3 * D), torch.nn.Linear(D, D)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(D, 4 * D), torch.nn.GELU(),
                                           torch.nn.Linear(4 * D, D))

        def forward(self, x, mask):
            n, length, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(n, length, 3, HEADS, D // HEADS).unbind(2)
            att = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask)
            x = x + self.proj(att.transpose(1, 2).reshape(n, length, D))
            return x + self.mlp(self.norm2(x))

    class GPT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = torch.nn.Embedding(VOCAB, D)
            self.positions = torch.nn.Embedding(POSITIONS, D)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))
            self.head = torch.nn.Linear(D, VOCAB)

        def forward(self, ids, positions, segments):
            # Causal attention within each document; a padding token attends to itself only.
            causal = torch.tril(torch.ones(L, L, dtype=torch.bool))
            same = segments[:, :, None] == segments[:, None, :]
            mask = (same & causal) | torch.eye(L, dtype=torch.bool)
            x = self.tokens(ids) + self.positions(positions.clamp(max=POSITIONS - 1))
            for block in self.blocks:
                x = block(x, mask[:, None])
            return self.head(x)

    torch.manual_seed(0)
    model = GPT()
    return model, torch.optim.AdamW(model.parameters(), lr=3e-3)


def train(args):
    import torch
    import torch.distributed as dist

    import croupier
    from croupier import tokens

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, optimizer = model_and_optimizer()
    state, first_step = None, 0
    if args.resume:
        saved = torch.load(args.resume, weights_only=False)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        state, first_step = saved["data"], saved["step"]
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    if rank == 0:
        tokens.create_token_job(
            args.dispatcher, args.job, [str(args.data / "modules"), str(args.data / "packages")],
            consumers=world, sequence_length=L, global_batch=B, steps_per_epoch=args.steps,
            epochs=1, seed=1, packing="best_fit", weights=[3, 1], pad_id=0, resume_from=state)
    feed = croupier.Consumer(args.dispatcher, args.job, rank, world, timeout=120)
    log = []
    step = first_step
    for batch in feed.epoch(0):
        ids = torch.from_numpy(batch["input_ids"].astype("int64"))
        labels = torch.from_numpy(batch["labels"].astype("int64"))
        positions = torch.from_numpy(batch["position_ids"].astype("int64"))
        segments = torch.from_numpy(batch["segment_ids"].astype("int64"))
        # The loss is a sum over the global batch's counted tokens over their count: each rank
        # sums its own, and DDP's mean of the gradients over the ranks is undone by * world.
        counted = torch.tensor([float((labels != -100).sum())])
        dist.all_reduce(counted)
        logits = ddp(ids, positions, segments)
        total = torch.nn.functional.cross_entropy(logits.view(-1, VOCAB), labels.view(-1),
                                                  ignore_index=-100, reduction="sum")
        optimizer.zero_grad()
        (total * world / counted).backward()
        optimizer.step()
        loss = total.detach().clone()
        dist.all_reduce(loss)
        rows = [hashlib.sha256(batch[c][i].tobytes()).hexdigest()
                for i in range(batch["input_ids"].shape[0]) for c in ("input_ids", "labels")]
        gathered = [None] * world
        dist.all_gather_object(gathered, rows)
        step += 1
        if rank == 0:
            digest = hashlib.sha256("".join(r for g in gathered for r in g).encode()).hexdigest()
            log.append({"step": step, "loss": float(loss / counted), "batch": digest[:16]})
            if step % 10 == 0:
                print(f"step {step}: loss {log[-1]['loss']:.4f} ({world} ranks)", flush=True)
        if args.checkpoint_at and step == args.checkpoint_at:
            if rank == 0:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "data": feed.state_dict(), "step": step}, args.checkpoint)
            break
    feed.close()
    if rank == 0:
        with open(args.loss_log, "w") as f:
            json.dump(log, f)
    dist.destroy_process_group()


def torchrun(ranks, *args):
    runner = pathlib.Path(sys.executable).parent / "torchrun"
    cmd = [str(runner), "--standalone", "--nproc-per-node", str(ranks), __file__, "train",
           *map(str, args)]
    subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})


def demo(args):
    import croupier
    out = args.out
    start = time.monotonic()
    prepare(out / "data")
    with croupier.local_cluster(producers=1, work_dir=out / "cluster", threads=1) as cluster:
        common = ["--dispatcher", cluster.address, "--data", out / "data", "--steps", args.steps]
        torchrun(4, *common, "--job", "whole", "--loss-log", out / "whole.json")
        half = args.steps // 2
        torchrun(4, *common, "--job", "first", "--loss-log", out / "first.json", "--checkpoint-at",
                 half, "--checkpoint", out / "checkpoint.pt")
        torchrun(2, *common, "--job", "second", "--loss-log", out / "second.json", "--resume",
                 out / "checkpoint.pt")
    whole = json.loads((out / "whole.json").read_text())
    resumed = (json.loads((out / "first.json").read_text())
               + json.loads((out / "second.json").read_text()))
    same_batches = [a["batch"] for a in whole] == [b["batch"] for b in resumed]
    worst = max(abs(a["loss"] - b["loss"]) for a, b in zip(whole, resumed))
    summary = {"steps": len(whole), "resumed_steps": len(resumed),
               "same_batches": same_batches, "largest_loss_difference": worst,
               "first_loss": whole[0]["loss"], "last_loss": whole[-1]["loss"],
               "seconds": time.monotonic() - start}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary), flush=True)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot([e["step"] for e in whole], [e["loss"] for e in whole], label="4 ranks throughout")
        ax.plot([e["step"] for e in resumed], [e["loss"] for e in resumed], "--",
                label=f"4 ranks, then 2 from step {args.steps // 2}")
        ax.axvline(args.steps // 2, color="grey", lw=0.5)
        ax.set_xlabel("global step")
        ax.set_ylabel("loss (nats per token)")
        ax.set_title("a 2-layer GPT on the Python standard library, fed by croupier")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
    return 0 if same_batches and whole[-1]["loss"] < whole[0]["loss"] else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--out", type=pathlib.Path, required=True)
    t = sub.add_parser("train")
    t.add_argument("--dispatcher", required=True)
    t.add_argument("--job", required=True)
    t.add_argument("--data", type=pathlib.Path, required=True)
    t.add_argument("--steps", type=int, default=60)
    t.add_argument("--loss-log", required=True)
    t.add_argument("--checkpoint-at", type=int, default=0)
    t.add_argument("--checkpoint")
    t.add_argument("--resume")
    d = sub.add_parser("demo")
    d.add_argument("--out", type=pathlib.Path, required=True)
    d.add_argument("--steps", type=int, default=60)
    d.add_argument("--plot", type=pathlib.Path, default=None)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.out)
        return 0
    if args.command == "train":
        train(args)
        return 0
    return demo(args)


if __name__ == "__main__":
    sys.exit(main())
