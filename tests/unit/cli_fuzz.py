"""What the CLI fuzz tests share: option values that are wrong in some way, and the check that a
command ended cleanly (an allowed exit code, no traceback, one `error:` line when it failed)."""

from __future__ import annotations

from cli_run import Outcome
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st

FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])
UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing listens, refused at once

values = st.one_of(
    st.sampled_from(["", "0", "-1", "1", "nan", "inf", "-inf", "1e400", "abc", "[/]", "[red]x", "--out",
                     "=", "ttft", "ttft=-5", "ttft=x", "50,abc", "0,100", "chat", "completions", "foo",
                     "single-decode", "/proc", "/proc/x/y", "é", " ", "\t"]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=10),
    st.integers(-10**6, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
)
# Numbers at and past the edges: negative, zero, NaN, huge (as a user might paste them).
edge_numbers = st.sampled_from(["-5", "0", "-0", "nan", "inf", "-inf", "1e20", "100000000000000000000", "1.5",
                                "99999999999", "0.0001", "2", "1e-300"])
# URLs a user gets wrong: no scheme, another scheme, bad ports, spaces; none is ever contacted
# except UNREACHABLE, which refuses at once.
bad_urls = st.sampled_from(["127.0.0.1:8301", "ftp://127.0.0.1:9", "http://127.0.0.1:99999", "http://127.0.0.1:0",
                            "http:// 127.0.0.1:9", "http://127.0.0.1:9 ", "", "http://", "http://127.0.0.1:x",
                            "http://127.0.0.1:9/?q=1", "localhost", "http://[::1", UNREACHABLE])


def assert_clean(result: Outcome, allowed: tuple[int, ...] = (0, 2)) -> None:
    """The contract's shape of an ending; `allowed`: the exit codes this case may have."""
    event(f"exit code {result.code}")  # --hypothesis-show-statistics shows how the cases ended
    assert result.code in allowed, result
    assert "Traceback" not in result.stderr + result.stdout, result
    if result.code == 2:  # bad input: exactly one line saying what and where
        assert len(result.error_lines) == 1, result.stderr
        assert result.error_lines[0].startswith("error: "), result.stderr
    elif result.code == 1:  # ran, no result: said once (an error line, or the command's own verdict line)
        assert sum(line.startswith("error: ") for line in result.error_lines) <= 1, result.stderr
        assert result.stderr.strip() or result.stdout.strip(), result
