"""Gemma 4 value syntax: the formatter and the parser are inverses."""

from hypothesis import given, settings
from hypothesis import strategies as st

from bolt_agent.core.llm.gemma4_syntax import (
    Gemma4SyntaxError,
    format_call,
    format_value,
    parse_call,
    parse_value,
)

keys = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
strings = st.text(max_size=12).filter(lambda s: '<|"|>' not in s)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**9), 10**9),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    strings,
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=1000, deadline=None)
@given(keys, st.dictionaries(keys, values, max_size=5))
def test_call_round_trip(name, arguments):
    assert parse_call(format_call(name, arguments)) == (name, arguments)


@settings(max_examples=500, deadline=None)
@given(values)
def test_value_round_trip(value):
    assert parse_value(format_value(value)) == value


def test_errors_are_clear():
    for bad, words in [
        ('call:x{a:<|"|>open', "unterminated string"),
        ("call:x{a 1}", "expected ':'"),
        ("call:{a:1}", "invalid function name"),
        ("cal:x{}", "expected 'call:'"),
        ("call:x{a:1}}", "trailing text"),
    ]:
        try:
            parse_call(bad)
        except Gemma4SyntaxError as exc:
            assert words in str(exc), (bad, exc)
        else:
            raise AssertionError(f"{bad!r} parsed")
