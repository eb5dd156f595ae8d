"""croupier tokenize: text corpora to token datasets (docs/python.md, "Language-model data").

Tokenizes the documents of JSON-lines files (one object a line; `.gz` too) and Parquet files with
a Hugging Face tokenizer (tokenizer.json, the `tokenizers` package) and writes them, in file and
line order, as one Megatron-LM indexed dataset (PREFIX.bin, PREFIX.idx): the source of a tokens
job. The same files and tokenizer always give the same bytes.

    croupier tokenize --tokenizer tokenizer.json --output data/web --eod-token "</s>" web/*.jsonl
"""
import argparse
import glob
import gzip
import json
import os
import sys
import time
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from croupier import _croupier, errors

# Documents handed to the tokenizer at once (it encodes a batch on all cores).
BATCH_DOCUMENTS = 1024


def _jsonl_documents(path: str, text_key: str) -> Iterator[str]:
    opener: Any = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path} line {number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise errors.DataLossError(f"{where}: not JSON ({e.msg} at column {e.colno})") \
                    from None
            if not isinstance(record, dict):
                raise errors.InvalidArgumentError(
                    f"{where}: a {type(record).__name__}, not an object with a '{text_key}' key")
            text = record.get(text_key)
            if not isinstance(text, str):
                raise errors.InvalidArgumentError(
                    f"{where}: no string '{text_key}' (keys: {', '.join(sorted(record)) or 'none'})"
                    if text is None else f"{where}: '{text_key}' is a {type(text).__name__}, "
                    "not a string")
            yield text


def _parquet_documents(path: str, text_key: str) -> Iterator[str]:
    import pyarrow.parquet as pq
    parquet = pq.ParquetFile(path)
    if text_key not in parquet.schema_arrow.names:
        raise errors.InvalidArgumentError(
            f"{path}: no column '{text_key}' (columns: {', '.join(parquet.schema_arrow.names)})")
    row = 0
    for batch in parquet.iter_batches(columns=[text_key]):
        for text in batch.column(0).to_pylist():
            if not isinstance(text, str):
                raise errors.InvalidArgumentError(
                    f"{path} row {row}: '{text_key}' is {text!r}, not a string")
            row += 1
            yield text


def documents(files: Sequence[str], text_key: str = "text") -> Iterator[str]:
    """The text of every document of `files`, in order: JSON lines (.jsonl, .json, .gz) or
    Parquet (.parquet)."""
    for path in files:
        if path.endswith(".parquet"):
            yield from _parquet_documents(path, text_key)
        elif path.endswith((".jsonl", ".json", ".jsonl.gz", ".json.gz")):
            yield from _jsonl_documents(path, text_key)
        else:
            raise errors.InvalidArgumentError(
                f"{path}: not a corpus file this command reads (.jsonl, .json, .gz, .parquet)")


def expand(patterns: Sequence[str]) -> List[str]:
    """Each pattern's matches, sorted, in pattern order; NotFoundError naming one that matches
    nothing."""
    files: List[str] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern))
        if not matches:
            raise errors.NotFoundError(f"no file matches '{pattern}'")
        files += matches
    return files


def tokenize_corpus(files: Sequence[str], tokenizer_path: str, output: str, *,
                    text_key: str = "text", eod_token: Optional[str] = None,
                    eod_id: Optional[int] = None, dtype: str = "auto",
                    add_special_tokens: bool = False) -> Tuple[int, int]:
    """Writes the documents of `files` tokenized with the tokenizer at `tokenizer_path` as the
    indexed dataset `output` (.bin, .idx); each followed by the end-of-document token when one
    is named (eod_token, or eod_id). dtype "auto" is uint16 when the vocabulary fits it, else
    int32. Returns (documents, tokens)."""
    from tokenizers import Tokenizer
    try:
        tokenizer = Tokenizer.from_file(tokenizer_path)
    except Exception as e:  # the tokenizers package raises its own exception types
        raise errors.InvalidArgumentError(
            f"{tokenizer_path}: not a tokenizer.json the tokenizers package reads ({e})") from None
    if eod_token is not None:
        eod_id = tokenizer.token_to_id(eod_token)
        if eod_id is None:
            raise errors.InvalidArgumentError(
                f"{tokenizer_path}: the tokenizer has no token '{eod_token}' (--eod-token)")
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    if dtype == "auto":
        dtype = "uint16" if vocab <= 65536 else "int32"
    writer = _croupier.IndexedDatasetWriter(output, dtype)
    pending: List[str] = []

    def flush() -> None:
        for encoding in tokenizer.encode_batch(pending, add_special_tokens=add_special_tokens):
            ids = encoding.ids
            writer.add(ids + [eod_id] if eod_id is not None else ids)
        pending.clear()

    for text in documents(files, text_key):
        pending.append(text)
        if len(pending) == BATCH_DOCUMENTS:
            flush()
    flush()
    writer.finish()
    return writer.num_documents, writer.num_tokens


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="croupier tokenize",
        description="Tokenizes JSON-lines and Parquet files with a Hugging Face tokenizer into "
                    "a Megatron-LM indexed dataset (PREFIX.bin, PREFIX.idx), a tokens job's "
                    "source. Documents keep file and line order.")
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="JSON lines (.jsonl, .json, .gz) or Parquet (.parquet); globs too")
    parser.add_argument("--tokenizer", required=True, metavar="FILE",
                        help="a tokenizer.json (Hugging Face tokenizers)")
    parser.add_argument("--output", required=True, metavar="PREFIX",
                        help="writes PREFIX.bin and PREFIX.idx")
    parser.add_argument("--text-key", default="text", metavar="KEY",
                        help="the JSON key or Parquet column of the text (default: text)")
    eod = parser.add_mutually_exclusive_group()
    eod.add_argument("--eod-token", default=None, metavar="TOKEN",
                     help="append this token to every document, e.g. '</s>'")
    eod.add_argument("--eod-id", type=int, default=None, metavar="ID",
                     help="append this token id to every document")
    parser.add_argument("--dtype", choices=("auto", "uint16", "int32"), default="auto",
                        help="auto: uint16 when the vocabulary fits, else int32")
    parser.add_argument("--add-special-tokens", action="store_true",
                        help="let the tokenizer add its special tokens (BOS, ...) to each")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        files = expand(args.files)
        count, tokens = tokenize_corpus(files, args.tokenizer, args.output,
                                        text_key=args.text_key, eod_token=args.eod_token,
                                        eod_id=args.eod_id, dtype=args.dtype,
                                        add_special_tokens=args.add_special_tokens)
    except (errors.Error, OSError) as e:
        print(f"croupier tokenize: {e}", file=sys.stderr)
        return 1
    except ImportError as e:
        print(f"croupier tokenize: {e}: install the tokenizers package "
              "(pip install 'croupier[tokenize]')", file=sys.stderr)
        return 1
    seconds = time.monotonic() - start
    print(f"{args.output}: {count} documents, {tokens} tokens from {len(files)} files in "
          f"{seconds:.1f} s ({tokens / max(seconds, 1e-9):,.0f} tokens/s); "
          f"{os.path.getsize(args.output + '.bin')} bytes")
    return 0
