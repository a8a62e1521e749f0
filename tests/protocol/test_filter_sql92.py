"""The SQL92 selector against RocketMQ 4.9's filter semantics, as tables.

Each case is (expression, message properties, expected): True when the message matches, False
when it does not (false, unknown or an evaluation error), in the spirit of RocketMQ's filter
module tests. Parse errors are checked against the remark a RocketMQ broker answers.
"""

from __future__ import annotations

import hypothesis
import pytest
from hypothesis import strategies as st

from protocol.filter import (
    EvaluationError,
    FilterParseError,
    Sql92Filter,
    compile_sql92,
    is_tag_type,
)

MATCHES: list[tuple[str, dict[str, str], bool]] = [
    # comparison operators, a property read as the literal's type
    ("a = 3", {"a": "3"}, True),
    ("a = 3", {"a": "4"}, False),
    ("a <> 3", {"a": "4"}, True),
    ("a <> 3", {"a": "3"}, False),
    ("a > 5", {"a": "6"}, True),
    ("a > 5", {"a": "5"}, False),
    ("a >= 5", {"a": "5"}, True),
    ("a < 5", {"a": "-6"}, True),
    ("a <= 5", {"a": "5"}, True),
    ("a <= 5", {"a": "6"}, False),
    ("a = 'abc'", {"a": "abc"}, True),
    ("a = 'abc'", {"a": "abd"}, False),
    ("a <> 'abc'", {"a": "abd"}, True),
    ("a = 'it''s'", {"a": "it's"}, True),
    ("a = ''", {"a": ""}, True),
    # Integer literals read the property as a Java int: no fraction, no overflow, no spaces
    ("a > 5", {"a": "7.5"}, False),
    ("a > 5", {"a": "3000000000"}, False),
    ("a > 5", {"a": " 7"}, False),
    ("a > 5", {"a": "+7"}, True),
    ("a > 5", {"a": "abc"}, False),
    # Long literals read it as a long
    ("a > 5000000000", {"a": "6000000000"}, True),
    ("a > 2147483648", {"a": "2147483649"}, True),
    ("a = 10L", {"a": "10"}, True),
    # Double literals read it as a double: fractions, exponents, spaces, suffixes
    ("a > 5.5", {"a": "7"}, True),
    ("a > 5.5", {"a": "5.4"}, False),
    ("a > 5.5", {"a": " 6.5 "}, True),
    ("a > 5.5", {"a": "1e3"}, True),
    ("a > 5.5", {"a": "6.5f"}, True),
    ("a > 5.5", {"a": "NaN"}, True),  # Java orders NaN above every number
    ("a < 1E2", {"a": "99"}, True),
    ("a = .5", {"a": "0.5"}, True),
    ("a > -5.5", {"a": "-5"}, True),
    # negation
    ("a > -5", {"a": "-4"}, True),
    ("a > - -5", {"a": "4"}, False),
    ("a < +5", {"a": "4"}, True),
    ("-a = 5", {"a": "-5"}, False),  # a string has no negation: unknown
    # two properties: ordered as doubles, equal as strings
    ("a > b", {"a": "10", "b": "9"}, True),
    ("a > b", {"a": "x", "b": "9"}, False),
    ("a = b", {"a": "x", "b": "x"}, True),
    ("a = b", {"a": "1", "b": "1.0"}, False),
    # booleans
    ("TRUE", {}, True),
    ("FALSE", {}, False),
    ("a = TRUE", {"a": "True"}, True),  # the property read as Java's Boolean.valueOf
    ("a = TRUE", {"a": "yes"}, False),
    ("a = FALSE", {"a": "yes"}, True),
    ("TRUE = a", {"a": "TRUE"}, False),  # a Boolean against a String: an evaluation error
    ("(a > 1) = TRUE", {"a": "2"}, True),
    ("(a > 1) = FALSE", {"a": "2"}, False),
    ("5 = TRUE", {}, False),
    ("a", {"a": "true"}, False),  # a property alone is never true: it is a string
    ("NOT a", {"a": "true"}, True),
    # AND, OR, NOT and their nulls
    ("a > 1 AND b > 1", {"a": "2", "b": "2"}, True),
    ("a > 1 AND b > 1", {"a": "2", "b": "0"}, False),
    ("a > 1 AND b > 1", {"a": "2"}, False),
    ("a > 1 or b > 1", {"a": "2"}, True),
    ("a > 1 Or b > 1", {"b": "2"}, True),
    ("a > 1 OR b > 1", {}, False),
    ("NOT (a > 1)", {"a": "0"}, True),
    ("NOT (a > 1)", {}, False),  # NOT unknown is unknown
    ("NOT (a > 1 AND b > 1)", {"a": "0"}, True),  # false AND unknown = false
    ("NOT (a > 1 OR b > 1)", {"a": "0"}, False),  # false OR unknown = unknown
    ("a = 1 OR b = 'x' AND c = 2", {"a": "1"}, True),  # AND binds tighter
    ("(a = 1 OR b = 'x') AND c = 2", {"a": "1"}, False),
    # an evaluation error fails the whole selector, short-circuit first
    ("a > 5 OR b = 1", {"a": "x", "b": "1"}, False),
    ("b = 1 OR a > 5", {"a": "x", "b": "1"}, True),
    # missing properties
    ("a > 5", {}, False),
    ("a = 5", {}, False),
    ("a <> 5", {}, False),
    ("a = b", {"a": "1"}, False),
    ("NOT (a = b)", {"a": "1"}, True),  # the right side missing is false, not unknown
    ("NOT (a = b)", {"b": "1"}, False),  # the left side missing is unknown
    # BETWEEN
    ("a BETWEEN 3 AND 4", {"a": "3"}, True),
    ("a between 3 and 4", {"a": "4"}, True),
    ("a BETWEEN 3 AND 4", {"a": "5"}, False),
    ("a BETWEEN 3 AND 4", {}, False),
    ("a NOT BETWEEN 3 AND 4", {"a": "5"}, True),
    ("a NOT BETWEEN 3 AND 4", {"a": "3"}, False),
    ("a NOT BETWEEN 3 AND 4", {}, False),
    ("a BETWEEN -5 AND 5", {"a": "0"}, True),
    ("a BETWEEN 2.5 AND 3", {"a": "2.75"}, False),  # 2.75 against the Integer 3: not an int
    ("a BETWEEN 3 AND 3", {"a": "3"}, True),
    # IN: strings only
    ("b IN ('x', 'y')", {"b": "y"}, True),
    ("b IN ('x', 'y')", {"b": "z"}, False),
    ("b IN ('x', 'y')", {}, False),
    ("b NOT IN ('x', 'y')", {"b": "z"}, True),
    ("b NOT IN ('x', 'y')", {"b": "x"}, False),
    ("b NOT IN ('x', 'y')", {}, False),
    ("b in ('1','2','3','4','5','6')", {"b": "6"}, True),
    # IS NULL, IS NOT NULL
    ("c IS NULL", {}, True),
    ("c IS NULL", {"c": ""}, False),
    ("c IS NOT NULL", {"c": "1"}, True),
    ("c is not null", {}, False),
    ("NOT (c IS NULL)", {"c": "1"}, True),
    # TAGS is a property like any other
    ("TAGS = 'TagA'", {"TAGS": "TagA"}, True),
    ("TAGS IN ('TagA', 'TagB') AND a > 1", {"TAGS": "TagB", "a": "2"}, True),
    ("TAGS IS NULL", {"a": "1"}, True),
    # names are case-sensitive, keywords are not
    ("A = 1", {"a": "1"}, False),
    ("a_1$ = 1", {"a_1$": "1"}, True),
    ("a = 1 AnD b = 2", {"a": "1", "b": "2"}, True),
    # comments and white space
    ("a = 1 /* note */ AND\tb = 2", {"a": "1", "b": "2"}, True),
    ("a = 1 -- note\n AND b = 2", {"a": "1", "b": "2"}, True),
    # as in RocketMQ, text after one complete expression is not read
    ("a = 1 b c", {"a": "1"}, True),
    ("a = 1)", {"a": "1"}, True),
]


@pytest.mark.parametrize(("expression", "properties", "expected"), MATCHES)
def test_matches(expression: str, properties: dict[str, str], expected: bool) -> None:
    assert compile_sql92(expression).matches(properties) is expected


def test_an_evaluation_error_is_raised_by_evaluate_and_is_no_match() -> None:
    selector = compile_sql92("a > 5")
    with pytest.raises(EvaluationError, match='NumberFormatException: For input string: "x"'):
        selector.evaluate({"a": "x"})
    assert selector.matches({"a": "x"}) is False
    assert selector.evaluate({}) is None
    assert selector.evaluate({"a": "6"}) is True


PARSE_ERRORS: list[tuple[str, str]] = [
    (
        "a and between 2 and 10",
        'org.apache.rocketmq.filter.parser.ParseException: Encountered " "BETWEEN" "between "" '
        "at line 1, column 7.\nWas expecting one of:\n",
    ),
    (
        "a >",
        'org.apache.rocketmq.filter.parser.ParseException: Encountered "<EOF>" at line 1, '
        "column 3.\n",
    ),
    (
        "a IS 5",
        'org.apache.rocketmq.filter.parser.ParseException: Encountered " <DECIMAL_LITERAL> '
        '"5 "" at line 1, column 6.\nWas expecting one of:\n    "NOT" ...\n    "NULL" ...\n',
    ),
    (
        "a >  ",
        'org.apache.rocketmq.filter.parser.ParseException: Encountered "<EOF>" at line 1, '
        'column 5.\nWas expecting one of:\n    "NOT" ...\n    "TRUE" ...\n    "FALSE" ...\n'
        '    "NULL" ...\n    <DECIMAL_LITERAL> ...\n    <FLOATING_POINT_LITERAL> ...\n'
        '    <STRING_LITERAL> ...\n    <ID> ...\n    "(" ...\n    "-" ...\n    "+" ...\n    ',
    ),
    ("", "java.lang.ArrayIndexOutOfBoundsException: -1"),
    (
        "a = 1\tAND #",
        "org.apache.rocketmq.filter.parser.TokenMgrError: Lexical error at line 1, "
        'column 13.  Encountered: "#" (35), after : ""',
    ),
    (
        "a\n  in (5)",
        'org.apache.rocketmq.filter.parser.ParseException: Encountered " <DECIMAL_LITERAL> '
        '"5 "" at line 2, column 7.\nWas expecting:\n    <STRING_LITERAL> ...\n',
    ),
    (
        "a # 5",
        "org.apache.rocketmq.filter.parser.TokenMgrError: Lexical error at line 1, "
        'column 3.  Encountered: "#" (35), after : ""',
    ),
    (
        "a = 'open",
        "org.apache.rocketmq.filter.parser.TokenMgrError: Lexical error at line 1, "
        'column 9.  Encountered: <EOF> after : "\\\'open"',
    ),
    (
        "5",
        "org.apache.rocketmq.filter.parser.ParseException: "
        "Expression will not result in a boolean value: 5",
    ),
    (
        " a between 10 and 0",
        "java.lang.RuntimeException: Illegal values of between, left value(10) must less than "
        "or equal to right value(0)",
    ),
    (
        "a between NULL and 0",
        "java.lang.RuntimeException: Illegal values of between, values can not be null!",
    ),
    (
        "a > 100000000000000000000000",
        'java.lang.NumberFormatException: For input string: "100000000000000000000000"',
    ),
    ("a = NULL", "java.lang.RuntimeException: 'NULL' cannot be compared."),
    ("a > 'x'", "java.lang.RuntimeException: Value ''x'' cannot be compared."),
    ("a > TRUE", "java.lang.RuntimeException: Value 'TRUE' cannot be compared."),
    ("NOT a > 5", "java.lang.RuntimeException: Value '(NOT a)' cannot be compared."),
    ("TRUE = 5", "java.lang.RuntimeException: 'TRUE' cannot be compared with '5'"),
    ("3 IN ('a')", "java.lang.RuntimeException: Expected a property for In expression, got: 3"),
    ("a > 0.0", "java.lang.RuntimeException: 0.0 is less than 4.9E-324"),
    ("a > 1e400", "java.lang.RuntimeException: 1e400 is greater than 1.7976931348623157E308"),
]


@pytest.mark.parametrize(("expression", "remark"), PARSE_ERRORS)
def test_parse_error_remark(expression: str, remark: str) -> None:
    with pytest.raises(FilterParseError) as caught:
        compile_sql92(expression)
    assert caught.value.remark.startswith(remark), caught.value.remark


def test_cached_by_expression_and_errors_raised_afresh() -> None:
    assert compile_sql92("a > 5") is compile_sql92("a > 5")
    first = second = None
    for attempt in range(2):
        try:
            compile_sql92("a >")
        except FilterParseError as error:
            if attempt:
                second = error
            else:
                first = error
    assert first is not None and second is not None and first is not second
    assert first.remark == second.remark


def test_expression_types() -> None:
    assert is_tag_type(None) and is_tag_type("") and is_tag_type("TAG")
    assert not is_tag_type("SQL92")


@hypothesis.settings(max_examples=2000, deadline=None)
@hypothesis.given(
    st.one_of(
        st.text(max_size=60),
        st.lists(
            st.sampled_from([
                "a", "b", "TAGS", "1", "5L", "2.5", ".5", "1e3", "'x'", "'it''s'", "TRUE",
                "FALSE", "NULL", "AND", "OR", "NOT", "BETWEEN", "IN", "IS", "=", "<>", ">", ">=",
                "<", "<=", "(", ")", ",", "+", "-", "/*", "*/", "--", "\n", "#", "'",
            ]),
            max_size=14,
        ).map(" ".join),
    ),
    st.dictionaries(st.sampled_from(["a", "b", "TAGS"]), st.text(max_size=6), max_size=3),
)  # fmt: skip
def test_fuzz_parser_raises_only_its_parse_error(text: str, properties: dict[str, str]) -> None:
    try:
        selector = compile_sql92(text)
    except FilterParseError as error:
        assert error.remark.split(": ", 1)[0].startswith(("org.apache", "java.lang"))
        return
    assert isinstance(selector, Sql92Filter)
    assert selector.matches(properties) in (True, False)


@pytest.mark.parametrize(
    "expression",
    [
        "(" * 3000 + "a = 1",
        "NOT " * 500 + "(a = 1)",
        " AND ".join(["a = 1"] * 300),
        "- " * 5000 + "5 = a",
    ],
    ids=["parentheses", "nots", "ands", "negations"],
)
def test_nesting_too_deep_is_a_parse_error(expression: str) -> None:
    with pytest.raises(FilterParseError) as caught:
        compile_sql92(expression)
    assert caught.value.remark.startswith(("java.lang.RuntimeException", "java.lang.Stack"))


def test_a_long_but_bounded_chain_evaluates() -> None:
    selector = compile_sql92(" OR ".join(f"a = {i}" for i in range(150)))
    assert selector.matches({"a": "149"}) and not selector.matches({"a": "150"})
