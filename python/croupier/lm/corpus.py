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


def json_text(line: bytes, text_key: str, where: str) -> str:
    """The text at `text_key` of one JSON-lines line; errors name `where` (file and line)."""
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        detail = f"{e.msg} at column {e.colno}" if isinstance(e, json.JSONDecodeError) else e
        raise errors.DataLossError(f"{where}: not JSON ({detail})") from None
    if not isinstance(record, dict):
        raise errors.InvalidArgumentError(
            f"{where}: a {type(record).__name__}, not an object with a '{text_key}' key")
    text = record.get(text_key)
    if not isinstance(text, str):
        raise errors.InvalidArgumentError(
            f"{where}: no string '{text_key}' (keys: {', '.join(sorted(record)) or 'none'})"
            if text is None else f"{where}: '{text_key}' is a {type(text).__name__}, "
            "not a string")
    return text


def jsonl_lines(f: Any) -> Iterator[Tuple[int, int, bytes]]:
    """(line number, byte offset, line) of each document line of a binary JSON-lines stream:
    every line but those of ASCII whitespace alone. A document is such a line, here and in a
    text source (croupier.lm.text), which reads them again by offset."""
    offset = 0
    for number, line in enumerate(f, start=1):
        if line.strip():
            yield number, offset, line
        offset += len(line)


def _jsonl_documents(path: str, text_key: str) -> Iterator[str]:
    opener: Any = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        for number, _, line in jsonl_lines(f):
            yield json_text(line, text_key, f"{path} line {number}")


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


def load_tokenizer(path: str) -> Any:
    """The tokenizers.Tokenizer of a tokenizer.json; InvalidArgumentError naming the file."""
    from tokenizers import Tokenizer
    try:
        return Tokenizer.from_file(path)
    except Exception as e:  # the tokenizers package raises its own exception types
        raise errors.InvalidArgumentError(
            f"{path}: not a tokenizer.json the tokenizers package reads ({e})") from None


def encode(tokenizer: Any, texts: Sequence[str], eod_id: Optional[int],
           add_special_tokens: bool) -> List[List[int]]:
    """The token ids of each text, followed by eod_id when it is not None: how croupier tokenize
    and a text source (croupier.lm.text) both tokenize, so that their tokens are the same."""
    # encode_batch_fast gives the same ids as encode_batch without the offsets (1.5x less CPU
    # on one core, bench_tokens.py); older tokenizers lack it.
    batch = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
    encodings = batch(list(texts), add_special_tokens=add_special_tokens)
    if eod_id is None:
        return [e.ids for e in encodings]
    return [e.ids + [eod_id] for e in encodings]


def eod_of(tokenizer: Any, tokenizer_path: str, eod_token: Optional[str],
           eod_id: Optional[int]) -> Optional[int]:
    """The end-of-document id: eod_id, or eod_token's id; InvalidArgumentError naming a token
    the tokenizer lacks."""
    if eod_token is None:
        return eod_id
    found = tokenizer.token_to_id(eod_token)
    if found is None:
        raise errors.InvalidArgumentError(
            f"{tokenizer_path}: the tokenizer has no token '{eod_token}' (--eod-token)")
    return int(found)


def tokenize_corpus(files: Sequence[str], tokenizer_path: str, output: str, *,
                    text_key: str = "text", eod_token: Optional[str] = None,
                    eod_id: Optional[int] = None, dtype: str = "auto",
                    add_special_tokens: bool = False) -> Tuple[int, int]:
    """Writes the documents of `files` tokenized with the tokenizer at `tokenizer_path` as the
    indexed dataset `output` (.bin, .idx); each followed by the end-of-document token when one
    is named (eod_token, or eod_id). dtype "auto" is uint16 when the vocabulary fits it, else
    int32. Returns (documents, tokens)."""
    tokenizer = load_tokenizer(tokenizer_path)
    eod_id = eod_of(tokenizer, tokenizer_path, eod_token, eod_id)
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    if dtype == "auto":
        dtype = "uint16" if vocab <= 65536 else "int32"
    writer = _croupier.IndexedDatasetWriter(output, dtype)
    pending: List[str] = []

    def flush() -> None:
        for ids in encode(tokenizer, pending, eod_id, add_special_tokens):
            writer.add(ids)
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
