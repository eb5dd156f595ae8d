"""Puts the source tree's python/ folder on the virtual environment's path (development mode).

The extension module is built by CMake straight into python/croupier/, so after `make build`
`import croupier` in .venv uses the tree as it is, with no copy to go stale.
"""
import pathlib
import sysconfig

root = pathlib.Path(__file__).resolve().parent.parent
site = pathlib.Path(sysconfig.get_paths()["purelib"])
pth = site / "croupier-dev.pth"
line = str(root / "python") + "\n"
if not pth.exists() or pth.read_text() != line:
    pth.write_text(line)
