"""A Horovod + TensorFlow trainer fed by croupier's TensorFlow dataset op: N Horovod processes,
one croupier job, each batch dealt to one of them. Run here under `horovodrun --gloo` and tested
(tests/test_horovod.py), with Horovod 0.28.1 built by scripts/build_horovod.sh:

    horovodrun -np 4 --gloo python examples/horovod_tensorflow.py --dispatcher HOST:5050 \
        --job train [--keras]

It makes its own data: `python examples/horovod_tensorflow.py --write-data reg.tfrecord` writes
512 records (--records N) and exits; then a job over them, for 4 ranks:

    croupier job create --dispatcher HOST:5050 --name train --files reg.tfrecord \
        --features id:int64,x:float32[4],y:float32 --batch-size 16 --consumers 4 --epochs 2

Each process reads its own rank through croupier.tf.dataset (docs/tensorflow.md), which takes the
rank and world from the launcher (HOROVOD_RANK/SIZE under horovodrun --gloo), checked against
Horovod's. Each iteration of that dataset reads the next croupier epoch.

The job's records hold an int64 `id`, a float32[4] `x` and a float32 `y` (a linear function of x;
--write-data writes them, and so does tests/test_horovod.py through it). The model is linear, fitted by SGD on the squared error:
  - by default, a linear model in tf.Variables trained by a tf.function step with
    hvd.DistributedGradientTape, the variables broadcast from rank 0 with hvd.broadcast_variables
    (Horovod 0.28.1's tape and broadcast need tf.Variables: Keras 3's variables have no .ref()
    nor an .assign inside a tf.function);
  - with --keras, a Keras Dense layer trained by model.fit with hvd.DistributedOptimizer and
    hvd.callbacks.BroadcastGlobalVariablesCallback(0) (horovod.tensorflow.keras), on Keras 2
    (tf_keras, selected by TF_USE_LEGACY_KERAS=1), which Horovod 0.28.1 was written for.

With --report FILE, rank r writes FILE.r: per epoch its steps, the record ids of its batches in
order and the mean loss, and the final weights, so that a test can check the deal and that every
rank ends with the same model.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if "--keras" in sys.argv:
    # Horovod 0.28.1's Keras wrappers are written for Keras 2: tf.keras is then tf_keras (the
    # tf-keras package), as TF_USE_LEGACY_KERAS asks. Keras 3 is not supported by them.
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf  # noqa: E402

import croupier.tf as ctf  # noqa: E402


def train_with_tape(hvd, dataset, epochs, lr):
    """A custom loop: a linear model in plain tf.Variables, its gradients averaged by
    hvd.DistributedGradientTape. Returns (ids, losses) per epoch and the weights."""
    # Different initial weights per rank, so that the broadcast has something to do.
    kernel = tf.Variable(tf.fill([4, 1], 0.1 * hvd.rank()), name="kernel")
    bias = tf.Variable([0.1 * hvd.rank()], name="bias")
    variables = [kernel, bias]
    hvd.broadcast_variables(variables, root_rank=0)
    optimizer = tf.keras.optimizers.SGD(lr)

    @tf.function
    def step(batch):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(((batch["x"] @ kernel)[:, 0] + bias - batch["y"]) ** 2)
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, variables)  # all-reduced across the ranks
        optimizer.apply_gradients(zip(grads, variables))
        return loss

    epochs_seen = []
    for _ in range(epochs):
        ids, losses = [], []
        for batch in dataset:  # each iteration of the dataset: the next croupier epoch
            losses.append(float(step(batch)))
            ids.append(batch["id"].numpy().tolist())
        epochs_seen.append((ids, losses))
    return epochs_seen, [v.numpy() for v in variables]


def train_with_keras(hvd, dataset, epochs, lr):
    """model.fit with Horovod's Keras optimizer wrapper and broadcast callback."""
    import horovod.tensorflow.keras as hvd_keras

    seen = []  # the ids of each batch, in the order fit takes them

    def remember(batch):
        def note(ids):
            seen.append(ids.tolist())
            return ids
        tf.numpy_function(note, [batch["id"]], tf.int64, stateful=True)
        return batch["x"], batch["y"]

    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    model.set_weights([w + 0.1 * hvd.rank() for w in model.get_weights()])
    model.compile(optimizer=hvd_keras.DistributedOptimizer(tf.keras.optimizers.SGD(lr)),
                  loss="mse")
    callbacks = [hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0)]
    epochs_seen = []
    for _ in range(epochs):
        before = len(seen)
        history = model.fit(dataset.map(remember), epochs=1, callbacks=callbacks, verbose=0)
        epochs_seen.append((seen[before:], history.history["loss"]))
    return epochs_seen, model.get_weights()


FEATURES = "id:int64,x:float32[4],y:float32"


def write_data(path, n):
    """Writes n records to the TFRecord file `path`: id i, x = (i, 2i, 3i, 4i) / n, and
    y = sum(x) / 2 - 0.25, the line the model learns (FEATURES)."""
    with tf.io.TFRecordWriter(str(path)) as w:
        for i in range(n):
            x = [(k + 1) * i / n for k in range(4)]
            f = {"id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                 "x": tf.train.Feature(float_list=tf.train.FloatList(value=x)),
                 "y": tf.train.Feature(float_list=tf.train.FloatList(value=[sum(x) / 2 - 0.25]))}
            w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dispatcher")
    parser.add_argument("--job")
    parser.add_argument("--write-data", metavar="FILE",
                        help="write the records to this TFRecord file, and exit")
    parser.add_argument("--records", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--keras", action="store_true",
                        help="model.fit with hvd.DistributedOptimizer (default: a custom loop with "
                             "hvd.DistributedGradientTape)")
    parser.add_argument("--report")
    args = parser.parse_args()
    if args.write_data:
        write_data(args.write_data, args.records)
        print(f"{args.records} records ({FEATURES}) in {args.write_data}", flush=True)
        return 0
    if not args.dispatcher or not args.job:
        parser.error("--dispatcher and --job are required to train (or --write-data FILE)")

    import horovod.tensorflow as hvd
    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    dataset = ctf.dataset(args.dispatcher, args.job)  # rank and world from the launcher
    from croupier.launcher import detect_rank_world
    rank, world = detect_rank_world()
    if (rank, world) != (hvd.rank(), hvd.size()):
        raise SystemExit(f"croupier reads rank {rank} of {world} from the launcher, Horovod says "
                         f"{hvd.rank()} of {hvd.size()}")
    start = time.monotonic()
    train = train_with_keras if args.keras else train_with_tape
    epochs_seen, weights = train(hvd, dataset, args.epochs, args.lr)
    report = {"rank": rank, "world": world, "epochs": [], "seconds": time.monotonic() - start}
    for epoch, (ids, losses) in enumerate(epochs_seen):
        loss = float(hvd.allreduce(tf.constant(sum(losses) / max(len(losses), 1)),
                                   name=f"loss{epoch}"))
        report["epochs"].append({"epoch": epoch, "steps": len(ids), "ids": ids, "loss": loss})
        if rank == 0:
            print(f"[rank 0] epoch {epoch}: {len(ids)} steps, mean loss {loss:.4f}", flush=True)
    report["weights"] = [w.ravel().tolist() for w in weights]
    if args.report:
        with open(f"{args.report}.{rank}", "w") as f:
            json.dump(report, f)


if __name__ == "__main__":
    main()
