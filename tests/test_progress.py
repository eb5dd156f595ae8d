"""croupier.progress: the bar the demo and the benchmark suite show."""
import io

from croupier.progress import Progress


class FakeTty(io.StringIO):
    def isatty(self):
        return True


def test_a_pipe_gets_one_plain_line_per_tenth():
    out = io.StringIO()
    bar = Progress("epoch 0", total=100, unit="steps", stream=out)
    for i in range(1, 101):
        bar.update(i)
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 11, lines  # the first update, then each tenth reached
    assert "\r" not in out.getvalue()
    assert lines[-1].startswith("epoch 0 [" + "#" * 30 + "] 100% 100/100 steps")


def test_a_terminal_gets_one_line_redrawn_in_place():
    out = FakeTty()
    bar = Progress("bench", total=4, unit="programs", stream=out)
    bar.update(2)
    assert out.getvalue().startswith("\rbench [" + "#" * 15 + "." * 15 + "]  50% 2/4 programs")
    bar.update(4)
    bar.close()
    bar.close()  # idempotent
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    assert "100% 4/4" in text.splitlines()[-1].split("\r")[-1]


def test_done_is_clamped_to_the_total():
    bar = Progress("x", total=10, stream=io.StringIO())
    bar.update(25)
    assert bar.done == 10
    bar.update(-3)
    assert bar.done == 0
