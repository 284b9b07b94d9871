"""Tests for rmq.common.jhash (Java String.hashCode) and rmq.common.filter (TAG and SQL92 filters)."""

from __future__ import annotations

import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq.common.filter import (
    MAX_EXPRESSION_LENGTH,
    SqlFilter,
    SqlParseError,
    TagFilter,
    build_filter,
    compile_sql,
    parse_tags,
)
from rmq.common.jhash import java_string_hash, tags_code

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------
# Java String.hashCode
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("s, expected", [
    ("", 0),
    ("a", 97),
    ("TagA", 2598919),           # 84*31**3 + 97*31**2 + 103*31 + 65
    ("hello", 99162322),
    ("*", 42),
    ("polygenelubricants", -2147483648),   # well-known Integer.MIN_VALUE hash
    ("f5a5a608", 0),                       # well-known non-empty string hashing to 0
])
def test_java_hash_known_values(s, expected):
    assert java_string_hash(s) == expected


def test_java_hash_topic_key_by_hand():
    # h = 31*h + c, kept to 32 bits at each step:
    #            0 * 31 +  84 ('T') =           84 mod 2**32 = 84
    #           84 * 31 + 111 ('o') =         2715 mod 2**32 = 2715
    #         2715 * 31 + 112 ('p') =        84277 mod 2**32 = 84277
    #        84277 * 31 + 105 ('i') =      2612692 mod 2**32 = 2612692
    #      2612692 * 31 +  99 ('c') =     80993551 mod 2**32 = 80993551
    #     80993551 * 31 +  84 ('T') =   2510800165 mod 2**32 = 2510800165
    #   2510800165 * 31 + 101 ('e') =  77834805216 mod 2**32 = 525393888
    #    525393888 * 31 + 115 ('s') =  16287210643 mod 2**32 = 3402308755
    #   3402308755 * 31 + 116 ('t') = 105471571521 mod 2**32 = 2392356417
    #   2392356417 * 31 +  35 ('#') =  74163048962 mod 2**32 = 1148604930
    #   1148604930 * 31 +  75 ('K') =  35606752905 mod 2**32 = 1247014537
    #   1247014537 * 31 +  69 ('E') =  38657450716 mod 2**32 = 2745052
    #      2745052 * 31 +  89 ('Y') =     85096701 mod 2**32 = 85096701
    #     85096701 * 31 +  49 ('1') =   2637997780 mod 2**32 = 2637997780
    # 2637997780 >= 2**31, so as a signed int: 2637997780 - 2**32 = -1656969516
    units = [84, 111, 112, 105, 99, 84, 101, 115, 116, 35, 75, 69, 89, 49]
    assert units == [ord(c) for c in "TopicTest#KEY1"]
    assert sum(u * 31 ** (13 - i) for i, u in enumerate(units)) % 2**32 == 2637997780
    assert java_string_hash("TopicTest#KEY1") == 2637997780 - 2**32 == -1656969516


def test_java_hash_non_ascii():
    # '中' U+4E2D = 20013, '文' U+6587 = 25991: 20013*31 + 25991
    assert java_string_hash("中文") == 20013 * 31 + 25991 == 646394
    # U+1F600 is the surrogate pair D83D DE00 in UTF-16: 55357*31 + 56832
    assert java_string_hash("\U0001F600") == 55357 * 31 + 56832 == 1772899
    # a lone surrogate is one code unit, as in a Java String
    assert java_string_hash("\ud83d") == 0xD83D


def test_java_hash_long_strings_not_cached_but_equal():
    s = "x" * 10_000 + "é"
    assert java_string_hash(s) == java_string_hash(s) == _reference_hash(s)


def _reference_hash(s: str) -> int:
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for (unit,) in struct.iter_unpack(">H", data):
        h = (31 * h + unit) % 2**32
    return h - 2**32 if h >= 2**31 else h


@FUZZ
@given(st.text())
def test_java_hash_matches_reference(s):
    h = java_string_hash(s)
    assert h == _reference_hash(s)
    assert -2**31 <= h < 2**31


def test_tags_code():
    assert tags_code(None) == 0
    assert tags_code("") == 0
    assert tags_code("TagA") == 2598919


# ---------------------------------------------------------------------------
# Tag expressions
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("expr", [None, "", "*"])
def test_tag_subscribe_all(expr):
    f = TagFilter(expr)
    assert f.subscribe_all and f.expression == "*"
    assert f.matches_code(0) and f.matches_code(12345)
    assert f.matches_tags(None) and f.matches_tags("anything")
    assert f.matches_message(None, {}) and f.matches_message("TagZ", {})


def test_tag_parse_split_trim_and_codes():
    all_, tags, codes = parse_tags(" TagA ||TagB|| || \tTagC\n||")
    assert not all_
    assert tags == {"TagA", "TagB", "TagC"}
    assert codes == {java_string_hash(t) for t in tags}


def test_tag_parse_edge_cases():
    # " * " is not SUB_ALL (RocketMQ compares the raw string), it is the literal tag "*"
    assert parse_tags(" * ") == (False, frozenset({"*"}), frozenset({42}))
    # '|||' splits into '' and '|'
    assert parse_tags("|||")[1] == {"|"}
    # Java trim only strips chars <= U+0020: a no-break space stays part of the tag
    assert parse_tags("\u00a0TagA")[1] == {"\u00a0TagA"}
    # only separators: Java's split returns an empty array and RocketMQ throws
    for expr in ("||", "||||"):
        with pytest.raises(ValueError):
            parse_tags(expr)


def test_tag_two_tags():
    f = TagFilter("TagA || TagB")
    assert f.tags == {"TagA", "TagB"}
    assert f.matches_code(java_string_hash("TagA"))
    assert f.matches_code(java_string_hash("TagB"))
    assert not f.matches_code(java_string_hash("TagC"))
    assert f.matches_tags("TagA") and f.matches_tags("TagB")
    assert not f.matches_tags("TagC") and not f.matches_tags("taga")
    assert f.matches_message("TagB", None)
    assert not f.matches_message("TagC", None)


def test_tag_message_without_tags():
    f = TagFilter("TagA")
    # tagsCode 0 is not in the code set: dropped by the broker
    assert not f.matches_code(0)
    assert not f.matches_tags(None)
    assert not f.matches_message(None, {})
    # an unreadable tags code (null in Java) passes the broker pre-filter
    assert f.matches_code(None)


def test_tag_hash_collision_is_caught_by_exact_check():
    # "f5a5a608" hashes to 0, like a message without tags: the broker lets it through and
    # the client-side exact check drops it.
    f = TagFilter("f5a5a608")
    assert f.matches_code(0)
    assert not f.matches_tags(None)
    assert not f.matches_message(None, {})
    # two different strings with the same hash ("Aa" and "BB")
    assert java_string_hash("Aa") == java_string_hash("BB")
    g = TagFilter("Aa")
    assert g.matches_code(java_string_hash("BB")) and not g.matches_tags("BB")
    assert not g.matches_message("BB", {})


def test_tag_code_is_truncated_like_long_intvalue():
    f = TagFilter("TagA")
    assert f.matches_code(2598919 + (5 << 32))


def test_tag_blank_expression_matches_nothing():
    # " " is not empty, trims to nothing: empty code set on the broker, no client filtering
    f = TagFilter(" ")
    assert not f.subscribe_all and not f.tags
    assert not f.matches_code(java_string_hash("TagA"))
    assert f.matches_tags("TagA")
    assert not f.matches_message("TagA", {})


@FUZZ
@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="|"), min_size=1), min_size=1))
def test_tag_parse_fuzz(parts):
    expr = " || ".join(parts)
    all_, tags, codes = parse_tags(expr)
    expected = {p.strip("".join(chr(i) for i in range(33))) for p in parts} - {""}
    if expr == "*":
        assert all_
    else:
        assert tags == expected
        assert codes == {java_string_hash(t) for t in expected}


# ---------------------------------------------------------------------------
# build_filter
# ---------------------------------------------------------------------------

def test_build_filter_types():
    assert isinstance(build_filter("TAG", "TagA"), TagFilter)
    assert isinstance(build_filter(None, "TagA"), TagFilter)   # ExpressionType.isTagType(null)
    assert isinstance(build_filter("", "*"), TagFilter)
    sql = build_filter("SQL92", "a > 1")
    assert isinstance(sql, SqlFilter)
    assert sql.matches_code(0) and sql.matches_code(12345) and sql.matches_code(None)
    assert sql.matches_message(None, {"a": "2"})
    assert not sql.matches_message(None, {"a": "1"})
    with pytest.raises(ValueError, match="BOGUS"):
        build_filter("BOGUS", "a")
    with pytest.raises(ValueError, match="sql92"):
        build_filter("sql92", "a > 1")   # type names are case-sensitive, as in RocketMQ
    with pytest.raises(SqlParseError):
        build_filter("SQL92", None)
    with pytest.raises(SqlParseError):
        build_filter("SQL92", "")


def test_sql_sees_tags_property():
    f = build_filter("SQL92", "TAGS = 'TagA' AND a = '1'")
    assert f.matches_message("TagA", {"a": "1"})
    assert f.matches_message(None, {"TAGS": "TagA", "a": "1"})
    assert not f.matches_message("TagB", {"a": "1"})
    assert not f.matches_message(None, {"a": "1"})


# ---------------------------------------------------------------------------
# SQL92: operators and semantics
# ---------------------------------------------------------------------------

def m(expr: str, props: dict | None = None) -> bool:
    return compile_sql(expr).matches(props if props is not None else {})


@pytest.mark.parametrize("expr, props, expected", [
    # string equality
    ("a = 'x'", {"a": "x"}, True),
    ("a = 'x'", {"a": "y"}, False),
    ("a <> 'x'", {"a": "y"}, True),
    ("a <> 'x'", {"a": "x"}, False),
    ("'x' = a", {"a": "x"}, True),
    ("a = 'it''s'", {"a": "it's"}, True),
    ("a = ''", {"a": ""}, True),
    # numbers vs property strings
    ("a > 5", {"a": "6"}, True),
    ("a > 5", {"a": "5"}, False),
    ("a >= 5", {"a": "5"}, True),
    ("a < 5", {"a": "-3"}, True),
    ("a <= 5", {"a": "5"}, True),
    ("a <= 5", {"a": "+6"}, False),
    ("a = 5", {"a": "5"}, True),
    ("a = 5", {"a": "005"}, True),
    ("a <> 5", {"a": "6"}, True),
    ("5 < a", {"a": "6"}, True),
    ("a > -5", {"a": "-4"}, True),
    ("a > 5.5", {"a": "5.6"}, True),
    ("a > 5.5", {"a": "6"}, True),
    ("a = 5.0", {"a": "5"}, True),
    ("a > 1E3", {"a": "1001"}, True),
    ("a > .5", {"a": "0.75"}, True),
    ("a < 3000000000", {"a": "2999999999"}, True),   # Long literal, Long.parseLong
    ("a > 5L", {"a": "6"}, True),
    ("a > 1.5", {"a": " 2.5 "}, True),              # Double.valueOf trims
    ("a > 1.5", {"a": "2.5d"}, True),               # ... and accepts a d/f suffix
    ("a > 1.5", {"a": "0x1.8p1"}, True),            # ... and hex floats
    # Integer.parseInt: a decimal point, spaces or overflow make the property unusable
    ("a > 5", {"a": "5.5"}, False),
    ("a > 5", {"a": " 6"}, False),
    ("a > 5", {"a": "3000000000"}, False),
    ("a = 5", {"a": "5.0"}, False),
    ("a > 5", {"a": "abc"}, False),
    # property vs property: two strings are compared as doubles by < <= > >=
    ("a > b", {"a": "10", "b": "9"}, True),         # numeric, not lexicographic
    ("a < b", {"a": "1.5", "b": "abc"}, False),
    ("a = b", {"a": "10", "b": "10"}, True),
    ("a = b", {"a": "10", "b": "10.0"}, False),     # = on two strings is string equality
    # booleans
    ("TRUE", {}, True),
    ("FALSE", {}, False),
    ("a = TRUE", {"a": "true"}, True),
    ("a = TRUE", {"a": "TRUE"}, True),
    ("a = FALSE", {"a": "no"}, True),               # Boolean.valueOf("no") is false
    ("TRUE = a", {"a": "true"}, False),             # Java ClassCastException -> no match
    ("TRUE = FALSE", {}, False),
    ("1 = TRUE", {}, False),
    ("a", {"a": "true"}, False),                    # a bare property is a String, not a Boolean
    ("NOT a", {"a": "x"}, True),
    ("NOT a", {}, False),
    # IN / NOT IN
    ("a IN ('x', 'y')", {"a": "y"}, True),
    ("a IN ('x', 'y')", {"a": "z"}, False),
    ("a IN ('x','y','z','w','v','u')", {"a": "u"}, True),
    ("a NOT IN ('x', 'y')", {"a": "z"}, True),
    ("a NOT IN ('x', 'y')", {"a": "x"}, False),
    ("a IN ('1')", {"a": "1"}, True),
    # BETWEEN / NOT BETWEEN (inclusive)
    ("a BETWEEN 1 AND 10", {"a": "1"}, True),
    ("a BETWEEN 1 AND 10", {"a": "10"}, True),
    ("a BETWEEN 1 AND 10", {"a": "11"}, False),
    ("a BETWEEN 1 AND 1", {"a": "1"}, True),
    ("a BETWEEN -5 AND 1.5", {"a": "-5"}, True),
    ("a NOT BETWEEN 1 AND 10", {"a": "0"}, True),
    ("a NOT BETWEEN 1 AND 10", {"a": "11"}, True),
    ("a NOT BETWEEN 1 AND 10", {"a": "5"}, False),
    # IS NULL / IS NOT NULL
    ("a IS NULL", {}, True),
    ("a IS NULL", {"a": "x"}, False),
    ("a IS NOT NULL", {"a": ""}, True),
    ("a IS NOT NULL", {}, False),
    ("NULL IS NULL", {}, True),
    ("NULL", {}, False),
    # keywords and names
    ("a = 'x' and b = 'y'", {"a": "x", "b": "y"}, True),
    ("a is not null OR b between 1 and 2", {"b": "2"}, True),
    ("_x.y$ = '1'", {"_x.y$": "1"}, True),
    ("ANDY = '1'", {"ANDY": "1"}, True),
    ("a = 'x' -- a comment\n", {"a": "x"}, True),
    ("/* c */ a /* d */ = 'x'", {"a": "x"}, True),
    ("+a > 1", {"a": "2"}, True),
    ("-a > 1", {"a": "-2"}, False),    # negating a String yields null
    ("- -5 = 5", {}, True),
    ("1 = 1", {}, True),
    ("'a' = 'a'", {}, True),
])
def test_sql_cases(expr, props, expected):
    assert m(expr, props) is expected


def test_sql_double_special_values():
    # Double.compare puts NaN above everything and -0.0 below 0.0
    assert m("a > 5.5", {"a": "NaN"})
    assert m("a > 5.5", {"a": "Infinity"})
    assert not m("a < 5.5", {"a": "NaN"})
    assert m("a < 1.5", {"a": "-Infinity"})
    assert not m("a > 1.5", {"a": "nan"})       # Java is case-sensitive here
    assert m("a < b", {"a": "-0.0", "b": "0.0"})
    assert m("a = b", {"a": "NaN", "b": "NaN"})   # string equality


def test_sql_unicode_digits_parse_like_java():
    # Integer.parseInt accepts any Unicode decimal digit
    assert m("a = 12", {"a": "\u0661\u0662"})
    # Double.valueOf only ASCII ones
    assert not m("a = 12.5", {"a": "\u0661\u0662.5"})


def test_sql_missing_property_is_unknown():
    for expr in ("a = 'x'", "a <> 'x'", "a > 1", "a < 1", "a IN ('x')", "a NOT IN ('x')",
                 "a BETWEEN 1 AND 2", "a NOT BETWEEN 1 AND 2", "NOT (a = 'x')", "a = TRUE"):
        assert not m(expr, {}), expr
        assert not m(expr, None), expr


def test_sql_three_valued_logic():
    # unknown OR true = true, unknown AND false = false, unknown AND true = unknown
    assert m("a = 'x' OR b = 'y'", {"b": "y"})
    assert not m("a = 'x' AND b = 'y'", {"b": "y"})
    assert m("NOT (a = 'x' AND b = 'y')", {"b": "z"})      # NOT(unknown AND false) = true
    assert not m("NOT (a = 'x' OR b = 'y')", {"b": "z"})   # NOT(unknown OR false) = unknown
    assert not m("NOT (a = 'x')", {})
    # two missing properties compare equal (Java: null == null)
    assert m("a = b", {})
    assert not m("a = b", {"a": "1"})                       # FALSE: left non-null, right null
    assert not m("NOT (a = b)", {"b": "1"})                 # unknown: left null


def test_sql_evaluation_error_aborts_whole_expression():
    # RocketMQ lets the NumberFormatException escape: the message does not match even if
    # another OR branch would be true ...
    assert not m("a > 5 OR b = 'y'", {"a": "abc", "b": "y"})
    # ... but short-circuit evaluation never reaches the failing comparison here
    assert m("b = 'y' OR a > 5", {"a": "abc", "b": "y"})
    assert not m("NOT (a > 5)", {"a": "abc"})
    assert not m("a > 5 AND b = 'y'", {"a": "abc", "b": "y"})
    # values of other types than str are a caller error; they never raise out of matches()
    assert not m("a > b", {"a": {}, "b": {}})


def test_sql_precedence():
    # NOT binds tighter than AND, which binds tighter than OR
    assert m("TRUE OR TRUE AND FALSE")            # TRUE OR (TRUE AND FALSE)
    assert not m("(TRUE OR TRUE) AND FALSE")
    assert m("FALSE AND FALSE OR TRUE")           # (FALSE AND FALSE) OR TRUE
    assert m("NOT FALSE AND TRUE")                # (NOT FALSE) AND TRUE
    assert not m("NOT TRUE AND FALSE")
    assert m("NOT TRUE OR TRUE")                  # (NOT TRUE) OR TRUE
    assert not m("NOT (TRUE OR TRUE)")
    assert m("NOT NOT TRUE")
    props = {"a": "1", "b": "2", "c": "3"}
    assert m("a = '1' OR b = 'x' AND c = 'x'", props)
    assert not m("(a = '1' OR b = 'x') AND c = 'x'", props)
    assert m("a = 1 AND (b = 9 OR c = 3)", props)
    # NOT applies to the operand, not the comparison: NOT a = 'x' is (NOT a) = 'x'
    assert not m("NOT a = '1'", props)
    assert m("NOT (a = '2')", props)


def test_sql_long_flat_chains_do_not_recurse():
    expr = " OR ".join(f"a = '{i}'" for i in range(300))
    f = compile_sql(expr)
    assert f.matches({"a": "299"}) and not f.matches({"a": "x"})
    expr = " AND ".join("a IS NOT NULL" for _ in range(200))
    assert compile_sql(expr).matches({"a": "1"})


def test_sql_compiled_once_and_cached():
    f = compile_sql("k = 'v'")
    assert compile_sql("k = 'v'") is f
    assert f.names == {"k"}
    assert compile_sql("a > 1 AND b IN ('x') OR TAGS IS NULL").names == {"a", "b", "TAGS"}


def test_sql_closure_speed():
    f = compile_sql("a > 10 AND b IN ('x', 'y') AND (c = 'z' OR d IS NULL)")
    props = {"a": "11", "b": "y", "c": "q"}
    t0 = time.perf_counter()
    for _ in range(20_000):
        assert f.matches(props)
    assert time.perf_counter() - t0 < 2.0


# ---------------------------------------------------------------------------
# SQL92: errors
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("expr, position, fragment", [
    ("a = 1 AND AND b", 11, "unexpected token 'AND' at position 11"),
    ("a >", 4, "unexpected end of expression at position 4"),
    ("", 1, "empty expression"),
    ("   ", 4, "empty expression"),
    ("a = 'x", 5, "unterminated string"),
    ("a # 1", 3, "unexpected character '#'"),
    ("a = 1 b = 2", 7, "unexpected token 'b'"),
    ("(a = 1", 7, "expected ')'"),
    ("a = 1)", 6, "unexpected token ')'"),
    ("a IS 1", 6, "expected NULL or NOT NULL"),
    ("a IN ('x', 1)", 12, "expected a string literal"),
    ("a IN 'x'", 6, "'(' after IN"),
    ("a IN ()", 7, "string literal"),
    ("a BETWEEN 1 OR 2", 13, "unexpected token 'OR'"),
    ("a == 1", 4, "unexpected token '='"),
    ("a != 1", 3, "unexpected character '!'"),
    ("1", 1, "does not yield a boolean"),
    ("'x'", 1, "does not yield a boolean"),
    ("NOT 1", 5, "does not yield a boolean"),
    ("a = 1 AND 2", 11, "does not yield a boolean"),
    ("a > 'x'", 3, "cannot be compared"),
    ("a > TRUE", 3, "cannot be compared"),
    ("a > NULL", 3, "cannot be compared"),
    ("a = NULL", 3, "NULL cannot be compared"),
    ("TRUE = 'x'", 6, "cannot be compared"),
    ("NOT a > 1", 7, "NOT binds tighter"),
    ("a > 1 > 2", 7, "boolean expression cannot be compared"),
    ("a BETWEEN 5 AND 1", 3, "lower bound"),
    ("a BETWEEN 'a' AND 'b'", 3, "cannot be compared"),
    ("a BETWEEN NULL AND 1", 3, "cannot be NULL"),
    ("1 IN ('x')", 3, "IN needs a property"),
    ("a > 0.0", 5, "Double.MIN_VALUE"),            # RocketMQ rejects a 0.0 literal
    ("a > 1e999", 5, "Double.MAX_VALUE"),
    ("a > 9223372036854775808", 5, "out of range"),
    ("a > 007", 6, "unexpected token '0'"),
    ("a = 1 /* open", 7, "unterminated comment"),
    ("a = 1 -- no newline", 7, "unexpected token '-'"),
])
def test_sql_errors(expr, position, fragment):
    with pytest.raises(SqlParseError) as ei:
        compile_sql(expr)
    assert fragment in str(ei.value)
    assert ei.value.position == position
    assert f"position {position}" in str(ei.value)


def test_sql_error_is_value_error_with_token():
    with pytest.raises(ValueError) as ei:
        compile_sql("a = 1 AND AND b")
    assert ei.value.token == "AND"
    with pytest.raises(SqlParseError):
        compile_sql(None)  # type: ignore[arg-type]


def test_sql_guards_against_pathological_input():
    with pytest.raises(SqlParseError, match="too long"):
        compile_sql("a = 'x' OR " * 1000 + "TRUE")
    assert len("(" * 100) < MAX_EXPRESSION_LENGTH
    for expr in ("(" * 100 + "TRUE" + ")" * 100, "NOT " * 100 + "TRUE", "-" * 200 + "1 = 1",
                 "(" * 4000):
        with pytest.raises(SqlParseError, match="nested too deeply"):
            compile_sql(expr)
    with pytest.raises(SqlParseError, match="nested too deeply"):
        compile_sql("a" + " = a" * 600)
    # the deepest accepted nesting still evaluates
    assert compile_sql("(" * 60 + "a = '1'" + ")" * 60).matches({"a": "1"})
    assert compile_sql("NOT " * 64 + "TRUE").matches({})
    t0 = time.perf_counter()
    for expr in ("-" * 4096, "'" * 4095, "/*" + "*" * 4000, "--" * 2000, "1" * 4096, "a" * 4096):
        try:
            compile_sql(expr)
        except SqlParseError:
            pass
    assert time.perf_counter() - t0 < 2.0


# ---------------------------------------------------------------------------
# SQL92: fuzzing
# ---------------------------------------------------------------------------

_SQL_WORDS = ["a", "b", "TAGS", "NOT", "AND", "OR", "BETWEEN", "IN", "IS", "NULL", "TRUE",
              "FALSE", "=", "<>", "<", "<=", ">", ">=", "(", ")", ",", "+", "-", "1", "0",
              "2.5", "1e3", ".5", "9999999999", "'x'", "'1'", "''", "'", "--", "/*", "*/",
              "\n", "l", "$", "."]


@FUZZ
@given(st.text(max_size=200))
def test_sql_fuzz_random_text_only_raises_parse_error(s):
    try:
        f = compile_sql(s)
    except SqlParseError:
        return
    assert f.matches({"a": "1"}) in (True, False)


@FUZZ
@given(st.lists(st.sampled_from(_SQL_WORDS), max_size=30), st.sampled_from([" ", ""]))
def test_sql_fuzz_token_soup_only_raises_parse_error(words, sep):
    try:
        f = compile_sql(sep.join(words) if sep else " ".join(words))
    except SqlParseError:
        return
    for props in ({}, {"a": "1"}, {"a": "x", "b": "2.5"}, {"a": "true", "b": "NaN", "TAGS": "t"}):
        assert f.matches(props) in (True, False)


def _exprs():
    prop = st.sampled_from(["a", "b", "c"])
    num = st.sampled_from(["1", "2", "-3", "2.5", "3000000000", "1e2"])
    string = st.sampled_from(["'1'", "'x'", "''", "'true'"])
    comparison = st.one_of(
        st.builds(lambda p, o, n: f"{p} {o} {n}", prop, st.sampled_from(["<", "<=", ">", ">=", "=", "<>"]), num),
        st.builds(lambda p, o, s: f"{p} {o} {s}", prop, st.sampled_from(["=", "<>"]), string),
        st.builds(lambda p, o: f"{p} {o}", prop, st.sampled_from(["IS NULL", "IS NOT NULL"])),
        st.builds(lambda p, n, s1, s2: f"{p} {n}IN ({s1}, {s2})", prop, st.sampled_from(["", "NOT "]), string, string),
        st.builds(lambda p, n: f"{p} {n}BETWEEN 1 AND 2.5", prop, st.sampled_from(["", "NOT "])),
        st.sampled_from(["TRUE", "FALSE", "NULL", "a = b", "a", "NOT b"]),
    )
    return st.recursive(
        comparison,
        lambda inner: st.one_of(
            st.builds(lambda x, y: f"{x} AND {y}", inner, inner),
            st.builds(lambda x, y: f"{x} OR {y}", inner, inner),
            st.builds(lambda x: f"NOT ({x})", inner),
            st.builds(lambda x: f"({x})", inner),
        ),
        max_leaves=12,
    )


@FUZZ
@given(_exprs(), st.dictionaries(st.sampled_from(["a", "b", "c"]),
                                 st.sampled_from(["1", "2", "2.5", "x", "", "true", "NaN", "-3", " 4"])))
def test_sql_fuzz_valid_expressions_evaluate_without_errors(expr, props):
    f = compile_sql(expr)
    result = f.matches(props)
    assert result in (True, False)
    # NOT(x) can only match when x evaluates to FALSE, never both
    assert not (result and compile_sql(f"NOT ({expr})").matches(props))
