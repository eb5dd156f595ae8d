"""Part of `make demo`: plays the deal of two epochs without the service, straight from the files.

It counts the records through the record index, reads the files, and for every global batch picks
the planned records and decodes them with croupier's batch builder, as a producer will. It then
checks what the service will guarantee: every
record dealt at most once per epoch, and the same number of steps for every consumer. The record
ids are read from the decoded batches (the `id` feature), not from the plan, so the check is on
content. Exits non-zero if a check fails.
"""
import glob
import sys
import time

import numpy as np

import croupier

BATCH, CONSUMERS, SEED = 64, 4, 1


def main(data_dir):
    files = sorted(glob.glob(f"{data_dir}/*.tfrecord"))
    counts = [len(croupier.index_records(f)) for f in files]
    starts = np.cumsum([0] + counts)
    total = int(starts[-1])
    records_by_file = [list(croupier.TFRecordReader(f)) for f in files]
    ok = True
    for epoch in (0, 1):
        plan = croupier.EpochPlan(total, BATCH, CONSUMERS, seed=SEED, epoch=epoch)
        start = time.monotonic()
        seen = {c: [] for c in range(CONSUMERS)}
        steps = {c: 0 for c in range(CONSUMERS)}
        for g in range(plan.num_batches):
            ids = plan.batch(g)
            file_of = np.searchsorted(starts, ids, side="right") - 1
            records = [records_by_file[f][int(i - starts[f])] for f, i in zip(file_of, ids)]
            batch = croupier.decode_batch(records, "id:int64,label:int64,image:bytes")
            consumer = plan.consumer_of(g)
            seen[consumer].append(batch["id"])
            steps[consumer] += 1
        took = time.monotonic() - start
        all_ids = np.concatenate([np.concatenate(v) for v in seen.values()])
        once = len(all_ids) == len(np.unique(all_ids))
        equal = len(set(steps.values())) == 1
        dropped = total - len(all_ids)
        print(f"epoch {epoch}: {plan.num_batches} batches, steps per consumer "
              f"{[steps[c] for c in range(CONSUMERS)]}, {len(all_ids)} records decoded in "
              f"{took:.2f} s ({len(all_ids) / took:,.0f} records/s), {dropped} dropped by "
              f"remainder=drop")
        print(f"  every record at most once: {'yes' if once else 'NO'}; "
              f"equal steps: {'yes' if equal else 'NO'}")
        first = seen[0][0]
        print(f"  consumer 0, step 0: ids {first[:6].tolist()} ...")
        ok &= once and equal
    if not ok:
        sys.exit("demo check FAILED")
    print("\ndemo check passed")


if __name__ == "__main__":
    main(sys.argv[1])
