"""Tokens jobs: their definition (create_token_job), their producer (produce), a resume's position
and what attention kernels take from a batch's segment ids. The public names are croupier.tokens's
(docs/python.md, "Language-model data"), which says what a tokens job is; this module states none
of the job's defaults: a 0 or "" is the dispatcher's default (C++ checks and completes the spec).
"""
import os
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from croupier import _croupier, errors
from croupier.runtime import at_exit
from croupier.runtime.serving import metrics_port_of, serve_until_the_end, write_port_file
from croupier.client import auth_token_or_env, get_job, submit_job
from croupier.job import Job, JobSpec
from croupier.lm.text import TextSource, Tokenizer, to_spec

Weights = Union[Sequence[float], Sequence[Tuple[int, Sequence[float]]]]


def _schedule(weights: Optional[Weights]) -> List[Dict[str, Any]]:
    """The wire's weight schedule from `weights`: one list of weights (from step 0), or
    (first_step, weights) pairs."""
    if weights is None:
        return []
    items: List[Any] = list(weights)
    if items and all(isinstance(w, (int, float)) for w in items):
        return [{"first_step": 0, "weights": [float(w) for w in items]}]
    schedule = []
    for i, item in enumerate(items):
        try:
            step, values = item
            schedule.append({"first_step": int(step), "weights": [float(w) for w in values]})
        except (TypeError, ValueError) as e:
            raise errors.InvalidArgumentError(
                f"weights[{i}] is {item!r}: give a list of weights, or (first_step, weights) "
                f"pairs ({e})") from None
    return schedule


def resume_position(state: Dict[str, Any]) -> Tuple[int, int]:
    """(epoch, global step) where a tokens job's Consumer.state_dict() says to go on."""
    try:
        world = int(state["world"])
        epoch = int(state["epoch"])
        next_batch = int(state.get("global_batch", int(state["step"]) * world))
    except (KeyError, TypeError, ValueError) as e:
        raise errors.InvalidArgumentError(
            f"resume_from is not a croupier consumer state: {e!r}") from None
    if world <= 0 or next_batch % world:
        raise errors.InvalidArgumentError(
            f"resume_from: global batch {next_batch} is not a step of a job of {world} ranks")
    return epoch, next_batch // world


Source = Union[str, "os.PathLike[str]", TextSource]


def create_token_job(dispatcher: str, name: str, sources: Sequence[Source],
                     *, sequence_length: int, global_batch: int, steps_per_epoch: int,
                     consumers: int, packing: str = "", packing_window: int = 0,
                     weights: Optional[Weights] = None, pad_id: int = 0, seed: int = 0,
                     epochs: int = 0, mode: str = "", compression: str = "",
                     resume_from: Optional[Dict[str, Any]] = None, exist_ok: bool = False,
                     auth_token: Optional[str] = None, timeout: float = 60.0) -> Job:
    """Creates a tokens job and returns it (a croupier.Job; job.tokens holds its settings and each
    source's documents, tokens and fingerprint).

    sources: the prefixes of Megatron-LM indexed datasets (PREFIX.idx, PREFIX.bin; int32 or uint16
    tokens), or TextSource entries: text that the job's producers tokenize (produce()), whose
    documents' lengths are counted here the first time (croupier.lm.text). sequence_length: L. global_batch: sequences per global step, the same at every number
    of ranks; `consumers` must divide it. steps_per_epoch: global steps per epoch. packing:
    "concat" (the dispatcher's default: documents concatenated and cut every L tokens) or
    "best_fit" (no document split unless longer than L, packed best-fit over windows of
    packing_window documents). weights: the sources' weights, a list (from step 0) or
    (first_step, weights) pairs; default equal. pad_id: input_ids at padding.

    resume_from=state (a Consumer.state_dict() of a tokens job over the same sources, seed and
    settings) makes this job continue that one at its next global step with `consumers` ranks:
    the same sequences follow, whatever the number of ranks before. A bad setting raises
    InvalidArgumentError naming it; a source that cannot be read raises naming its file."""
    start_epoch = start_step = 0
    if resume_from is not None:
        start_epoch, start_step = resume_position(resume_from)
    prefixes: List[str] = []
    text: List[Dict[str, Any]] = []
    for k, source in enumerate(sources):
        if isinstance(source, TextSource):
            prefix, entry = to_spec(source, k)
            prefixes.append(prefix)
            text.append(entry)
        else:
            prefixes.append(os.fspath(source))
    spec = JobSpec(
        name=name, source="tokens", num_consumers=int(consumers), seed=int(seed),
        num_epochs=int(epochs), mode=mode, compression=compression, start_epoch=start_epoch,
        start_batch=start_step * int(consumers),
        tokens={"sources": prefixes, "text": text,
                "sequence_length": int(sequence_length), "global_batch": int(global_batch),
                "steps_per_epoch": int(steps_per_epoch), "packing": packing,
                "packing_window": int(packing_window), "weights": _schedule(weights),
                "pad_id": int(pad_id)})
    return submit_job(dispatcher, spec, exist_ok=exist_ok, auth_token=auth_token,
                      timeout=timeout)


def produce(dispatcher: str, job: str, *, threads: int = 2, stop: Optional[threading.Event] = None,
            buffer_bytes: int = 256 << 20, max_tasks: int = 2, bind: str = "127.0.0.1",
            advertise_host: str = "", timeout: float = 60.0, dispatcher_timeout: float = 120.0,
            drain_timeout: float = 5.0, auth_token: Optional[str] = None,
            leave_now: Optional[threading.Event] = None,
            on_serving: Optional[Callable[[], None]] = None, metrics_port: Optional[int] = None,
            metrics_port_file: Optional[str] = None) -> Dict[str, Any]:
    """Runs a producer of tokens job `job`, whose sources include text (TextSource): it reads and
    tokenizes the documents each batch needs on `threads` threads (the tokenizer itself works on
    every core, outside the GIL), until every rank has read the job's last epoch or `stop` is set;
    then it drains as croupier.produce() does (drain_timeout, leave_now). `croupier produce --job
    NAME` runs it. A job of indexed datasets alone needs none: any `croupier producer` makes it.

    Before it serves, it checks that the text files, the tokenizer and the lengths are those the
    job was created with, and raises FailedPreconditionError naming the file that differs. A
    document whose tokens no longer match its planned length fails its batch at the rank that
    needs it with DataLossError naming the document and file. UnavailableError once the
    dispatcher has not answered for dispatcher_timeout seconds. Returns {"drained": {"kept",
    "served"}} (None unless it was stopped and drained). metrics_port and metrics_port_file: its
    Prometheus metrics, as croupier.produce()'s."""
    # The producer's threads tokenize batches side by side; a tokenizer that also spread each
    # call over every core would only contend with them (set the variable to override).
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    port = metrics_port_of(metrics_port, metrics_port_file)
    info = get_job(dispatcher, job, auth_token=auth_token, timeout=timeout)
    info.check_token_sources()
    tokenize = Tokenizer(info)
    drained: Optional[Dict[str, int]] = None
    with at_exit.running():
        node = None
        try:
            node = at_exit.track(_croupier._Producer.tokens(
                dispatcher, job, auth_token_or_env(auth_token), int(threads), int(buffer_bytes),
                int(max_tasks), bind, advertise_host, float(timeout), tokenize, port))
            if metrics_port_file is not None:
                write_port_file(metrics_port_file, node.metrics_port)
            drained = serve_until_the_end(
                node, job, stop=stop, dispatcher_timeout=dispatcher_timeout,
                drain_timeout=drain_timeout, leave_now=leave_now,
                on_serving=on_serving)["drained"]
        except errors.Error:
            if not at_exit.exiting.is_set():
                raise
        finally:
            if node is not None:
                node.close()
    return {"drained": drained}


def cu_seqlens(segment_ids: np.ndarray) -> np.ndarray:
    """The cumulative sequence lengths of packed rows, as variable-length attention kernels take
    them: the offsets in the flattened [rows * L] tokens where each segment (a document's piece)
    starts, then rows * L. A row's padding (segment 0) is a segment of its own, so the offsets
    index the batch as it is; its labels are ignored (loss_mask 0). int32."""
    ids = np.asarray(segment_ids)
    if ids.ndim != 2:
        raise errors.InvalidArgumentError(
            f"segment_ids has shape {ids.shape}; expected [rows, sequence_length]")
    flat = ids.reshape(-1)
    # A segment starts at a row's start and wherever the id changes within a row.
    starts = np.ones(flat.shape, dtype=bool)
    starts[1:] = flat[1:] != flat[:-1]
    starts[:: ids.shape[1]] = True
    return np.append(np.flatnonzero(starts), flat.size).astype(np.int32)


def attention_mask(segment_ids: np.ndarray) -> np.ndarray:
    """A causal mask that keeps each token's attention within its segment: bool
    [rows, L, L], True where query i may attend key j (j <= i, same segment, not padding)."""
    ids = np.asarray(segment_ids)
    if ids.ndim != 2:
        raise errors.InvalidArgumentError(
            f"segment_ids has shape {ids.shape}; expected [rows, sequence_length]")
    length = ids.shape[1]
    causal = np.tril(np.ones((length, length), dtype=bool))
    same = ids[:, :, None] == ids[:, None, :]
    mask: np.ndarray = same & causal[None] & (ids[:, :, None] != 0)
    return mask


__all__ = ["attention_mask", "create_token_job", "cu_seqlens", "produce", "resume_position"]
