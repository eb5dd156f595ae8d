"""croupier.Consumer: a trainer's feed of batches from a croupier job."""
import warnings
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from croupier import _croupier, errors
from croupier.client import auth_token_or_env
from croupier.job import Job
from croupier.launcher import detect_rank_world

_STATE_FORMAT = 1


class Consumer:
    """The batches of one rank (or of several ranks, for in-graph replication) of a job.

    Consumer(dispatcher, job, rank=None, world=None) connects rank `rank` of `world` to the job;
    rank and world come from the launcher's environment when not given (croupier.launcher).
    Consumer(dispatcher, job, ranks=[2, 3], world=8) holds ranks 2 and 3 in one process (one
    per device) and yields a tuple of batches per step, one per rank, in the order given.

    The prefetch window is `prefetch` batches and about `prefetch_bytes` bytes per rank;
    prefetch=0 (the default) chooses: 4 batches, and for batches of 256 KiB or less as many as
    hold about 1 MiB, up to 64. Every
    wait (for the dispatcher, for a batch) ends after `timeout` seconds with
    croupier.errors.DeadlineExceededError naming what was awaited.

    With resume=True (the default) a rank continues where the dispatcher last heard of it: a
    trainer restarted after a crash picks up at its rank's last acknowledged step (acknowledged
    about once a second, so the last second's batches may come again), as if that position had
    been loaded with load_state_dict. A trainer's own checkpoint (load_state_dict) is exact and
    wins. resume=False starts at epoch 0, step 0.

    A job that is done when the consumer registers (every epoch delivered: the dispatcher's job
    state "done", consumer.done_at_registration) is logged at registration, and batches() or
    epoch() asked for an epoch that the resumed position puts behind it (so they yield nothing)
    warns (RuntimeWarning) naming the job and its state, instead of silently yielding nothing.

    A Consumer is iterable, as a DataLoader with a DistributedSampler is:

        for e in range(epochs):
            feed.set_epoch(e)
            for batch in feed:      # the same as feed.epoch(e)
                ...

    Without set_epoch(), `for batch in feed` reads the epoch after the last one read (the first:
    where the rank resumed).
    """

    def __init__(self, dispatcher: str, job: str, rank: Optional[int] = None,
                 world: Optional[int] = None, *, ranks: Optional[Sequence[int]] = None,
                 auth_token: Optional[str] = None, prefetch: int = 0,
                 prefetch_bytes: int = 256 << 20, timeout: float = 60.0,
                 resume: bool = True) -> None:
        if ranks is not None:
            if rank is not None:
                raise errors.InvalidArgumentError("give rank= or ranks=, not both")
            ranks = [int(r) for r in ranks]
            if not ranks or len(set(ranks)) != len(ranks):
                raise errors.InvalidArgumentError(f"ranks={ranks} must be distinct and non-empty")
            if world is None:
                _, world = detect_rank_world(None, None)
            for r in ranks:
                detect_rank_world(r, world)  # checks the range
            self._ranks = tuple(ranks)
            self._multi = True
        else:
            rank, world = detect_rank_world(rank, world)
            self._ranks = (rank,)
            self._multi = False
        self._world = int(world)
        self._dispatcher = dispatcher
        self._consumers: List[_croupier._Consumer] = []
        self._next_epoch: Optional[int] = None  # what set_epoch() set for the next iteration
        try:
            for r in self._ranks:
                self._consumers.append(_croupier._Consumer(
                    dispatcher, job, r, self._world, auth_token or "", int(prefetch),
                    int(prefetch_bytes), float(timeout), bool(resume)))
            # The job as the dispatcher holds it now that it exists (a rank waits for it).
            self._job = _croupier.get_job(dispatcher, job, auth_token_or_env(auth_token),
                                          float(timeout))
        except BaseException:
            self.close()
            raise
        self._done_at_registration = bool(self._consumers[0].done_at_registration)
        # The next (epoch, step) this feed will yield, and the position epoch() starts from: where
        # the dispatcher registered the ranks (the earliest, when this feed holds several).
        self._position = min(c.registered_position for c in self._consumers)
        self._resume = self._position if self._position != (0, 0) else None

    # --- what the job is ----------------------------------------------------------------------
    @property
    def job(self) -> Job:
        """The job as the dispatcher held it when this feed registered (a croupier.Job: name,
        features, mode, num_consumers, batch_size, num_records, num_epochs (0: unbounded),
        steps_per_epoch, ...)."""
        return self._job

    @property
    def done_at_registration(self) -> bool:
        """The dispatcher said, when this feed registered, that the job was done (every epoch
        delivered): a trainer resumed a finished job."""
        return self._done_at_registration

    @property
    def rank(self) -> int:
        if self._multi:
            raise AttributeError("this consumer holds several ranks: see .ranks")
        return self._ranks[0]

    @property
    def ranks(self) -> Tuple[int, ...]:
        return self._ranks

    @property
    def world(self) -> int:
        return self._world

    def __len__(self) -> int:
        """Steps per epoch: the same for every rank of a dealt job."""
        if self._job.mode != "dealt":
            raise TypeError(f"a {self._job.mode} job has no fixed number of steps per epoch")
        return self._job.steps_per_epoch

    # --- iterating ----------------------------------------------------------------------------
    def batches(self, epoch: int) -> Iterator[Union[_croupier.Batch, Tuple[_croupier.Batch, ...]]]:
        """Like epoch(), but yields croupier.Batch objects (content_hash, num_records, to_dict);
        with several ranks, each step is a tuple of them."""
        epoch = int(epoch)
        step = 0
        if self._resume is not None:
            resume_epoch, resume_step = self._resume
            at_end = (epoch == resume_epoch and self._job.mode == "dealt"
                      and resume_step >= self._job.steps_per_epoch)
            if self._done_at_registration and (epoch < resume_epoch or at_end):
                warnings.warn(
                    f"job {self._job.name!r} is done (every epoch delivered): rank(s) "
                    f"{list(self._ranks)} resumed at epoch {resume_epoch} step {resume_step}, "
                    f"so epoch {epoch} has nothing left to read; to train again, create a job "
                    f"of another name (or delete this one)", RuntimeWarning, stacklevel=3)
            if epoch < resume_epoch:
                return  # the loaded state says this epoch is done
            if epoch == resume_epoch:
                step = resume_step
            self._resume = None
        for c in self._consumers:
            c.start_epoch(epoch, step)
        self._position = (epoch, step)
        if not self._multi:
            # One rank, the common case: the least Python work per batch.
            next_batch = self._consumers[0].next
            while (batch := next_batch()) is not None:
                step += 1
                self._position = (epoch, step)
                yield batch
            self._position = (epoch + 1, 0)
            return
        while True:
            got = [c.next() for c in self._consumers]
            ended = [b is None for b in got]
            if all(ended):
                self._position = (epoch + 1, 0)
                return
            if any(ended):
                raise errors.InternalError(
                    f"ranks {self._ranks} ended epoch {epoch} at different steps")
            step += 1
            self._position = (epoch, step)
            yield tuple(b for b in got if b is not None)  # none is None (checked above)

    def epoch(self, epoch: int, bytes_as: str = "list") -> Iterator[Any]:
        """Iterates this rank's batches of `epoch` in step order, each a dict {feature name:
        numpy array}. Fixed-shape numeric arrays, each of its feature's dtype (bfloat16:
        ml_dtypes.bfloat16), are views of the received buffer (no copy) and stay valid for as long
        as they are held; bytes features are lists of bytes, or with
        bytes_as="buffer" croupier.BytesColumn objects (a uint8 values array and an int64 offsets
        array, views of the buffer: no Python object per string); variable-length features are
        (values, row_splits). With several ranks, each step is a tuple of dicts."""
        if bytes_as not in ("list", "buffer"):
            raise errors.InvalidArgumentError(
                f"bytes_as is {bytes_as!r}; it must be 'list' or 'buffer'")
        for got in self.batches(epoch):
            if isinstance(got, tuple):
                yield tuple(b.to_dict(bytes_as) for b in got)
            else:
                yield got.to_dict(bytes_as)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next `for batch in feed` reads (as DistributedSampler.set_epoch)."""
        epoch = int(epoch)
        if epoch < 0:
            raise errors.InvalidArgumentError(f"epoch {epoch}: epochs count from 0")
        self._next_epoch = epoch

    def __iter__(self) -> Iterator[Any]:
        """The batches (dicts, as epoch() gives them) of the epoch set_epoch() set, else of the
        epoch after the last one read."""
        epoch = self._next_epoch if self._next_epoch is not None else self._position[0]
        self._next_epoch = None
        return self.epoch(epoch)

    # --- checkpoints --------------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """The position to save with the trainer's checkpoint: the next step this feed yields, and
        "global_batch", the job's next global batch of that epoch (where a job created with
        resume_from=state goes on, however many jobs were resumed before this one)."""
        epoch, step = self._position
        job = self._job
        if epoch < job.start_epoch:
            first = job.batches_per_epoch
        elif epoch == job.start_epoch:
            first = job.start_batch
        else:
            first = 0
        return {"format": _STATE_FORMAT, "job": job.name, "world": self._world,
                "ranks": list(self._ranks), "epoch": epoch, "step": step,
                "global_batch": first + step * self._world}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resumes at a saved position: the next epoch(e) call for the saved epoch starts at the
        saved step, and calls for earlier epochs yield nothing (they were done)."""
        try:
            fmt, job, world = state["format"], state["job"], state["world"]
            epoch, step = int(state["epoch"]), int(state["step"])
        except (KeyError, TypeError, ValueError) as e:
            raise errors.InvalidArgumentError(f"not a croupier consumer state: {e!r}") from None
        if fmt != _STATE_FORMAT:
            raise errors.InvalidArgumentError(f"consumer state format {fmt}; this version reads "
                                              f"{_STATE_FORMAT}")
        if job != self._job.name:
            raise errors.InvalidArgumentError(
                f"the state is of job {job!r}, this consumer reads job {self._job.name!r}")
        if world != self._world:
            raise errors.InvalidArgumentError(
                f"the state was saved with world {world}, this consumer has world {self._world}: "
                "to resume with another number of consumers, create a new job with "
                "croupier.create_job(..., consumers=NEW_WORLD, resume_from=state) and read it "
                "from its start")
        self._resume = (epoch, step)
        self._position = (epoch, step)

    # --- lifetime -----------------------------------------------------------------------------
    def close(self) -> None:
        """Stops fetching and heartbeats. Idempotent. Arrays already handed out stay valid."""
        for c in self._consumers:
            c.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
