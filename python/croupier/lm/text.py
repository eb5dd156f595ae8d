"""Text sources of tokens jobs: text that the job's producers tokenize as they make its sequences
(docs/language-models.md, "Text tokenized by the producers"; docs/protocol.md §7.6).

A TextSource names JSON-lines or Parquet files, the key of their text, a Hugging Face
tokenizer.json and an optional end-of-document token. Its documents are those `croupier tokenize`
would write, in the same order and with the same tokens (croupier.lm.corpus.encode), so a job over
the text deals the same bytes as a job over the indexed dataset converted from it.

The plan needs only the documents' lengths. lengths_index() counts them once, tokenizing every
document, and keeps them as an index without tokens (PREFIX.idx) named by everything that decides
them: the files' paths, sizes and modification times, the tokenizer's bytes, the key and the
end-of-document token. A second job over the same text finds them there.

A producer of such a job (produce()) reads each document the plan asks for by its place (a
JSON-lines document by its line's byte offset, a Parquet document from its row group, cached) and
tokenizes a batch's documents at once: Tokenizer.encode_batch works on every core, outside the
GIL.
"""
import bisect
import collections
import dataclasses
import hashlib
import json
import os
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from croupier import _croupier, errors
from croupier.lm import corpus

# Decoded Parquet row groups kept per source, in bytes of text.
PARQUET_CACHE_BYTES = 256 << 20
# Documents tokenized at once while lengths are counted.
LENGTHS_BATCH = 1024


@dataclasses.dataclass(frozen=True)
class TextSource:
    """Text that a tokens job's producers tokenize: `files` (paths or globs; JSON lines, one
    object a line, or Parquet), the text at `text_key`, tokenized by the tokenizer.json at
    `tokenizer`, each document followed by `eod_token` (or the id `eod_id`) when one is given.
    `add_special_tokens` lets the tokenizer add its own (BOS, ...). `lengths_dir` is where the
    documents' lengths are kept (default: a `.croupier` folder beside the first file); the
    dispatcher and the producers read them there."""
    files: Union[str, Sequence[str]]
    tokenizer: str
    text_key: str = "text"
    eod_token: Optional[str] = None
    eod_id: Optional[int] = None
    add_special_tokens: bool = False
    lengths_dir: Optional[str] = None


def _files(source: TextSource) -> List[str]:
    patterns = [source.files] if isinstance(source.files, (str, os.PathLike)) else source.files
    files = [os.path.abspath(f) for f in corpus.expand([os.fspath(p) for p in patterns])]
    for path in files:
        if path.endswith(".gz"):
            raise errors.InvalidArgumentError(
                f"{path}: a compressed file cannot be read a document at a time; decompress "
                "it, or convert the corpus with croupier tokenize")
        if not path.endswith((".jsonl", ".json", ".parquet")):
            raise errors.InvalidArgumentError(
                f"{path}: not a text file a text source reads (.jsonl, .json, .parquet)")
    return files


def _key(files: Sequence[str], source: TextSource, eod_id: Optional[int]) -> str:
    """What decides the lengths, hashed: files (path, size, mtime), tokenizer bytes, settings."""
    h = hashlib.sha256()
    for path in files:
        st = os.stat(path)
        h.update(json.dumps([path, st.st_size, st.st_mtime_ns]).encode())
    with open(source.tokenizer, "rb") as f:
        h.update(hashlib.sha256(f.read()).digest())
    h.update(json.dumps([source.text_key, eod_id, source.add_special_tokens]).encode())
    return h.hexdigest()[:20]


def to_spec(source: TextSource, index: int) -> Tuple[str, Dict[str, Any]]:
    """(the prefix of its lengths index, its JobSpec tokens.text entry) for source `index` of a
    job, counting the lengths first when they are not kept yet."""
    files = _files(source)
    tokenizer = corpus.load_tokenizer(source.tokenizer)
    eod_id = corpus.eod_of(tokenizer, source.tokenizer, source.eod_token, source.eod_id)
    folder = source.lengths_dir or os.path.join(os.path.dirname(files[0]), ".croupier")
    prefix = os.path.join(os.path.abspath(folder),
                          f"{os.path.basename(files[0])}.{_key(files, source, eod_id)}.lengths")
    if not os.path.exists(prefix + ".idx"):
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as e:
            raise errors.FailedPreconditionError(
                f"{folder}: cannot keep the text source's lengths there ({e.strerror}); give "
                "TextSource(lengths_dir=...) a folder the dispatcher and producers can read")
        lengths = _count_lengths(files, source, tokenizer, eod_id)
        _croupier.write_token_lengths(prefix, lengths)
    return prefix, {"source": index, "files": files, "text_key": source.text_key,
                    "tokenizer": os.path.abspath(source.tokenizer),
                    "eod_id": -1 if eod_id is None else int(eod_id),
                    "add_special_tokens": bool(source.add_special_tokens)}


def _count_lengths(files: Sequence[str], source: TextSource, tokenizer: Any,
                   eod_id: Optional[int]) -> np.ndarray:
    lengths: List[int] = []
    pending: List[str] = []

    def flush() -> None:
        lengths.extend(len(ids) for ids in corpus.encode(tokenizer, pending, eod_id,
                                                         source.add_special_tokens))
        pending.clear()

    for text in corpus.documents(files, source.text_key):
        pending.append(text)
        if len(pending) == LENGTHS_BATCH:
            flush()
    flush()
    return np.asarray(lengths, dtype=np.int64)


class _JsonLines:
    """A JSON-lines file's documents by index: each line's byte offset, found once."""

    def __init__(self, path: str, text_key: str) -> None:
        self.path, self.text_key = path, text_key
        self.offsets: List[int] = []
        self.numbers: List[int] = []
        with open(path, "rb") as f:
            for number, offset, _ in corpus.jsonl_lines(f):
                self.offsets.append(offset)
                self.numbers.append(number)
        self._local = threading.local()

    def __len__(self) -> int:
        return len(self.offsets)

    def texts(self, documents: Sequence[int]) -> List[str]:
        f = getattr(self._local, "file", None)
        if f is None:
            f = self._local.file = open(self.path, "rb")
        out = []
        for d in documents:
            f.seek(self.offsets[d])
            out.append(corpus.json_text(f.readline(), self.text_key,
                                        f"{self.path} line {self.numbers[d]}"))
        return out


class _Parquet:
    """A Parquet file's documents by index (its rows), from decoded row groups kept in a cache
    bounded in bytes."""

    def __init__(self, path: str, text_key: str, cache_bytes: int) -> None:
        import pyarrow.parquet as pq
        self.path, self.text_key, self.cache_bytes = path, text_key, cache_bytes
        self.file = pq.ParquetFile(path)
        if text_key not in self.file.schema_arrow.names:
            raise errors.InvalidArgumentError(
                f"{path}: no column '{text_key}' (columns: "
                f"{', '.join(self.file.schema_arrow.names)})")
        self.starts = [0]
        for g in range(self.file.num_row_groups):
            self.starts.append(self.starts[-1] + self.file.metadata.row_group(g).num_rows)
        self._groups: "collections.OrderedDict[int, List[Any]]" = collections.OrderedDict()
        self._bytes: Dict[int, int] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.starts[-1]

    def _group(self, g: int) -> List[Any]:
        with self._lock:
            if g in self._groups:
                self._groups.move_to_end(g)
                return self._groups[g]
            column = self.file.read_row_group(g, columns=[self.text_key]).column(0)
            texts: List[Any] = column.to_pylist()
            self._groups[g] = texts
            self._bytes[g] = column.nbytes
            while sum(self._bytes.values()) > self.cache_bytes and len(self._groups) > 1:
                old, _ = self._groups.popitem(last=False)
                del self._bytes[old]
            return texts

    def texts(self, documents: Sequence[int]) -> List[str]:
        out = []
        for d in documents:
            g = bisect.bisect_right(self.starts, d) - 1
            text = self._group(g)[d - self.starts[g]]
            if not isinstance(text, str):
                raise errors.InvalidArgumentError(
                    f"{self.path} row {d}: '{self.text_key}' is {text!r}, not a string")
            out.append(text)
        return out


class _Source:
    """One text source of a job, as its producer reads and tokenizes it."""

    def __init__(self, text: Dict[str, Any], num_documents: int) -> None:
        """`text`: the job's tokens.text entry of this source."""
        self.files: List[Any] = []
        self.starts = [0]
        key = text["text_key"]
        for path in text["files"]:
            reader: Any = (_Parquet(path, key, PARQUET_CACHE_BYTES)
                           if path.endswith(".parquet") else _JsonLines(path, key))
            self.files.append(reader)
            self.starts.append(self.starts[-1] + len(reader))
        if self.starts[-1] != num_documents:
            raise errors.FailedPreconditionError(
                f"{', '.join(text['files'])}: {self.starts[-1]} documents, not {num_documents} "
                "as when the job was created")
        self.tokenizer = corpus.load_tokenizer(text["tokenizer"])
        eod = int(text.get("eod_id", -1))
        self.eod_id = None if eod < 0 else eod
        self.add_special_tokens = bool(text.get("add_special_tokens", False))

    def tokenize(self, documents: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        texts: List[str] = [""] * len(documents)
        by_file: Dict[int, List[Tuple[int, int]]] = collections.defaultdict(list)
        for i, d in enumerate(documents.tolist()):
            f = bisect.bisect_right(self.starts, d) - 1
            by_file[f].append((i, d - self.starts[f]))
        for f, wanted in by_file.items():
            for (i, _), text in zip(wanted, self.files[f].texts([d for _, d in wanted])):
                texts[i] = text
        ids = corpus.encode(self.tokenizer, texts, self.eod_id, self.add_special_tokens)
        lengths = np.fromiter((len(x) for x in ids), dtype=np.uint64, count=len(ids))
        tokens = (np.concatenate([np.asarray(x, dtype=np.int32) for x in ids]) if ids
                  else np.zeros(0, dtype=np.int32))
        return tokens, lengths


class Tokenizer:
    """The function a producer of a tokens job with text sources is given (its C++ threads call
    it for each batch): tokenize(source, documents) -> (tokens int32, lengths), or (code,
    message) for a croupier error, which fails the batch naming its cause."""

    def __init__(self, job: Any) -> None:
        tokens = job.tokens
        if not tokens or not tokens.get("text"):
            raise errors.InvalidArgumentError(
                f"job '{job.name}' has no text source: any croupier producer makes it")
        self.sources: Dict[int, _Source] = {}
        for text in tokens["text"]:
            k = int(text.get("source", 0))
            self.sources[k] = _Source(text, int(tokens["source_info"][k]["num_documents"]))

    def __call__(self, source: int, documents: np.ndarray) -> Any:
        try:
            return self.sources[source].tokenize(documents)
        except errors.Error as e:
            return errors.code_of(e), str(e)
        except OSError as e:
            return errors.code_of(errors.DataLossError(str(e))), str(e)
