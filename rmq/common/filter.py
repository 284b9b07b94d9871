"""Subscription filters with RocketMQ semantics: tag expressions (hash-code pre-filter plus
exact match) and SQL92 selectors over user properties, compiled once into closures."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from math import copysign
from typing import Any, Callable, Mapping

from rmq.common.jhash import java_string_hash, tags_code

__all__ = [
    "EXPRESSION_TYPE_TAG",
    "EXPRESSION_TYPE_SQL92",
    "SUB_ALL",
    "MAX_EXPRESSION_LENGTH",
    "MAX_NESTING_DEPTH",
    "SqlParseError",
    "TagFilter",
    "SqlFilter",
    "parse_tags",
    "compile_sql",
    "build_filter",
    "is_tag_type",
    "tags_code",
]

EXPRESSION_TYPE_TAG = "TAG"
EXPRESSION_TYPE_SQL92 = "SQL92"
SUB_ALL = "*"

#: Longest SQL92 expression accepted (characters).
MAX_EXPRESSION_LENGTH = 4096
#: Deepest nesting of parentheses / prefix operators accepted while parsing.
MAX_NESTING_DEPTH = 64
#: Deepest expression tree accepted (bounds the recursion of compile and evaluation).
MAX_TREE_DEPTH = 256

# java.lang.String.trim() strips every char <= U+0020, not Unicode whitespace.
_JAVA_TRIM = "".join(chr(i) for i in range(0x21))


def _java_trim(s: str) -> str:
    return s.strip(_JAVA_TRIM)


def _to_int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - 0x100000000 if v & 0x80000000 else v


# ---------------------------------------------------------------------------
# Tag expressions
# ---------------------------------------------------------------------------

_TAG_SEPARATOR = re.compile(r"\|\|")


def is_tag_type(expression_type: str | None) -> bool:
    """RocketMQ's ExpressionType.isTagType: None, "" and "TAG" (case-sensitive) mean tags."""
    return expression_type is None or expression_type == "" or expression_type == EXPRESSION_TYPE_TAG


def parse_tags(expression: str | None) -> tuple[bool, frozenset[str], frozenset[int]]:
    """Parse a tag expression the way FilterAPI.buildSubscriptionData does.

    Returns ``(subscribe_all, tags, codes)``. ``None``, ``""`` and exactly ``"*"`` subscribe
    to everything. Otherwise the expression is split on ``||`` (Java ``String.split``
    semantics, trailing empty parts dropped); each part is Java-trimmed and kept if non-empty.
    An expression made only of separators (``"||"``) is rejected as RocketMQ does.
    """
    if expression is None or expression == "" or expression == SUB_ALL:
        return True, frozenset(), frozenset()
    parts = _TAG_SEPARATOR.split(expression)
    while parts and parts[-1] == "":
        parts.pop()
    if not parts:
        raise ValueError(f"tag expression {expression!r}: subString split error")
    tags = []
    for part in parts:
        tag = _java_trim(part)
        if tag:
            tags.append(tag)
    return False, frozenset(tags), frozenset(java_string_hash(t) for t in tags)


class TagFilter:
    """A TAG subscription: broker-side hash pre-filter and client-side exact tag check."""

    __slots__ = ("expression", "subscribe_all", "tags", "codes")

    expression_type = EXPRESSION_TYPE_TAG

    def __init__(self, expression: str | None = SUB_ALL) -> None:
        self.subscribe_all, self.tags, self.codes = parse_tags(expression)
        self.expression = SUB_ALL if self.subscribe_all else expression

    def matches_code(self, tag_code: int | None) -> bool:
        """Consume-queue pre-filter (ExpressionMessageFilter.isMatchedByConsumeQueue).

        ``None`` (an unreadable tags code) matches; so does everything under ``*``.
        Otherwise the code, truncated to int as Java's ``Long.intValue`` does, must be in
        the code set. A message without tags has code 0, so it is dropped here unless some
        subscribed tag happens to hash to 0 (then the client-side check drops it).
        """
        if tag_code is None or self.subscribe_all:
            return True
        return _to_int32(tag_code) in self.codes

    def matches_tags(self, tags: str | None) -> bool:
        """Exact client-side check (PullAPIWrapper.processPullResult).

        Only applied when the tag set is non-empty; then a message must have tags and its
        tags string must equal one of the subscribed tags.
        """
        if not self.tags:
            return True
        return tags is not None and tags in self.tags

    def matches_message(self, tags: str | None, properties: Mapping[str, str] | None = None) -> bool:
        """Both stages together: would a consumer with this subscription receive the message?"""
        return self.matches_code(tags_code(tags)) and self.matches_tags(tags)

    def __repr__(self) -> str:
        return f"TagFilter({self.expression!r})"


# ---------------------------------------------------------------------------
# SQL92: errors and lexer
# ---------------------------------------------------------------------------


class SqlParseError(ValueError):
    """An invalid SQL92 selector. ``position`` is the 1-based character offset of the
    offending token in the expression (its column, for a one-line expression)."""

    def __init__(self, message: str, position: int | None = None, token: str | None = None) -> None:
        super().__init__(message)
        self.position = position
        self.token = token


_KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"})

# Alternation order gives JavaCC's longest-match result: a floating literal always
# extends a decimal one, and identifiers are checked against the keywords afterwards.
_TOKEN_RE = re.compile(
    r"""
      (?P<ws>[ \t\n\r\f]+)
    | (?P<comment>--[^\n\r]*(?:\r\n|\n|\r) | /\*[^*]*\*+(?:[^*/][^*]*\*+)*/)
    | (?P<float>(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)? | [0-9]+[eE][+-]?[0-9]+)
    | (?P<int>0|[1-9][0-9]*[lL]?)
    | (?P<str>'(?:''|[^'])*')
    | (?P<id>[A-Za-z_$][A-Za-z0-9_$.]*)
    | (?P<op><>|<=|>=|[=<>(),+-])
    """,
    re.VERBOSE,
)


class _Tok:
    __slots__ = ("kind", "text", "pos", "value")

    def __init__(self, kind: str, text: str, pos: int, value: Any = None) -> None:
        self.kind = kind  # keyword name, operator text, "INT", "FLOAT", "STR", "ID" or "EOF"
        self.text = text
        self.pos = pos  # 0-based offset
        self.value = value


def _describe(tok: _Tok) -> str:
    return "end of expression" if tok.kind == "EOF" else f"token {tok.text!r}"


def _err(msg: str, tok: _Tok, expected: str | None = None) -> SqlParseError:
    text = f"{msg} at position {tok.pos + 1}"
    if expected:
        text += f", expected {expected}"
    return SqlParseError(text, tok.pos + 1, None if tok.kind == "EOF" else tok.text)


def _tokenize(src: str) -> list[_Tok]:
    toks: list[_Tok] = []
    pos = 0
    n = len(src)
    match = _TOKEN_RE.match
    while pos < n:
        m = match(src, pos)
        if m is None:
            ch = src[pos]
            if ch == "'":
                raise SqlParseError(f"unterminated string literal at position {pos + 1}", pos + 1, ch)
            if src.startswith("/*", pos):
                raise SqlParseError(f"unterminated comment at position {pos + 1}", pos + 1, "/*")
            raise SqlParseError(f"unexpected character {ch!r} at position {pos + 1}", pos + 1, ch)
        kind = m.lastgroup
        text = m.group()
        if kind == "id":
            up = text.upper()
            toks.append(_Tok(up, text, pos) if up in _KEYWORDS else _Tok("ID", text, pos, text))
        elif kind == "op":
            toks.append(_Tok(text, text, pos))
        elif kind == "str":
            toks.append(_Tok("STR", text, pos, text[1:-1].replace("''", "'")))
        elif kind == "int":
            toks.append(_Tok("INT", text, pos))
        elif kind == "float":
            toks.append(_Tok("FLOAT", text, pos))
        # whitespace and comments are skipped
        pos = m.end()
    toks.append(_Tok("EOF", "", n))
    return toks


# ---------------------------------------------------------------------------
# SQL92: Java value model
#
# Runtime values mirror the Java objects RocketMQ's evaluator sees: None (null),
# bool (Boolean), str (String), int (Integer), _JLong (Long) and float (Double).
# ---------------------------------------------------------------------------


class _JLong(int):
    """An int that stands for a java.lang.Long (plain int stands for Integer)."""

    __slots__ = ()


class _EvalAbort(Exception):
    """A Java exception during evaluation; RocketMQ then treats the message as not matched."""


_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1

_DOUBLE_RE = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
)
_HEX_DOUBLE_RE = re.compile(
    r"([+-]?)(0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?"
)


def _parse_java_integral(s: str, lo: int, hi: int) -> int:
    """Integer.parseInt / Long.parseLong (radix 10): optional sign, Unicode decimal digits."""
    if not s:
        raise _EvalAbort
    sign = 1
    body = s
    if s[0] in "+-":
        if s[0] == "-":
            sign = -1
        body = s[1:]
    if not body or not body.isdecimal():
        raise _EvalAbort
    if not body.isascii():
        body = "".join(str(unicodedata.decimal(c)) for c in body)
    body = body.lstrip("0") or "0"
    if len(body) > 20:
        raise _EvalAbort
    v = sign * int(body)
    if v < lo or v > hi:
        raise _EvalAbort
    return v


def _jint(s: str) -> int:
    return _parse_java_integral(s, _INT_MIN, _INT_MAX)


def _jlong(s: str) -> int:
    return _parse_java_integral(s, _LONG_MIN, _LONG_MAX)


def _jdouble(s: str) -> float:
    """Double.valueOf: Java-trimmed, decimal or hex form, NaN/Infinity, optional f/d suffix."""
    t = _java_trim(s)
    if _DOUBLE_RE.fullmatch(t):
        if t[-1] in "fFdD":
            t = t[:-1]
        return float(t)
    m = _HEX_DOUBLE_RE.fullmatch(t)
    if m:
        try:
            v = float.fromhex(m.group(2))
        except OverflowError:
            v = float("inf")
        return -v if m.group(1) == "-" else v
    raise _EvalAbort


def _jbool(s: str) -> bool:
    """Boolean.valueOf(String): "true" ignoring case."""
    return len(s) == 4 and s.lower() == "true"


def _dkey(x: float) -> float:
    return 2.0 if x != x else copysign(1.0, x)


def _dcmp(a: float, b: float) -> int:
    """Double.compare: NaN above everything, -0.0 below 0.0."""
    if a < b:
        return -1
    if a > b:
        return 1
    if a == b and a != 0.0:
        return 0
    ka, kb = _dkey(a), _dkey(b)
    return (ka > kb) - (ka < kb)


def _icmp(a: int, b: int) -> int:
    return (a > b) - (a < b)


def _jcompare(lv: Any, rv: Any) -> int:
    """ComparisonExpression.__compare with string conversion on (as SelectorParser sets)."""
    lt, rt = type(lv), type(rv)
    if lt is rt:
        if lt is float:
            return _dcmp(lv, rv)
        return (lv > rv) - (lv < rv)
    if lt is bool:
        if rt is str:
            raise _EvalAbort  # Java casts the Boolean to String: ClassCastException
        return -1
    if lt is int:
        if rt is _JLong:
            return _icmp(lv, rv)
        if rt is float:
            return _dcmp(float(lv), rv)
        if rt is str:
            return _icmp(lv, _jint(rv))
        return -1
    if lt is _JLong:
        if rt is int:
            return _icmp(lv, rv)
        if rt is float:
            return _dcmp(float(lv), rv)
        if rt is str:
            return _icmp(lv, _jlong(rv))
        return -1
    if lt is float:
        if rt is int or rt is _JLong:
            return _dcmp(lv, float(rv))
        if rt is str:
            return _dcmp(lv, _jdouble(rv))
        return -1
    if lt is str:
        if rt is bool:
            return _icmp(_jbool(lv), rv)
        if rt is int:
            return _icmp(_jint(lv), rv)
        if rt is _JLong:
            return _icmp(_jlong(lv), rv)
        if rt is float:
            return _dcmp(_jdouble(lv), rv)
        return -1
    return -1


def _negate(v: Any) -> Any:
    """UnaryExpression.createNegate: numbers are negated (with Java overflow), others -> null."""
    t = type(v)
    if t is int:
        return v if v == _INT_MIN else -v
    if t is _JLong:
        return v if v == _LONG_MIN else _JLong(-v)
    if t is float:
        return -v
    return None


def _java_repr(v: Any) -> str:
    if v is None:
        return "NULL"
    if type(v) is bool:
        return "TRUE" if v else "FALSE"
    if type(v) is str:
        return "'" + v.replace("'", "''") + "'"
    return repr(v) if type(v) is float else str(int(v))


# ---------------------------------------------------------------------------
# SQL92: parser (produces a small tuple tree; every node ends with its depth)
#
#   ("const", value, depth)            ("prop", name, depth)
#   ("neg", child, depth)              ("not", child, depth)        ("cast", child, depth)
#   ("and"/"or", [children], depth)    ("eq", left, right, depth)
#   ("cmp", op, left, right, depth)    ("in", name, values, negated, depth)
# ---------------------------------------------------------------------------

_BOOLEAN_KINDS = frozenset({"not", "cast", "and", "or", "eq", "cmp", "in"})
_NULL = ("const", None, 1)


def _is_boolean(node: tuple) -> bool:
    """Java: node instanceof BooleanExpression (boolean constants TRUE/FALSE/NULL included)."""
    kind = node[0]
    if kind == "const":
        return node[1] is None or type(node[1]) is bool
    return kind in _BOOLEAN_KINDS


class _Parser:
    def __init__(self, src: str) -> None:
        self.toks = _tokenize(src)
        self.i = 0
        self.nesting = 0

    # -- helpers -----------------------------------------------------------
    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> _Tok:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else self.toks[-1]

    def advance(self) -> _Tok:
        t = self.toks[self.i]
        if t.kind != "EOF":
            self.i += 1
        return t

    def expect(self, kind: str, what: str) -> _Tok:
        t = self.tok
        if t.kind != kind:
            raise _err(f"unexpected {_describe(t)}", t, what)
        return self.advance()

    def node(self, *parts: Any, children: tuple = (), at: _Tok) -> tuple:
        depth = 1 + max((c[-1] for c in children), default=0)
        if depth > MAX_TREE_DEPTH:
            raise _err(f"expression nested too deeply (tree deeper than {MAX_TREE_DEPTH})", at)
        return (*parts, depth)

    def enter(self, at: _Tok) -> None:
        self.nesting += 1
        if self.nesting > MAX_NESTING_DEPTH:
            raise _err(f"expression nested too deeply (more than {MAX_NESTING_DEPTH} levels)", at)

    def as_boolean(self, node: tuple, at: _Tok) -> tuple:
        if _is_boolean(node):
            return node
        if node[0] == "prop":
            return self.node("cast", node, children=(node,), at=at)
        raise _err(f"expression {self.show(node)} does not yield a boolean value", at)

    @staticmethod
    def show(node: tuple) -> str:
        kind = node[0]
        if kind == "const":
            return _java_repr(node[1])
        if kind == "prop":
            return node[1]
        if kind == "neg":
            return "-" + _Parser.show(node[1])
        return "(" + kind + " expression)"

    # -- checks from ComparisonExpression ------------------------------------
    def check_orderable(self, node: tuple, op: _Tok) -> None:
        """checkLessThanOperand: only numbers, properties and non-boolean expressions."""
        if node[0] == "const":
            if type(node[1]) in (int, _JLong, float):
                return
            raise _err(f"value {self.show(node)} cannot be compared with {op.text!r}", op)
        if _is_boolean(node):
            msg = f"a boolean expression cannot be compared with {op.text!r}"
            if node[0] == "not":
                msg += " (NOT binds tighter than comparisons: write NOT (x > y))"
            raise _err(msg, op)

    def make_cmp(self, op: str, left: tuple, right: tuple, at: _Tok) -> tuple:
        self.check_orderable(left, at)
        self.check_orderable(right, at)
        return self.node("cmp", op, left, right, children=(left, right), at=at)

    def make_eq(self, left: tuple, right: tuple, at: _Tok) -> tuple:
        for side in (left, right):
            if side[0] == "const" and side[1] is None:
                raise _err(f"NULL cannot be compared with {at.text!r} (use IS NULL)", at)
        if (left[0] == "const" and right[0] == "const" and type(left[1]) is bool
                and type(right[1]) is not bool):
            raise _err(f"{self.show(left)} cannot be compared with {self.show(right)}", at)
        return self.node("eq", left, right, children=(left, right), at=at)

    def make_logic(self, kind: str, items: list[tuple], at: _Tok) -> tuple:
        return self.node(kind, items, children=tuple(items), at=at)

    # -- grammar ---------------------------------------------------------------
    def parse(self) -> tuple:
        if self.tok.kind == "EOF":
            raise _err("empty expression", self.tok)
        start = self.tok
        node = self.or_expr()
        if self.tok.kind != "EOF":
            t = self.tok
            raise _err(f"unexpected {_describe(t)}", t, "AND, OR or end of expression")
        return self.as_boolean(node, start)

    def or_expr(self) -> tuple:
        first = self.tok
        left = self.and_expr()
        if self.tok.kind != "OR":
            return left
        items = [self.as_boolean(left, first)]
        op = self.tok
        while self.tok.kind == "OR":
            self.advance()
            at = self.tok
            items.append(self.as_boolean(self.and_expr(), at))
        return self.make_logic("or", items, op)

    def and_expr(self) -> tuple:
        first = self.tok
        left = self.equality_expr()
        if self.tok.kind != "AND":
            return left
        items = [self.as_boolean(left, first)]
        op = self.tok
        while self.tok.kind == "AND":
            self.advance()
            at = self.tok
            items.append(self.as_boolean(self.equality_expr(), at))
        return self.make_logic("and", items, op)

    def equality_expr(self) -> tuple:
        left = self.comparison_expr()
        while True:
            t = self.tok
            if t.kind == "=":
                self.advance()
                left = self.make_eq(left, self.comparison_expr(), t)
            elif t.kind == "<>":
                self.advance()
                eq = self.make_eq(left, self.comparison_expr(), t)
                left = self.node("not", eq, children=(eq,), at=t)
            elif t.kind == "IS":
                self.advance()
                if self.tok.kind == "NULL":
                    self.advance()
                    left = self.node("eq", left, _NULL, children=(left,), at=t)
                elif self.tok.kind == "NOT":
                    self.advance()
                    self.expect("NULL", "NULL")
                    eq = self.node("eq", left, _NULL, children=(left,), at=t)
                    left = self.node("not", eq, children=(eq,), at=t)
                else:
                    raise _err(f"unexpected {_describe(self.tok)}", self.tok, "NULL or NOT NULL")
            else:
                return left

    def comparison_expr(self) -> tuple:
        left = self.unary_expr()
        while True:
            t = self.tok
            k = t.kind
            if k in (">", ">=", "<", "<="):
                self.advance()
                left = self.make_cmp(k, left, self.unary_expr(), t)
            elif k == "BETWEEN" or (k == "NOT" and self.peek().kind == "BETWEEN"):
                negated = k == "NOT"
                self.advance()
                if negated:
                    self.advance()
                low = self.unary_expr()
                self.expect("AND", "AND in BETWEEN")
                high = self.unary_expr()
                left = self.make_between(left, low, high, negated, t)
            elif k == "IN" or (k == "NOT" and self.peek().kind == "IN"):
                negated = k == "NOT"
                self.advance()
                if negated:
                    self.advance()
                left = self.make_in(left, negated, t)
            else:
                return left

    def make_between(self, value: tuple, low: tuple, high: tuple, negated: bool, at: _Tok) -> tuple:
        if negated:
            # createNotBetween: value < low OR value > high (no ordering check)
            lt = self.make_cmp("<", value, low, at)
            gt = self.make_cmp(">", value, high, at)
            return self.make_logic("or", [lt, gt], at)
        if low[0] == "const" and high[0] == "const":
            lv, hv = low[1], high[1]
            if lv is None or hv is None:
                raise _err("BETWEEN bounds cannot be NULL", at)
            try:
                bad = _jcompare(hv, lv) < 0
            except _EvalAbort:
                bad = True
            if bad:
                raise _err(f"BETWEEN lower bound {self.show(low)} must be less than or equal to "
                           f"upper bound {self.show(high)}", at)
        ge = self.make_cmp(">=", value, low, at)
        le = self.make_cmp("<=", value, high, at)
        return self.make_logic("and", [ge, le], at)

    def make_in(self, left: tuple, negated: bool, at: _Tok) -> tuple:
        if left[0] != "prop":
            raise _err(f"IN needs a property on its left, got {self.show(left)}", at)
        self.expect("(", "'(' after IN")
        values = [self.expect("STR", "a string literal in the IN list").value]
        while self.tok.kind == ",":
            self.advance()
            values.append(self.expect("STR", "a string literal in the IN list").value)
        self.expect(")", "',' or ')' in the IN list")
        return self.node("in", left[1], frozenset(values), negated, children=(left,), at=at)

    def unary_expr(self) -> tuple:
        t = self.tok
        k = t.kind
        if k in ("+", "-", "NOT"):
            self.enter(t)
            self.advance()
            operand_tok = self.tok
            child = self.unary_expr()
            self.nesting -= 1
            if k == "+":
                return child
            if k == "-":
                return self.node("neg", child, children=(child,), at=t)
            child = self.as_boolean(child, operand_tok)
            return self.node("not", child, children=(child,), at=t)
        return self.primary_expr()

    def primary_expr(self) -> tuple:
        t = self.tok
        k = t.kind
        if k == "(":
            self.enter(t)
            self.advance()
            inner = self.or_expr()
            self.expect(")", "')'")
            self.nesting -= 1
            return inner
        if k == "ID":
            self.advance()
            return ("prop", t.value, 1)
        if k == "STR":
            self.advance()
            return ("const", t.value, 1)
        if k == "INT":
            self.advance()
            return ("const", self.int_literal(t), 1)
        if k == "FLOAT":
            self.advance()
            return ("const", self.float_literal(t), 1)
        if k == "TRUE" or k == "FALSE":
            self.advance()
            return ("const", k == "TRUE", 1)
        if k == "NULL":
            self.advance()
            return _NULL
        raise _err(f"unexpected {_describe(t)}", t, "an operand")

    @staticmethod
    def int_literal(t: _Tok) -> int:
        """ConstantExpression.createFromDecimal: Integer if it fits, else Long, else error."""
        digits = t.text.rstrip("lL")
        if len(digits) > 19 or int(digits) > _LONG_MAX:
            raise _err(f"integer literal {t.text!r} out of range", t)
        v = int(digits)
        return v if v <= _INT_MAX else _JLong(v)

    @staticmethod
    def float_literal(t: _Tok) -> float:
        """ConstantExpression.createFloat: rejects overflow and values below Double.MIN_VALUE."""
        v = float(t.text)
        if v == float("inf"):
            raise _err(f"floating literal {t.text!r} is greater than Double.MAX_VALUE", t)
        if v < 5e-324:  # includes 0.0, exactly as RocketMQ does
            raise _err(f"floating literal {t.text!r} is less than Double.MIN_VALUE (4.9E-324)", t)
        return v


# ---------------------------------------------------------------------------
# SQL92: compiler (tree -> closures taking the property getter)
# ---------------------------------------------------------------------------

_Getter = Callable[[str], Any]
_Fn = Callable[[_Getter], Any]

_ORDER_TESTS: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


def _compile(node: tuple) -> _Fn:
    kind = node[0]

    if kind == "const":
        value = node[1]
        return lambda get: value

    if kind == "prop":
        name = node[1]
        return lambda get: get(name)

    if kind == "neg":
        f = _compile(node[1])
        return lambda get: _negate(f(get))

    if kind == "cast":  # BooleanCast of a property: only a Boolean value is true
        f = _compile(node[1])

        def cast(get: _Getter) -> Any:
            v = f(get)
            if v is None:
                return None
            return v if type(v) is bool else False
        return cast

    if kind == "not":
        f = _compile(node[1])

        def not_(get: _Getter) -> Any:
            v = f(get)
            return None if v is None else not v
        return not_

    if kind == "and":
        fs = tuple(_compile(c) for c in node[1])

        def and_(get: _Getter) -> Any:
            unknown = False
            for f in fs:
                v = f(get)
                if v is False:
                    return False
                if v is None:
                    unknown = True
            return None if unknown else True
        return and_

    if kind == "or":
        fs = tuple(_compile(c) for c in node[1])

        def or_(get: _Getter) -> Any:
            unknown = False
            for f in fs:
                v = f(get)
                if v is True:
                    return True
                if v is None:
                    unknown = True
            return None if unknown else False
        return or_

    if kind == "in":
        name, values, negated = node[1], node[2], node[3]

        def in_(get: _Getter) -> Any:
            v = get(name)
            if v is None or type(v) is not str:
                return None
            return (v in values) is not negated
        return in_

    if kind == "eq":
        return _compile_eq(node[1], node[2])

    if kind == "cmp":
        return _compile_cmp(node[1], node[2], node[3])

    raise AssertionError(f"unknown node {kind!r}")  # pragma: no cover


def _compile_eq(left: tuple, right: tuple) -> _Fn:
    """doCreateEqual: null vs non-null -> null if the left is null, else false; both null -> true."""
    if right is _NULL:  # IS NULL
        fl = _compile(left)
        return lambda get: fl(get) is None

    if left[0] == "prop" and right[0] == "const" and type(right[1]) is str:
        name, const = left[1], right[1]

        def eq_prop_str(get: _Getter) -> Any:
            v = get(name)
            if v is None:
                return None
            if type(v) is str:
                return v == const
            return _jcompare(v, const) == 0
        return eq_prop_str

    fl, fr = _compile(left), _compile(right)

    def eq(get: _Getter) -> Any:
        lv = fl(get)
        rv = fr(get)
        if lv is None:
            return True if rv is None else None
        if rv is None:
            return False
        return _jcompare(lv, rv) == 0
    return eq


def _compile_cmp(op: str, left: tuple, right: tuple) -> _Fn:
    """Ordering comparison: null -> null; two strings compare as doubles; else __compare."""
    test = _ORDER_TESTS[op]

    if left[0] == "prop" and right[0] == "const":  # the common "prop > 10" shape
        name, const = left[1], right[1]
        ct = type(const)
        if ct is float:
            def cmp_prop_double(get: _Getter) -> Any:
                v = get(name)
                if v is None:
                    return None
                if type(v) is str:
                    return test(_dcmp(_jdouble(v), const))
                return test(_jcompare(v, const))
            return cmp_prop_double
        parse = _jint if ct is int else _jlong

        def cmp_prop_integral(get: _Getter) -> Any:
            v = get(name)
            if v is None:
                return None
            if type(v) is str:
                return test(_icmp(parse(v), const))
            return test(_jcompare(v, const))
        return cmp_prop_integral

    fl, fr = _compile(left), _compile(right)

    def cmp(get: _Getter) -> Any:
        lv = fl(get)
        if lv is None:
            return None
        rv = fr(get)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:
            return test(_dcmp(_jdouble(lv), _jdouble(rv)))
        return test(_jcompare(lv, rv))
    return cmp


def _collect_names(node: tuple, out: set[str]) -> None:
    kind = node[0]
    if kind == "prop" or kind == "in":
        out.add(node[1])
    elif kind in ("neg", "not", "cast"):
        _collect_names(node[1], out)
    elif kind in ("and", "or"):
        for c in node[1]:
            _collect_names(c, out)
    elif kind == "eq":
        _collect_names(node[1], out)
        _collect_names(node[2], out)
    elif kind == "cmp":
        _collect_names(node[2], out)
        _collect_names(node[3], out)


_EMPTY: dict[str, str] = {}


class SqlFilter:
    """A compiled SQL92 selector over message properties.

    ``matches`` is true only when the expression evaluates to TRUE: unknown (a NULL from a
    missing property) is not a match, and so is any evaluation error RocketMQ would hit
    (e.g. a property that does not parse as the number it is compared with), which aborts
    the whole expression rather than only the failing comparison.
    """

    __slots__ = ("expression", "names", "_fn")

    expression_type = EXPRESSION_TYPE_SQL92

    def __init__(self, expression: str, fn: _Fn, names: frozenset[str]) -> None:
        self.expression = expression
        self.names = names  # property names the expression reads
        self._fn = fn

    def matches(self, properties: Mapping[str, str] | None) -> bool:
        get = (properties if properties is not None else _EMPTY).get
        try:
            return self._fn(get) is True
        except _EvalAbort:
            return False
        except Exception:  # noqa: BLE001 - RocketMQ logs any Throwable and does not match
            return False

    def matches_code(self, tag_code: int | None) -> bool:
        """Always true: RocketMQ pre-filters SQL92 with a bloom filter kept in the
        consume-queue ext file; we keep no such bitmap, so the pre-filter is skipped and
        every message is evaluated by ``matches``/``matches_message``."""
        return True

    def matches_message(self, tags: str | None, properties: Mapping[str, str] | None) -> bool:
        """Evaluate against the message properties; the message's tags are visible as the
        ``TAGS`` property (RocketMQ keeps tags there) if the caller passed them separately."""
        if tags and "TAGS" in self.names and (properties is None or "TAGS" not in properties):
            properties = dict(properties or (), TAGS=tags)
        return self.matches(properties)

    def __repr__(self) -> str:
        return f"SqlFilter({self.expression!r})"


def compile_sql(expr: str) -> SqlFilter:
    """Parse and compile a SQL92 selector (cached per expression string); raises
    SqlParseError for invalid input."""
    if not isinstance(expr, str):
        raise SqlParseError(f"SQL92 expression must be a string, not {type(expr).__name__}")
    return _compile_sql_cached(expr)


@lru_cache(maxsize=256)
def _compile_sql_cached(expr: str) -> SqlFilter:
    if len(expr) > MAX_EXPRESSION_LENGTH:
        raise SqlParseError(
            f"expression too long: {len(expr)} characters (max {MAX_EXPRESSION_LENGTH})",
            MAX_EXPRESSION_LENGTH + 1,
        )
    tree = _Parser(expr).parse()
    names: set[str] = set()
    _collect_names(tree, names)
    return SqlFilter(expr, _compile(tree), frozenset(names))


def build_filter(expression_type: str | None, expression: str | None) -> TagFilter | SqlFilter:
    """Build the filter for a subscription: "TAG" (also None or "", as RocketMQ's
    ExpressionType.isTagType) or "SQL92"; both expose matches_code and matches_message."""
    if is_tag_type(expression_type):
        return TagFilter(expression)
    if expression_type == EXPRESSION_TYPE_SQL92:
        if expression is None:
            raise SqlParseError("SQL92 expression is missing", 1)
        return compile_sql(expression)
    raise ValueError(f"unknown expression type {expression_type!r} (expected 'TAG' or 'SQL92')")
