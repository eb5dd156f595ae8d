"""python -m croupier produce module:function --dispatcher HOST:PORT --job NAME ...

The commands of the Python package; `croupier produce` runs the same (the C++ tool `croupier`
has the others):
  produce   a producer of a map job whose pipeline module:function returns (croupier.cli)
  tokenize  text corpora to a token dataset for tokens jobs (croupier.lm.corpus)
"""
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "produce":
        from croupier.cli import main as produce_main
        return produce_main(rest)
    if command == "tokenize":
        from croupier.lm.corpus import main as tokenize_main
        return tokenize_main(rest)
    print(f"python -m croupier: unknown command '{command}'\n\n{__doc__.strip()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
