"""NOT RUN HERE: Horovod 0.28.1 did not build on this machine (with PyTorch it stops on PyTorch's
headers needing C++17, see examples/horovod_pytorch.py and docs/integrations.md; a build with
TensorFlow was not attempted). examples/mpi_allreduce.py runs the same pattern with mpi4py, and is
tested.

A Horovod + TensorFlow (Keras) trainer fed by croupier, for a Horovod build that works:

    horovodrun -np 4 python examples/horovod_tensorflow.py --dispatcher HOST:5050 --job train
"""
import argparse

import tensorflow as tf
import horovod.tensorflow.keras as hvd

import croupier
import croupier.tf


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dispatcher", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    hvd.init()
    feed = croupier.Consumer(args.dispatcher, args.job, rank=hvd.rank(), world=hvd.size())
    model = tf.keras.Sequential([tf.keras.Input((10,)), tf.keras.layers.Dense(10)])
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.5)),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
    for epoch in range(args.epochs):
        ds = croupier.tf.generator_dataset(feed, epoch).map(
            lambda b: (tf.one_hot(b["id"] % 10, 10), b["label"]))
        model.fit(ds, epochs=1, callbacks=callbacks, verbose=1 if hvd.rank() == 0 else 0)


if __name__ == "__main__":
    main()
