"""The trainer the launch recipes in deploy/ start: one process per rank, fed by a croupier job.

Replace the body of the loop with a training step. Everything it needs comes from the environment,
so that the same file runs under every launcher:

  CROUPIER_DISPATCHER       HOST:PORT of the dispatcher
  CROUPIER_DISPATCHER_FILE  or a file that holds HOST:PORT, waited for (the Slurm recipe writes
                            it once the dispatcher listens)
  CROUPIER_JOB              the job's name (default: train)
  CROUPIER_EPOCHS           how many epochs to read (default: 1)
  CROUPIER_TIMEOUT          the longest wait, in seconds, for the dispatcher or one batch
                            (default: 120); then the trainer fails with the error, never hangs
  CROUPIER_AUTH_TOKEN       the token, when the service has one (the library reads it)
  CROUPIER_REPORT_DIR       when set, rank R writes rank-R.json there: per epoch, the record ids
                            (the job's `id` feature) and the content hash of each batch it took (the
                            hash `croupier consume` prints)

The rank and the world size come from the launcher, as croupier.launcher reads them: OpenMPI's
OMPI_COMM_WORLD_RANK/SIZE (mpirun, horovodrun), Slurm's SLURM_PROCID/NTASKS (srun), RANK/WORLD_SIZE
(torchrun, or a Kubernetes indexed Job that sets them), or TF_CONFIG; under horovodrun's Gloo
mode, which sets none of those, HOROVOD_RANK/HOROVOD_SIZE.
"""
import json
import os
import pathlib
import sys
import time

import croupier


def dispatcher_address(timeout):
    """CROUPIER_DISPATCHER, or the contents of CROUPIER_DISPATCHER_FILE once it has some."""
    address = os.environ.get("CROUPIER_DISPATCHER", "").strip()
    if address:
        return address
    path = os.environ.get("CROUPIER_DISPATCHER_FILE", "").strip()
    if not path:
        raise SystemExit("trainer: set CROUPIER_DISPATCHER=HOST:PORT or CROUPIER_DISPATCHER_FILE")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = pathlib.Path(path)
        if p.is_file() and p.read_text().strip():
            return p.read_text().strip()
        time.sleep(0.2)
    raise SystemExit(f"trainer: {path} did not name the dispatcher within {timeout:.0f} s")


def main():
    timeout = float(os.environ.get("CROUPIER_TIMEOUT", "120"))
    job = os.environ.get("CROUPIER_JOB", "train")
    epochs = int(os.environ.get("CROUPIER_EPOCHS", "1"))
    report_dir = os.environ.get("CROUPIER_REPORT_DIR")
    address = dispatcher_address(timeout)
    rank = world = None  # from the launcher's variables (croupier.launcher)
    if "HOROVOD_RANK" in os.environ and "HOROVOD_SIZE" in os.environ:
        rank, world = int(os.environ["HOROVOD_RANK"]), int(os.environ["HOROVOD_SIZE"])
    feed = croupier.Consumer(address, job, rank, world, timeout=timeout)
    report = {"rank": feed.rank, "world": feed.world, "job": job, "epochs": []}
    start_epoch = feed.state_dict()["epoch"]  # a restarted rank carries on where it stopped
    for epoch in range(start_epoch, epochs):
        started = time.monotonic()
        ids, hashes = [], []
        for received in feed.batches(epoch):
            batch = received.to_dict()  # {feature name: numpy array (no copy) or [bytes]}
            # The training step goes here.
            if "id" in batch:
                ids.append(batch["id"].tolist())
            hashes.append(f"{received.content_hash:016x}")
        seconds = time.monotonic() - started
        report["epochs"].append({"epoch": epoch, "steps": len(hashes), "ids": ids,
                                 "hashes": hashes, "seconds": seconds})
        print(f"[rank {feed.rank}/{feed.world}] epoch {epoch}: {len(hashes)} steps in "
              f"{seconds:.1f} s", flush=True)
    feed.close()
    if report_dir:
        out = pathlib.Path(report_dir)
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / f".rank-{report['rank']}.json.tmp"
        tmp.write_text(json.dumps(report))
        tmp.rename(out / f"rank-{report['rank']}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
