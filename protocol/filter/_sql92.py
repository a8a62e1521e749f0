"""RocketMQ 4.9's SQL92 message selector: tokenizer, recursive-descent parser, evaluator.

The grammar is the filter module's (a JMS selector subset), from loosest to tightest::

    selector   = or                                  (must give a boolean)
    or         = and { OR and }
    and        = equality { AND equality }
    equality   = comparison { ("=" | "<>") comparison | IS NULL | IS NOT NULL }
    comparison = unary { (">" | ">=" | "<" | "<=") unary | [NOT] BETWEEN unary AND unary
                       | [NOT] IN "(" string { "," string } ")" }
    unary      = "+" unary | "-" unary | NOT unary | primary
    primary    = literal | property | "(" or ")"

Keywords are case-insensitive; property names (``[A-Za-z_$][A-Za-z0-9_$]*``) are not. As in
RocketMQ, the parser stops after one complete expression and does not read on: text after it
is ignored unless the token right after it is malformed. Each parsed node is a closure over
the message's properties (a mapping of strings) that gives a Java value or None (unknown),
with RocketMQ's three-valued AND, OR and NOT; `_java` has the conversion rules.

A refused expression raises `FilterParseError`, whose ``remark`` is the text a RocketMQ broker
answers (the Java exception's class and message: JavaCC's "Encountered ... at line 1, column
N." for a syntax error, "Lexical error ..." for a character no token starts with, and the
checks' own messages, such as "Value ''x'' cannot be compared.").
"""

from __future__ import annotations

import decimal
import enum
import math
from collections.abc import Callable, Mapping
from typing import NoReturn

import attrs

from protocol.filter._java import (
    LONG_MAX,
    LONG_MIN,
    EvaluationError,
    JavaLong,
    compare,
    is_number,
    parse_double,
)

__all__ = ["Evaluator", "FilterParseError", "parse"]

#: A compiled expression: the message's properties -> a Java value (None = unknown).
Evaluator = Callable[[Mapping[str, str]], object]

PARSE_EXCEPTION = "org.apache.rocketmq.filter.parser.ParseException"
TOKEN_ERROR = "org.apache.rocketmq.filter.parser.TokenMgrError"
RUNTIME_EXCEPTION = "java.lang.RuntimeException"
NUMBER_FORMAT_EXCEPTION = "java.lang.NumberFormatException"
_TAB_SIZE = 8  # JavaCC counts a tab to the next multiple of 8 in error columns
#: Deepest expression BoltMQ takes (RocketMQ's limit is the JVM's stack); far beyond any
#: selector written by hand.
MAX_DEPTH = 200


class FilterParseError(ValueError):
    """An expression RocketMQ's parser refuses; ``remark`` is the broker's answer text."""

    def __init__(self, java_class: str, message: str) -> None:
        super().__init__(message)
        self.java_class = java_class
        self.message = message

    @property
    def remark(self) -> str:
        """``<Java exception class>: <message>``, as RocketMQ's CHECK_CLIENT_CONFIG answers."""
        return f"{self.java_class}: {self.message}" if self.message else self.java_class


class _SyntaxError(FilterParseError):
    """The tokens do not follow the grammar (JavaCC's ParseException from its own checks)."""

    def __init__(self, message: str) -> None:
        super().__init__(PARSE_EXCEPTION, message)


class Kind(enum.IntEnum):
    """Token kinds, numbered as RocketMQ's generated parser numbers them."""

    EOF = 0
    NOT = 8
    AND = 9
    OR = 10
    BETWEEN = 11
    IN = 12
    TRUE = 13
    FALSE = 14
    NULL = 15
    IS = 16
    DECIMAL = 17
    FLOAT = 18
    STRING = 20
    ID = 21
    EQ = 22
    NE = 23
    GT = 24
    GE = 25
    LT = 26
    LE = 27
    LPAREN = 28
    COMMA = 29
    RPAREN = 30
    PLUS = 31
    MINUS = 32


_IMAGES: dict[Kind, str] = {
    Kind.EOF: "<EOF>", Kind.DECIMAL: "<DECIMAL_LITERAL>", Kind.FLOAT: "<FLOATING_POINT_LITERAL>",
    Kind.STRING: "<STRING_LITERAL>", Kind.ID: "<ID>", Kind.EQ: '"="', Kind.NE: '"<>"',
    Kind.GT: '">"', Kind.GE: '">="', Kind.LT: '"<"', Kind.LE: '"<="', Kind.LPAREN: '"("',
    Kind.COMMA: '","', Kind.RPAREN: '")"', Kind.PLUS: '"+"', Kind.MINUS: '"-"',
}  # fmt: skip
_KEYWORDS = {
    name: Kind[name]
    for name in ("NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS")
}
for _keyword, _kind in _KEYWORDS.items():
    _IMAGES[_kind] = f'"{_keyword}"'
_PUNCTUATION = {
    "<>": Kind.NE, "<=": Kind.LE, ">=": Kind.GE, "=": Kind.EQ, ">": Kind.GT, "<": Kind.LT,
    "(": Kind.LPAREN, ",": Kind.COMMA, ")": Kind.RPAREN, "+": Kind.PLUS, "-": Kind.MINUS,
}  # fmt: skip
_OPERAND_STARTS = (
    Kind.NOT, Kind.TRUE, Kind.FALSE, Kind.NULL, Kind.DECIMAL, Kind.FLOAT, Kind.STRING, Kind.ID,
    Kind.LPAREN, Kind.PLUS, Kind.MINUS,
)  # fmt: skip
_ID_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_$")
_ID_PART = _ID_START | frozenset("0123456789")
_DIGITS = frozenset("0123456789")
_WHITESPACE = frozenset(" \t\n\r\f")


@attrs.frozen
class Token:
    """One token: its kind, its text and where it starts (index into the expression)."""

    kind: Kind
    image: str
    start: int


def parse(expression: str) -> Evaluator:
    """Parse a SQL92 selector into its evaluator; `FilterParseError` when RocketMQ refuses it
    (or when it nests deeper than `MAX_DEPTH`)."""
    if not expression:
        # RocketMQ's token manager fails on an empty input before it makes any token.
        raise FilterParseError("java.lang.ArrayIndexOutOfBoundsException", "-1")
    try:
        return _Parser(expression).selector()
    except RecursionError:
        # Parentheses nest the parser's own calls; RocketMQ's parser fails the same way.
        raise FilterParseError("java.lang.StackOverflowError", "") from None


# -- nodes -----------------------------------------------------------------------------------


class _Shape(enum.Enum):
    # What the parse-time checks need to know of an operand (RocketMQ's expression classes).
    CONSTANT = "constant"  # a number or string literal
    BOOLEAN_CONSTANT = "boolean constant"  # TRUE, FALSE, NULL
    PROPERTY = "property"
    BOOLEAN = "boolean"  # a comparison, AND, OR, NOT, IN
    VALUE = "value"  # a negation


@attrs.frozen
class _Node:
    evaluate: Evaluator
    shape: _Shape
    text: str  # the expression as RocketMQ prints it in its messages
    value: object = None  # a constant's value
    depth: int = 1  # nodes on the longest path down: evaluation recurses this deep

    @property
    def is_boolean(self) -> bool:
        return self.shape in (_Shape.BOOLEAN, _Shape.BOOLEAN_CONSTANT)

    @property
    def is_constant(self) -> bool:
        return self.shape in (_Shape.CONSTANT, _Shape.BOOLEAN_CONSTANT)


def _depth(*children: _Node) -> int:
    depth = 1 + max(child.depth for child in children)
    if depth > MAX_DEPTH:
        # Evaluation recurses once per level; refuse rather than run out of stack per message.
        raise FilterParseError(
            RUNTIME_EXCEPTION, f"Expression nests deeper than {MAX_DEPTH} levels"
        )
    return depth


def _constant(value: object, shape: _Shape = _Shape.CONSTANT) -> _Node:
    return _Node(lambda properties: value, shape, _java_text(value, quoted=True), value)


def _property(name: str) -> _Node:
    def evaluate(properties: Mapping[str, str]) -> object:
        return properties.get(name)

    return _Node(evaluate, _Shape.PROPERTY, name)


def _negate(operand: _Node) -> _Node:
    inner = operand.evaluate

    def evaluate(properties: Mapping[str, str]) -> object:
        value = inner(properties)
        if value is None or not is_number(value):
            return None  # a string or a boolean has no negation: unknown
        return -value  # type: ignore[operator]

    return _Node(evaluate, _Shape.VALUE, f"(- {operand.text})", depth=_depth(operand))


def _not(operand: _Node) -> _Node:
    inner = operand.evaluate

    def evaluate(properties: Mapping[str, str]) -> object:
        value = inner(properties)
        return None if value is None else not value

    return _Node(evaluate, _Shape.BOOLEAN, f"(NOT {operand.text})", depth=_depth(operand))


def _boolean_cast(operand: _Node) -> _Node:
    # A property standing alone as a condition: only a Boolean value is true, and a property
    # is always a string, so it is never true (RocketMQ's rule).
    inner = operand.evaluate

    def evaluate(properties: Mapping[str, str]) -> object:
        value = inner(properties)
        if value is None:
            return None
        return value if isinstance(value, bool) else False

    return _Node(evaluate, _Shape.BOOLEAN, operand.text, depth=_depth(operand))


def _and(left: _Node, right: _Node) -> _Node:
    first, second = left.evaluate, right.evaluate

    def evaluate(properties: Mapping[str, str]) -> object:
        lv = first(properties)
        if lv is False:
            return False
        rv = second(properties)
        if rv is False:
            return False
        return None if lv is None or rv is None else True

    return _Node(
        evaluate, _Shape.BOOLEAN, f"({left.text} && {right.text})", depth=_depth(left, right)
    )


def _or(left: _Node, right: _Node) -> _Node:
    first, second = left.evaluate, right.evaluate

    def evaluate(properties: Mapping[str, str]) -> object:
        lv = first(properties)
        if lv is True:
            return True
        rv = second(properties)
        if rv is True:
            return True
        return None if lv is None or rv is None else False

    return _Node(
        evaluate, _Shape.BOOLEAN, f"({left.text} || {right.text})", depth=_depth(left, right)
    )


def _equal(left: _Node, right: _Node) -> _Node:
    first, second = left.evaluate, right.evaluate

    def evaluate(properties: Mapping[str, str]) -> object:
        lv = first(properties)
        rv = second(properties)
        if lv is None or rv is None:
            if lv is None and rv is None:
                return True
            return None if lv is None else False
        return compare(lv, rv) == 0

    return _Node(
        evaluate, _Shape.BOOLEAN, f"({left.text} == {right.text})", depth=_depth(left, right)
    )


_RELATIONS: dict[str, Callable[[int], bool]] = {
    ">": lambda answer: answer > 0,
    ">=": lambda answer: answer >= 0,
    "<": lambda answer: answer < 0,
    "<=": lambda answer: answer <= 0,
}


def _relation(symbol: str, left: _Node, right: _Node) -> _Node:
    for operand in (left, right):
        # Only numbers (or what may hold one) can be ordered.
        if (operand.is_constant and not is_number(operand.value)) or operand.is_boolean:
            raise FilterParseError(RUNTIME_EXCEPTION, f"Value '{operand.text}' cannot be compared.")
    first, second = left.evaluate, right.evaluate
    holds = _RELATIONS[symbol]

    def evaluate(properties: Mapping[str, str]) -> object:
        lv = first(properties)
        if lv is None:
            return None
        rv = second(properties)
        if rv is None:
            return None
        if isinstance(lv, str) and isinstance(rv, str):
            # Two strings are ordered only as numbers.
            return holds(compare(parse_double(lv), parse_double(rv)))
        return holds(compare(lv, rv))

    text = f"({left.text} {symbol} {right.text})"
    return _Node(evaluate, _Shape.BOOLEAN, text, depth=_depth(left, right))


def _in(left: _Node, items: list[str], negated: bool) -> _Node:
    if left.shape is not _Shape.PROPERTY:
        raise FilterParseError(
            RUNTIME_EXCEPTION, f"Expected a property for In expression, got: {left.text}"
        )
    members = frozenset(items)
    inner = left.evaluate

    def evaluate(properties: Mapping[str, str]) -> object:
        value = inner(properties)
        if not isinstance(value, str):
            return None
        return (value in members) != negated

    symbol = "NOT IN" if negated else "IN"
    text = f"{left.text} {symbol} ( {', '.join(items)} )"
    return _Node(evaluate, _Shape.BOOLEAN, text, depth=_depth(left))


def _is_null(left: _Node) -> _Node:
    inner = left.evaluate

    def evaluate(properties: Mapping[str, str]) -> object:
        return inner(properties) is None

    return _Node(evaluate, _Shape.BOOLEAN, f"({left.text} == NULL)", depth=_depth(left))


def _equality(left: _Node, right: _Node) -> _Node:
    for operand in (left, right):
        if operand.is_constant and operand.value is None:
            raise FilterParseError(RUNTIME_EXCEPTION, f"'{operand.text}' cannot be compared.")
    if (
        left.is_constant
        and right.is_constant
        and left.shape is _Shape.BOOLEAN_CONSTANT
        and right.shape is not _Shape.BOOLEAN_CONSTANT
    ):
        raise FilterParseError(
            RUNTIME_EXCEPTION, f"'{left.text}' cannot be compared with '{right.text}'"
        )
    return _equal(left, right)


def _between(value: _Node, low: _Node, high: _Node) -> _Node:
    if low.is_constant and high.is_constant:
        if low.value is None or high.value is None:
            raise FilterParseError(
                RUNTIME_EXCEPTION, "Illegal values of between, values can not be null!"
            )
        try:
            order = compare(high.value, low.value)
        except EvaluationError as error:
            text = str(error)
            if text.startswith(NUMBER_FORMAT_EXCEPTION):
                raise FilterParseError(RUNTIME_EXCEPTION, text) from None
            java_class, _, message = text.partition(": ")
            raise FilterParseError(java_class, message) from None
        if order < 0:
            raise FilterParseError(
                RUNTIME_EXCEPTION,
                f"Illegal values of between, left value({_java_text(low.value)}) must less than "
                f"or equal to right value({_java_text(high.value)})",
            )
    return _and(_relation(">=", value, low), _relation("<=", value, high))


def _not_between(value: _Node, low: _Node, high: _Node) -> _Node:
    return _or(_relation("<", value, low), _relation(">", value, high))


def _java_text(value: object, *, quoted: bool = False) -> str:
    """``value`` as Java's toString prints it (a constant in an expression: quoted strings)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'" if quoted else value
    if isinstance(value, float):
        return _java_double_text(value)
    return str(int(value))  # type: ignore[call-overload]


def _java_double_text(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    magnitude = abs(value)
    if 1e-3 <= magnitude < 1e7:
        text = repr(value)
        return text if "." in text else text + ".0"
    _sign, digits, exponent = decimal.Decimal(repr(magnitude)).normalize().as_tuple()
    assert isinstance(exponent, int)
    shown = "".join(map(str, digits))
    power = exponent + len(shown) - 1
    mantissa = shown[0] + "." + (shown[1:] or "0")
    return ("-" if value < 0 else "") + f"{mantissa}E{power}"


_TRUE = _constant(True, _Shape.BOOLEAN_CONSTANT)
_FALSE = _constant(False, _Shape.BOOLEAN_CONSTANT)
_NULL = _constant(None, _Shape.BOOLEAN_CONSTANT)


# -- tokens ----------------------------------------------------------------------------------


class _Tokens:
    """Tokens read as the parser asks for them, as JavaCC's token manager reads them."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._pos = 0
        self._tokens: list[Token] = []
        self.index = 0  # the next token the parser has not consumed

    def peek(self, ahead: int = 0) -> Token:
        while len(self._tokens) <= self.index + ahead:
            self._tokens.append(self._scan())
        return self._tokens[self.index + ahead]

    def take(self) -> Token:
        token = self.peek()
        self.index += 1
        return token

    def position(self, index: int) -> tuple[int, int]:
        """JavaCC's (line, column) of the character at ``index``."""
        line, column = 1, 0
        after_cr = after_lf = False
        for ch in self.text[: index + 1]:
            column += 1
            if after_lf:
                after_lf = False
                line, column = line + 1, 1
            elif after_cr:
                after_cr = False
                if ch == "\n":
                    after_lf = True
                else:
                    line, column = line + 1, 1
            if ch == "\r":
                after_cr = True
            elif ch == "\n":
                after_lf = True
            elif ch == "\t":
                column -= 1
                column += _TAB_SIZE - (column % _TAB_SIZE)
        return line, column

    def _scan(self) -> Token:
        text, end = self.text, len(self.text)
        pos = self._skip(self._pos)
        if pos >= end:
            self._pos = end
            return Token(Kind.EOF, "", max(end - 1, 0))
        ch = text[pos]
        if ch in _ID_START:
            stop = pos + 1
            while stop < end and text[stop] in _ID_PART:
                stop += 1
            image = text[pos:stop]
            kind = _KEYWORDS.get(image.upper(), Kind.ID)
        elif ch in _DIGITS or (ch == "." and pos + 1 < end and text[pos + 1] in _DIGITS):
            kind, stop = self._number(pos)
        elif ch == "'":
            stop = pos + 1
            while True:
                if stop >= end:
                    self._lexical_error(end - 1, None, text[pos:end])
                if text[stop] == "'":
                    if stop + 1 < end and text[stop + 1] == "'":
                        stop += 2
                        continue
                    stop += 1
                    break
                stop += 1
            kind = Kind.STRING
        elif text[pos : pos + 2] in _PUNCTUATION:
            stop = pos + 2
            kind = _PUNCTUATION[text[pos:stop]]
        elif ch in _PUNCTUATION:
            stop = pos + 1
            kind = _PUNCTUATION[ch]
        elif ch == "/" and pos + 1 < end and text[pos + 1] == "*":
            self._lexical_error(end - 1, None, text[pos:end])  # an unclosed comment
        elif ch == "/":
            after = text[pos + 1] if pos + 1 < end else None
            self._lexical_error(min(pos + 1, end - 1), after, "/")
        else:
            self._lexical_error(pos, ch, "")
        self._pos = stop
        return Token(kind, text[pos:stop], pos)

    def _skip(self, pos: int) -> int:
        """Past white space and comments (``-- ...`` up to a line end, ``/* ... */``)."""
        text, end = self.text, len(self.text)
        while pos < end:
            if text[pos] in _WHITESPACE:
                pos += 1
            elif text.startswith("--", pos):
                stops = [i for i in (text.find("\n", pos), text.find("\r", pos)) if i >= 0]
                if not stops:
                    return pos  # no line end: not a comment, so "-" "-"
                pos = min(stops) + 1
            elif text.startswith("/*", pos):
                close = text.find("*/", pos + 2)
                if close < 0:
                    return pos
                pos = close + 2
            else:
                return pos
        return pos

    def _number(self, pos: int) -> tuple[Kind, int]:
        text, end = self.text, len(self.text)
        stop = pos
        while stop < end and text[stop] in _DIGITS:
            stop += 1
        digits_end = stop
        is_float = False
        if stop < end and text[stop] == ".":
            stop += 1
            while stop < end and text[stop] in _DIGITS:
                stop += 1
            is_float = True
        exponent = self._exponent(stop)
        if exponent > stop:
            return Kind.FLOAT, exponent
        if is_float:
            return Kind.FLOAT, stop
        # A decimal literal: "0", or digits not starting with 0, with an optional L suffix.
        if text[pos] == "0":
            return Kind.DECIMAL, pos + 1
        if digits_end < end and text[digits_end] in "lL":
            return Kind.DECIMAL, digits_end + 1
        return Kind.DECIMAL, digits_end

    def _exponent(self, pos: int) -> int:
        text, end = self.text, len(self.text)
        if pos >= end or text[pos] not in "eE":
            return pos
        stop = pos + 1
        if stop < end and text[stop] in "+-":
            stop += 1
        digits = stop
        while stop < end and text[stop] in _DIGITS:
            stop += 1
        return stop if stop > digits else pos

    def _lexical_error(self, index: int, found: str | None, after: str) -> NoReturn:
        line, column = self.position(index)
        if found is None:
            encountered = "<EOF> "
        else:
            unit = ord(found) if ord(found) <= 0xFFFF else 0xD800 + ((ord(found) - 0x10000) >> 10)
            encountered = f'"{_escape(chr(unit))}" ({unit}), '
        raise FilterParseError(
            TOKEN_ERROR,
            f"Lexical error at line {line}, column {column}.  Encountered: {encountered}"
            f'after : "{_escape(after)}"',
        )


def _escape(text: str) -> str:
    # JavaCC's addEscapes: control and non-ASCII characters as \uXXXX per UTF-16 unit.
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            units = ch.encode("utf-16-be", "surrogatepass")
            out.extend(f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2))
    return "".join(out)


_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r",
            '"': '\\"', "'": "\\'", "\\": "\\\\"}  # fmt: skip


# -- parser ----------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _Tokens(text)
        # Token kinds the loops passed over since the last token was consumed: JavaCC lists
        # them among the expected ones when the next step fails.
        self._passed: set[Kind] = set()

    def selector(self) -> Evaluator:
        return self._as_boolean(self._or()).evaluate

    # Each level mirrors one rule of the grammar in the module docstring.

    def _or(self) -> _Node:
        left = self._and()
        while self._at(Kind.OR):
            self._take()
            left = _or(self._as_boolean(left), self._as_boolean(self._and()))
        return left

    def _and(self) -> _Node:
        left = self._equality()
        while self._at(Kind.AND):
            self._take()
            left = _and(self._as_boolean(left), self._as_boolean(self._equality()))
        return left

    def _equality(self) -> _Node:
        left = self._comparison()
        while self._at(Kind.EQ, Kind.NE, Kind.IS):
            kind = self._take().kind
            if kind is Kind.EQ:
                left = _equality(left, self._comparison())
            elif kind is Kind.NE:
                left = _not(_equality(left, self._comparison()))
            elif self.tokens.peek().kind is Kind.NULL:
                self._take()
                left = _is_null(left)
            else:
                token = self.tokens.peek()
                if token.kind is not Kind.NOT:
                    # JavaCC names both ways on: IS NOT NULL and (its look-ahead) IS NULL.
                    self._fail(token, (Kind.NOT, Kind.NULL))
                self._take()
                self._expect(Kind.NULL)
                left = _not(_is_null(left))
        return left

    def _comparison(self) -> _Node:
        left = self._unary()
        relations = {Kind.GT: ">", Kind.GE: ">=", Kind.LT: "<", Kind.LE: "<="}
        while self._at(Kind.GT, Kind.GE, Kind.LT, Kind.LE, Kind.BETWEEN, Kind.IN, Kind.NOT):
            token = self.tokens.peek()
            if token.kind in relations:
                self._take()
                left = _relation(relations[token.kind], left, self._unary())
                continue
            negated = token.kind is Kind.NOT
            if negated:
                following = self.tokens.peek(1).kind
                if following not in (Kind.BETWEEN, Kind.IN):
                    self._fail(token, (Kind.BETWEEN, Kind.IN))
                self._take()
            if self._take().kind is Kind.BETWEEN:
                low = self._unary()
                self._expect(Kind.AND)
                high = self._unary()
                left = _not_between(left, low, high) if negated else _between(left, low, high)
            else:
                self._expect(Kind.LPAREN)
                items = [self._string()]
                while self._at(Kind.COMMA):
                    self._take()
                    items.append(self._string())
                self._expect(Kind.RPAREN)
                left = _in(left, items, negated)
        return left

    def _unary(self) -> _Node:
        token = self.tokens.peek()
        if token.kind is Kind.PLUS:
            self._take()
            mark = self.tokens.index
            try:
                return self._unary()
            except _SyntaxError:
                # RocketMQ looks ahead for a whole operand before taking "+"; without one
                # it reports the "+" itself.
                self.tokens.index = mark - 1
                self._fail(token, _OPERAND_STARTS)
        if token.kind is Kind.MINUS:
            self._take()
            return _negate(self._unary())
        if token.kind is Kind.NOT:
            self._take()
            return _not(self._as_boolean(self._unary()))
        return self._primary()

    def _primary(self) -> _Node:
        token = self.tokens.peek()
        kind = token.kind
        if kind is Kind.STRING:
            return _constant(self._string())
        if kind is Kind.DECIMAL:
            self._take()
            return _constant(_decimal(token.image))
        if kind is Kind.FLOAT:
            self._take()
            return _constant(_float(token.image))
        if kind in (Kind.TRUE, Kind.FALSE, Kind.NULL):
            self._take()
            return {Kind.TRUE: _TRUE, Kind.FALSE: _FALSE, Kind.NULL: _NULL}[kind]
        if kind is Kind.ID:
            self._take()
            return _property(token.image)
        if kind is Kind.LPAREN:
            self._take()
            inner = self._or()
            self._expect(Kind.RPAREN)
            return inner
        self._fail(token, _OPERAND_STARTS)

    def _string(self) -> str:
        token = self._expect(Kind.STRING)
        return token.image[1:-1].replace("''", "'")

    def _as_boolean(self, node: _Node) -> _Node:
        if node.is_boolean:
            return node
        if node.shape is _Shape.PROPERTY:
            return _boolean_cast(node)
        raise FilterParseError(
            PARSE_EXCEPTION, f"Expression will not result in a boolean value: {node.text}"
        )

    # -- token helpers ---------------------------------------------------------------------

    def _at(self, *kinds: Kind) -> bool:
        if self.tokens.peek().kind in kinds:
            return True
        self._passed.update(kinds)
        return False

    def _take(self) -> Token:
        self._passed.clear()
        return self.tokens.take()

    def _expect(self, kind: Kind) -> Token:
        token = self.tokens.peek()
        if token.kind is not kind:
            self._fail(token, (kind,))
        return self._take()

    def _fail(self, token: Token, expected: tuple[Kind, ...]) -> NoReturn:
        # "+" is only ever expected through RocketMQ's look-ahead, which JavaCC lists last.
        kinds = sorted(set(expected) | self._passed, key=lambda kind: (kind is Kind.PLUS, kind))
        if token.kind is Kind.EOF:
            encountered = _IMAGES[Kind.EOF]
        else:
            encountered = f' {_IMAGES[token.kind]} "{_escape(token.image)} "'
        line, column = self.tokens.position(token.start) if self.tokens.text else (1, 0)
        heading = "Was expecting:" if len(kinds) == 1 else "Was expecting one of:"
        listed = "".join(f"{_IMAGES[kind]} ...\n    " for kind in kinds)
        raise _SyntaxError(
            f'Encountered "{encountered}" at line {line}, column {column}.\n{heading}\n    {listed}'
        )


def _decimal(image: str) -> int:
    digits = image[:-1] if image[-1] in "lL" else image
    # (More than 19 digits cannot be a long; int() of a huge string would refuse anyway.)
    value = int(digits) if len(digits) <= 19 else LONG_MAX + 1
    if value > LONG_MAX or value < LONG_MIN:
        raise FilterParseError(NUMBER_FORMAT_EXCEPTION, f'For input string: "{digits}"')
    # Java keeps a literal that fits an int as an Integer, else as a Long.
    return value if -(1 << 31) <= value < (1 << 31) else JavaLong(value)


def _float(image: str) -> float:
    value = float(image)
    if math.isinf(value):
        raise FilterParseError(RUNTIME_EXCEPTION, f"{image} is greater than 1.7976931348623157E308")
    if value == 0:
        # RocketMQ refuses a float literal below the smallest positive double, zero included.
        raise FilterParseError(RUNTIME_EXCEPTION, f"{image} is less than 4.9E-324")
    return value
