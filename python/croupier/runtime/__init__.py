"""The process machinery every part of the package shares, named once.

- processes.py: children that die with their parent, forks that run a function and exit,
  reaping with a grace period, and the `croupier` commands started as children (waiting until
  one is ready, stopping it); describe() and how_it_ended() put an exception or an exit in words;
- thread_signals.py: block_async_signals(), which every thread croupier starts runs first, so
  that a Ctrl-C reaches the main thread;
- at_exit.py: closing the live producers of serve() and produce() before the interpreter
  finalizes, and waiting for the threads that run them;
- serving.py: serve_until_the_end(), the life of every producer of one job (produce(),
  tokens.produce(), serve()) once it has started, which C++ runs (ProducerNode::Serve).

What it may import (tests/test_imports.py holds it to this): its own modules and croupier.errors;
nothing else of croupier's (it sits under every room, the map and stream rooms, the local cluster
and the Ray adapter alike). This file imports nothing.
"""
