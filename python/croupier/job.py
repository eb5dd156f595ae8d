"""croupier.Job: the one typed job of the Python API.

create_job() and get_job() return one, Consumer.job is one, and serve() reads its sources from
one. It is the extension module's type (python/src/py_job.cc), typed for checkers by
_croupier.pyi: the settings as attributes (name, source, mode, features, batch_size,
num_consumers, num_epochs, seed, shuffle, remainder, ...), the plan's sizes (num_records,
batches_per_epoch, steps_per_epoch, batches_per_task), and, from get_job, the state and the ranks'
positions. to_dict() gives them as a plain dict, to_json() the JobInfo as the dispatcher's JSON
(docs/python.md).

croupier.JobSpec is the way in: a job's settings as the fields of proto/croupier.proto's JobSpec,
checked and completed by the dispatcher's own code (normalized()); submit_job(dispatcher, spec)
creates it.
"""
from croupier._croupier import Job, JobSpec

__all__ = ["Job", "JobSpec"]
