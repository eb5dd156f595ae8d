"""croupier.map.spec: a map job's feature spec, checked against the batches its Pipeline makes.

The spec text ("image:uint8[32,32,3],label:int64,tokens:int32[*]") is parsed by the C++ library
(the same parser the dispatcher uses); this module only compares a batch's columns with it.
"""
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from croupier import _croupier
from croupier.errors import BatchError

__all__ = ["Spec", "spec_of", "vary_as_spec", "check_spec"]

# {feature name: (dtype, per-record shape, or None for a variable length ([*]))}
Spec = Dict[str, Tuple[str, Optional[List[int]]]]


def spec_of(features: str) -> Spec:
    """{name: (dtype, shape or None)} of a feature spec text."""
    return {name: (dtype, None if shape is None else list(shape))
            for name, dtype, shape in _croupier.parse_feature_spec(features)}


def vary_as_spec(batch: Dict[str, Any], spec: Spec) -> None:
    """Turns stacked arrays (a tf_transform's outputs of equal lengths) of features the spec
    says are variable ([*]) into (values, splits)."""
    for name, (_, shape) in spec.items():
        value = batch.get(name)
        if shape is None and isinstance(value, np.ndarray) and value.ndim >= 1:
            rows = value.reshape(value.shape[0], -1)
            splits = np.arange(rows.shape[0] + 1, dtype=np.uint64) * np.uint64(rows.shape[1])
            batch[name] = (rows.reshape(-1), splits)


def check_spec(columns: List[Tuple[Any, ...]], spec: Spec) -> None:
    """An error naming the feature if the columns do not match the job's feature spec."""
    names = [c[0] for c in columns]
    if sorted(names) != sorted(spec):
        raise BatchError(f"the batch's features {sorted(names)} are not the job's "
                           f"{sorted(spec)}")
    for name, dtype, variable, dims, *_ in columns:
        want_dtype, want_shape = spec[name]
        if dtype != want_dtype:
            raise BatchError(f"feature '{name}': {dtype}, but the job's features say "
                               f"{want_dtype}")
        if variable != (want_shape is None) or (not variable and list(dims) != want_shape):
            have = "[*]" if variable else str(list(dims))
            want = "[*]" if want_shape is None else str(want_shape)
            raise BatchError(f"feature '{name}': per-record shape {have}, but the job's "
                               f"features say {want}")
