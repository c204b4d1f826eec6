"""Parse and format command-line overrides in Hydra 1.3's override grammar, without Hydra.

Megatron-Bridge's ``scripts/training/run_recipe.py`` parses its trailing arguments with
``OverridesParser.create().parse_overrides(...)`` (Hydra 1.3) and applies them to an
OmegaConf config.  bridge-launch must accept exactly the same overrides, produce the
same values, and reject what Hydra rejects -- but importing Hydra's ANTLR parser costs
about 0.2 s, more than the whole ``--dry-run`` budget.  This module is a stdlib-only
re-implementation of that grammar (``hydra/grammar/OverrideLexer.g4`` and
``OverrideParser.g4``) and of the visitor that turns parse trees into values
(``hydra/core/override_parser/overrides_visitor.py`` and the grammar functions).

It is a small two-mode lexer (ANTLR semantics: longest match, ties go to the rule
defined first) plus a recursive-descent parser.  The nuances it reproduces:

* The key is lexed in a different mode from the value: keys allow ``ID`` (letters,
  digits, ``_``, ``-``), ``$`` anywhere (``KEY_SPECIAL``), dotted paths whose
  segments may be unsigned integers (``a.0.b``), config-group paths ``a/b`` (``ID``
  only), an ``@package`` suffix, and *no* whitespace.  An empty key is legal (``=x``,
  ``~``), as is an empty package (``a@=1``).  The ``=`` swallows the whitespace after it.
* A value is a single element or a simple choice sweep ``a,b,c``.  An element is a
  quoted string (alone: ``'a'b`` and ``'a' `` are errors), a list, a dict, a function
  call ``f(...)`` or a run of "primitive" tokens.  A run of one token keeps its type
  (``1`` -> int, ``1.5``/``inf``/``nan`` -> float, ``TrUe`` -> bool, ``NULL`` -> None);
  a run of several tokens is concatenated into a string (``1a``, ``a b``, ``-infinity``)
  with a leading/trailing whitespace token dropped.
* Structural tokens eat adjacent blanks: ``(``, ``,``, ``:``, ``=`` on both sides,
  ``[``/``{`` after, ``)``/``]``/``}`` before.  So ``a= 1`` is ``1``, ``[a , b]`` is
  ``['a', 'b']``, but ``b : c`` is the string ``'b : c'`` (the colon keeps its blanks).
* Escapes outside quotes: ``\\\\ \\( \\) \\[ \\] \\{ \\} \\: \\= \\, \\<space> \\<tab>``;
  any other backslash is a literal.  Inside quotes only backslashes that precede a
  quote are escapes (``'a\\'b'`` -> ``a'b``, ``'a\\\\'`` -> ``a\\``); others stay.
  A quoted string ends at the first quote preceded by an even number of backslashes.
* Allowed unquoted characters are letters, digits, ``_ - + . / \\ $ % * @ ? | :`` and
  blanks; anything else (``~ # ! ; & ' " ` < > ^``, newlines, non-ASCII) needs quotes.
* ``${...}`` ends at the first ``}`` (no nesting) and stays a string.
* Dict keys are primitive runs without ``:`` or ``${``; they keep their type
  (``{1:a}`` has the int key 1) and later duplicates win.
* Functions are Hydra 1.3's: casts ``int float str bool`` and sweeps ``choice range
  interval glob tag sort shuffle``, with Hydra's argument checking.  ``json_str`` does
  not exist in Hydra 1.3 and is rejected like any unknown function.

What is deliberately not mimicked raises :class:`UnsupportedOverrideError` (a subclass
of :class:`OverrideError`) where Hydra would accept: ``shuffle()`` of a list of two or
more items (Hydra returns a *random* order), and sweeps nested inside a list, dict or
another sweep (e.g. ``[choice(1,2)]``), which Hydra passes on as opaque objects.

Values of sweeps are :class:`Sweep` objects rather than Hydra's sweep classes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

__all__ = [
    "Override",
    "OverrideError",
    "Sweep",
    "UnsupportedOverrideError",
    "format_override",
    "format_value",
    "parse_override",
    "parse_overrides",
]

_GRAMMAR_HINT = "see https://hydra.cc/docs/advanced/override_grammar/basic/"
# Characters str.splitlines() breaks on, mapped to their escaped spelling.
_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


class OverrideError(ValueError):
    """An override that Hydra's grammar rejects.  The message is always a single line."""

    def __init__(self, message: str):
        super().__init__(message.translate(_LINE_BREAKS))


class UnsupportedOverrideError(OverrideError):
    """An override Hydra accepts but bridge-launch cannot reproduce deterministically."""


@dataclass(frozen=True)
class Sweep:
    """The value of a sweep override (Hydra's ChoiceSweep/RangeSweep/IntervalSweep/Glob).

    ``items`` holds, by ``kind``: choice -> the choices; range -> (start, stop, step);
    interval -> (start, end) as floats; glob -> (include list, exclude list).
    """

    kind: str
    items: tuple = ()
    simple_form: bool = False  # `a,b` (or a cast/sort of several values) rather than choice(a,b)
    shuffle: bool = False
    tags: frozenset = frozenset()


@dataclass(frozen=True)
class Override:
    """One parsed override.  ``value`` is what Hydra's ``Override.value()`` gives, with quoted
    strings unquoted everywhere (also inside sweeps) and sweeps as :class:`Sweep`."""

    raw: str  # the token exactly as the user gave it
    op: str  # "set" | "add" (+key=v) | "force" (++key=v) | "delete" (~key, ~key=v)
    key: str  # the key text, including any "@package" suffix
    value: object  # int/float/bool/None/str/list/dict, a Sweep, or None for ~key
    value_text: str | None  # the exact text after the first '=' (None if no '=')
    has_value: bool
    is_sweep: bool
    has_interpolation: bool  # some string in the value contains "${"


# --------------------------------------------------------------------------- lexer

# Token kinds (names follow OverrideLexer.g4).
WS, POPEN, COMMA, PCLOSE = "WS", "POPEN", "COMMA", "PCLOSE"
BRACKET_OPEN, BRACKET_CLOSE, BRACE_OPEN, BRACE_CLOSE = "[", "]", "{", "}"
COLON, EQUAL, FLOAT, INT, BOOL, NULL = "COLON", "EQUAL", "FLOAT", "INT", "BOOL", "NULL"
UNQUOTED_CHAR, ID, ESC, QUOTED, INTERPOLATION, EOF = "UCHAR", "ID", "ESC", "QUOTED", "INTERP", "EOF"
KEY_SPECIAL, DOT_PATH, TILDE, PLUS, AT, SLASH = "KEY_SPECIAL", "DOT_PATH", "~", "+", "@", "/"

_INTU = r"(?:0|[1-9](?:_?[0-9])*)"
_DIGITS = r"[0-9](?:_?[0-9])*"
_EXP = rf"[eE][+-]?{_DIGITS}"
# FLOAT alternatives ordered so that Python's first match is ANTLR's longest match.
_FLOAT_RE = re.compile(rf"[+-]?(?:{_INTU}?\.{_DIGITS}(?:{_EXP})?|{_INTU}(?:\.(?:{_EXP})?|{_EXP})|(?i:inf|nan))")
_INT_RE = re.compile(rf"[+-]?{_INTU}")
_ID_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_ESC_RE = re.compile(r"(?:\\\\|\\[()\[\]{}:=, \t])+")
_INTERP_RE = re.compile(r"\$\{[^}]+\}")


def _after_blanks(raw: str, i: int) -> int:
    """The index after the blanks (spaces, tabs) at raw[i:]; i itself when there are none."""
    n = len(raw)
    while i < n and raw[i] in " \t":
        i += 1
    return i


_KEY_SPECIAL_RE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")
_KEY_SEG = rf"(?:[A-Za-z_$][A-Za-z0-9_$-]*|{_INTU})"
_DOT_PATH_RE = re.compile(rf"{_KEY_SEG}(?:\.{_KEY_SEG})+")

_BLANK_BOTH = {"(": POPEN, ",": COMMA, ":": COLON, "=": EQUAL}  # eat blanks before and after
_BLANK_BEFORE = {")": PCLOSE, "]": BRACKET_CLOSE, "}": BRACE_CLOSE}  # eat blanks before
_BLANK_AFTER = {"[": BRACKET_OPEN, "{": BRACE_OPEN}  # eat blanks after
_UNQUOTED_CHARS = frozenset("/-\\+.$%*@?|")
_WORD_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_NUMBER_START = frozenset("0123456789+-.")
_KEYWORDS = {"true": BOOL, "false": BOOL, "null": NULL, "inf": FLOAT, "nan": FLOAT}
_KEY_CHARS = {"~": TILDE, "+": PLUS, "@": AT, ":": COLON, "/": SLASH}

_VALUE_HINT = "quote the value (key='...') or escape the character with a backslash"
_KEY_HINT = (
    "a key is a dotted path such as model.hidden_size (letters, digits, _, -, $), "
    "optionally prefixed with +, ++ or ~ and followed by =VALUE"
)


def _err(raw: str, what: str, pos: int | None = None, hint: str | None = None, cls=OverrideError):
    where = f" at column {pos + 1}" if pos is not None else ""
    kind = "unsupported" if cls is UnsupportedOverrideError else "invalid"
    return cls(f"{kind} override {raw!r}: {what}{where}; {hint or _GRAMMAR_HINT}")


def _lex_key(raw: str):
    """Lex the key part (ANTLR's default mode).  Returns (tokens, index after '=' and its blanks)."""
    toks = []
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == "=":
            end = _after_blanks(raw, i + 1)
            toks.append((EQUAL, "=", i))
            return toks, end
        kind = _KEY_CHARS.get(c)
        if kind is not None:
            toks.append((kind, c, i))
            i += 1
            continue
        m = _DOT_PATH_RE.match(raw, i)
        if m is not None:
            kind = DOT_PATH
        else:
            m = _KEY_SPECIAL_RE.match(raw, i)
            if m is None:
                what = f"unexpected {c!r} in the key" if c not in " \t" else "whitespace in the key"
                if c in "0123456789":
                    what = f"a key cannot start with a digit ({c!r})"
                raise _err(raw, what, i, _KEY_HINT)
            kind = KEY_SPECIAL if "$" in m.group() else ID
        toks.append((kind, m.group(), i))
        i = m.end()
    return toks, None


def _scan_quoted(raw: str, i: int) -> int:
    """End of the quoted string opened at raw[i]: after the first quote preceded by an even number of backslashes."""
    q = raw[i]
    j = i + 1
    while True:
        k = raw.find(q, j)
        if k < 0:
            return -1
        b = k
        while b > i + 1 and raw[b - 1] == "\\":
            b -= 1
        if (k - b) % 2 == 0:
            return k + 1
        j = k + 1


def _lex_value(raw: str, i: int) -> list:
    """Lex raw[i:] in ANTLR's VALUE_MODE into (kind, text, position) tuples, ending with EOF."""
    toks = []
    n = len(raw)
    while i < n:
        c = raw[i]
        start = i
        if c == " " or c == "\t":
            j = _after_blanks(raw, i)
            d = raw[j] if j < n else ""
            kind = _BLANK_BOTH.get(d)
            if kind is not None:
                i = _after_blanks(raw, j + 1)
            else:
                kind = _BLANK_BEFORE.get(d)
                i = j + 1 if kind is not None else j
                if kind is None:
                    kind = WS
        elif c in _WORD_START:
            m = _ID_RE.match(raw, i)
            assert m is not None  # c starts a word
            i = m.end()
            kind = _KEYWORDS.get(m.group().lower(), ID) if i - start <= 5 else ID
        elif c in _NUMBER_START:
            m = _FLOAT_RE.match(raw, i)
            if m is not None:
                kind = FLOAT
            else:
                m = _INT_RE.match(raw, i)
                kind = INT if m is not None else UNQUOTED_CHAR
            i = m.end() if m is not None else i + 1
        elif c in _BLANK_BOTH:
            kind = _BLANK_BOTH[c]
            i = _after_blanks(raw, i + 1)
        elif c in _BLANK_BEFORE:
            kind = _BLANK_BEFORE[c]
            i += 1
        elif c in _BLANK_AFTER:
            kind = _BLANK_AFTER[c]
            i = _after_blanks(raw, i + 1)
        elif c == "'" or c == '"':
            i = _scan_quoted(raw, i)
            if i < 0:
                raise _err(
                    raw,
                    f"unterminated quoted string (opened with {c})",
                    start,
                    f"close it with a matching {c} (write \\{c} for a literal {c} inside)",
                )
            kind = QUOTED
        elif c == "\\":
            m = _ESC_RE.match(raw, i)
            kind = ESC if m is not None else UNQUOTED_CHAR
            i = m.end() if m is not None else i + 1
        elif c == "$":
            m = _INTERP_RE.match(raw, i)
            kind = INTERPOLATION if m is not None else UNQUOTED_CHAR
            i = m.end() if m is not None else i + 1
        elif c in _UNQUOTED_CHARS:
            kind = UNQUOTED_CHAR
            i += 1
        else:
            raise _err(raw, f"character {c!r} is not allowed in an unquoted value", start, _VALUE_HINT)
        toks.append((kind, raw[start:i], start))
    toks.append((EOF, "", n))
    return toks


# --------------------------------------------------------------------------- parser

_PRIMITIVE = frozenset([ID, NULL, INT, FLOAT, BOOL, INTERPOLATION, UNQUOTED_CHAR, COLON, ESC, WS])
_DICT_KEY = frozenset([ID, NULL, INT, FLOAT, BOOL, UNQUOTED_CHAR, ESC, WS])
_DESCRIBE = {
    EOF: "end of input",
    COMMA: "','",
    POPEN: "'('",
    PCLOSE: "')'",
    EQUAL: "'='",
    COLON: "':'",
    BRACKET_CLOSE: "']'",
    BRACE_CLOSE: "'}'",
}


class _Quoted:
    """A quoted string inside the parse (Hydra's QuotedString): equal by text and quote, not orderable."""

    __slots__ = ("text", "quote")

    def __init__(self, text: str, quote: str):
        self.text, self.quote = text, quote

    def __eq__(self, other):
        if type(other) is not _Quoted:
            return NotImplemented
        return self.text == other.text and self.quote == other.quote

    def __hash__(self):
        return hash((self.text, self.quote))


class _Call:
    """A function call, evaluated after the whole override has parsed (as Hydra's visitor does)."""

    __slots__ = ("name", "args", "kwargs", "text", "pos", "error", "shadowed")

    def __init__(self, name, args, kwargs, text, pos, error, shadowed=()):
        self.name, self.args, self.kwargs, self.text, self.pos, self.error = name, args, kwargs, text, pos, error
        # a keyword argument given twice: the later value wins, but Hydra's visitor has already
        # evaluated the earlier one (and raised its errors), so it is evaluated too
        self.shadowed = shadowed


class _PendingDict:
    """A dict whose values contain function calls: Hydra evaluates every pair, duplicates included."""

    __slots__ = ("pairs",)

    def __init__(self, pairs):
        self.pairs = pairs


def _unescape_quoted(text: str) -> str:
    """Hydra's _unescape_quoted_string: halve the backslashes that precede a quote, strip the quotes."""
    q = text[0]
    if "\\" not in text:
        return text[1:-1]
    pattern = _ESC_QUOTED_STR[q]
    text = text[1:]
    out = []
    m = pattern.search(text)
    while m is not None:
        start, stop = m.span()
        out.append(text[:start])
        out.append(text[start + 1 : stop : 2])
        text = text[stop:]
        m = pattern.search(text)
    out.append(text[:-1])
    return "".join(out)


_ESC_QUOTED_STR = {"'": re.compile(r"(\\)+'"), '"': re.compile(r'(\\)+"')}


def _primitive_value(toks: list, raw: str):
    """Value of a run of primitive tokens, as Hydra's _createPrimitive computes it."""
    first, last = 0, len(toks)
    if toks[0][0] is WS:
        if last == 1:
            raise _err(raw, "a value made only of whitespace", toks[0][2], _VALUE_HINT)
        first = 1
    if toks[-1][0] is WS:
        last -= 1
    if last - first == 1:
        kind, text, _ = toks[first]
        if kind is INT:
            return int(text)
        if kind is FLOAT:
            return float(text)
        if kind is BOOL:
            return text.lower() == "true"
        if kind is NULL:
            return None
        if kind is ESC:
            return text[1::2]
        return text
    return "".join(t[1][1::2] if t[0] is ESC else t[1] for t in toks[first:last])


class _Parser:
    """Recursive descent over the value tokens (rules `value` .. `dictKey` of OverrideParser.g4)."""

    def __init__(self, raw: str, toks: list):
        self.raw, self.toks, self.i = raw, toks, 0
        self.has_call = False

    def fail(self, expected: str, hint: str | None = None):
        kind, text, pos = self.toks[self.i]
        got = _DESCRIBE.get(kind) or repr(text)
        if kind is BRACE_OPEN and self.i and self.toks[self.i - 1][1] == "$":
            hint = "an interpolation is written ${...} with no blank after $ and a closing }"
        raise _err(self.raw, f"expected {expected} but found {got}", pos, hint)

    def value(self):
        """value: element | element (COMMA element)+ ; may be empty at top level (key=)."""
        toks = self.toks
        if toks[0][0] is EOF:
            return ""
        first = self.element()
        if toks[self.i][0] is COMMA:
            items = [first]
            while toks[self.i][0] is COMMA:
                self.i += 1
                items.append(self.element())
            first = Sweep("choice", tuple(items), simple_form=True)
        if toks[self.i][0] is not EOF:
            hint = _VALUE_HINT
            if toks[self.i - 1][0] is QUOTED:
                hint = "a quoted string must be the whole value or list/dict item"
            self.fail("',' or the end of the value", hint)
        return first

    def element(self):
        toks = self.toks
        kind = toks[self.i][0]
        if kind is QUOTED:
            text = toks[self.i][1]
            self.i += 1
            return _Quoted(_unescape_quoted(text), text[0])
        if kind is ID and toks[self.i + 1][0] is POPEN:
            return self.function()
        if kind is BRACKET_OPEN:
            return self.list_()
        if kind is BRACE_OPEN:
            return self.dict_()
        if kind in _PRIMITIVE:
            return self.primitive(_PRIMITIVE)
        self.fail("a value")

    def primitive(self, allowed):
        toks = self.toks
        start = self.i
        while toks[self.i][0] in allowed:
            self.i += 1
        if self.i - start == 1:  # fast path for the common single-token value
            kind, text, _ = toks[start]
            if kind is ID or kind is INTERPOLATION:
                return text
        return _primitive_value(toks[start : self.i], self.raw)

    def list_(self):
        toks = self.toks
        open_pos = toks[self.i][2]
        self.i += 1
        out: list = []
        if toks[self.i][0] is BRACKET_CLOSE:
            self.i += 1
            return out
        while True:
            out.append(self.element())
            kind = toks[self.i][0]
            self.i += 1
            if kind is BRACKET_CLOSE:
                return out
            if kind is not COMMA:
                self.i -= 1
                self.fail(f"',' or ']' to continue the list opened at column {open_pos + 1}")

    def dict_(self):
        toks = self.toks
        open_pos = toks[self.i][2]
        self.i += 1
        out: dict = {}
        if toks[self.i][0] is BRACE_CLOSE:
            self.i += 1
            return out
        had_call, self.has_call = self.has_call, False
        pairs = []
        while True:
            if toks[self.i][0] not in _DICT_KEY:
                self.fail("a dict key (an unquoted name or number; keys cannot be quoted)")
            key = self.primitive(_DICT_KEY)
            if toks[self.i][0] is not COLON:
                self.fail("':' after the dict key")
            self.i += 1
            pairs.append((key, self.element()))
            kind = toks[self.i][0]
            self.i += 1
            if kind is BRACE_CLOSE:
                if self.has_call:  # evaluate every value, even those a later duplicate key replaces
                    return _PendingDict(pairs)
                self.has_call = had_call
                return dict(pairs)
            if kind is not COMMA:
                self.i -= 1
                self.fail(f"',' or '}}' to continue the dict opened at column {open_pos + 1}")

    def function(self):
        """function: ID POPEN (argName? element (COMMA argName? element)*)? PCLOSE ; argName: ID EQUAL."""
        toks = self.toks
        _, name, pos = toks[self.i]
        self.i += 2
        args: list = []
        kwargs: dict = {}
        error, shadowed = None, []
        if toks[self.i][0] is not PCLOSE:
            while True:
                if toks[self.i][0] is ID and toks[self.i + 1][0] is EQUAL:
                    arg_name = toks[self.i][1]
                    self.i += 2
                    if arg_name in kwargs:
                        shadowed.append(kwargs[arg_name])
                    kwargs[arg_name] = self.element()
                else:
                    if kwargs and error is None:
                        error = "positional argument follows keyword argument"
                    args.append(self.element())
                kind = toks[self.i][0]
                if kind is PCLOSE:
                    break
                if kind is not COMMA:
                    self.fail(f"',' or ')' to continue the call to {name}() at column {pos + 1}")
                self.i += 1
        self.i += 1
        self.has_call = True
        end = toks[self.i][2]
        return _Call(name, args, kwargs, self.raw[pos:end], pos, error, tuple(shadowed))


# --------------------------------------------------------------------------- functions
# Ports of hydra/_internal/grammar/grammar_functions.py, including Hydra's argument type
# checks (hydra/_internal/grammar/functions.py).  Python's own call binding reproduces
# inspect.Signature.bind's errors.


class _Unsupported(Exception):
    """Hydra would succeed but with a result bridge-launch does not reproduce; carries a stand-in."""

    def __init__(self, message: str, stand_in):
        super().__init__(message)
        self.stand_in = stand_in


def _is_sweep(v, kinds=("choice", "range", "interval")) -> bool:
    return type(v) is Sweep and v.kind in kinds


def _check(fname, pname, value, ok) -> None:
    if not ok:
        raise TypeError(f"mismatch type argument {pname}: {type(value).__name__} is not accepted by {fname}()")


def _is_element(v) -> bool:  # Union[str, int, float, bool, list, dict]
    return isinstance(v, (str, int, float, list, dict))


def _is_parsed_element(v) -> bool:  # ParsedElementType: elements, QuotedString or None
    return v is None or type(v) is _Quoted or _is_element(v)


def _list_to_simple_choice(args) -> Sweep:
    for arg in args:
        if not _is_parsed_element(arg):
            raise AssertionError("sweeps cannot be combined with other values here")
    return Sweep("choice", tuple(args), simple_form=True)


def _make_cast(name: str):
    def cast_primitive(v):
        if name == "bool":
            if isinstance(v, str):
                low = v.lower()
                if low == "false":
                    return False
                if low == "true":
                    return True
                raise ValueError(f"Cannot cast '{v}' to bool")
            return bool(v)
        if not isinstance(v, (int, float, str)):
            raise AssertionError(f"cannot cast {type(v).__name__} to {name}")
        if name == "int":
            return int(v)
        if name == "float":
            return float(v)
        return str(v).lower() if isinstance(v, bool) else str(v)

    def cast(v):
        if type(v) is _Quoted:
            return cast(v.text)
        if isinstance(v, dict):
            return {k: cast(x) for k, x in v.items()}
        if isinstance(v, list):
            return [cast(x) for x in v]
        if type(v) is Sweep and v.kind == "choice":
            items = tuple(cast(x) for x in v.items)
            for x in items:
                if not _is_element(x):
                    raise AssertionError("invalid choice after cast")
            return Sweep("choice", items, simple_form=v.simple_form)
        if type(v) is Sweep and v.kind == "range":
            if name not in ("int", "float"):
                raise ValueError("Range can only be cast to int or float")
            return Sweep("range", tuple(cast(x) for x in v.items))
        if type(v) is Sweep and v.kind == "interval":
            if name not in ("int", "float"):
                raise ValueError(f"Intervals cannot be cast to {name}")
            return Sweep("interval", tuple(cast(x) for x in v.items), tags=v.tags)
        return cast_primitive(v)

    def function(*args, value=None):
        for i, a in enumerate(args):
            _check(name, f"args[{i}]", a, not _is_sweep(a, ("glob",)))
        _check(name, "value", value, not _is_sweep(value, ("glob",)))
        if args and value is not None:
            raise TypeError("cannot use both position and named arguments")
        if value is None:
            if not args:
                raise TypeError("No positional args or value specified")
            value = args[0] if len(args) == 1 else _list_to_simple_choice(args)
        return cast(value)

    return function


def _choice(*args):
    for i, a in enumerate(args):
        _check("choice", f"args[{i}]", a, _is_element(a) or _is_sweep(a, ("choice",)))
    if not args:
        raise ValueError("empty choice is not legal")
    if len(args) == 1 and _is_sweep(args[0], ("choice",)):
        if args[0].simple_form:
            return replace(args[0], simple_form=False)
        raise ValueError("nesting choices is not supported")
    return Sweep("choice", args)


def _is_number(v) -> bool:
    return isinstance(v, (int, float))


def _range(start, stop=None, step=1):
    _check("range", "start", start, _is_number(start))
    _check("range", "stop", stop, stop is None or _is_number(stop))
    _check("range", "step", step, _is_number(step))
    if stop is None:
        start, stop = 0, start
    return Sweep("range", (start, stop, step))


def _interval(start, end):
    _check("interval", "start", start, _is_number(start))
    _check("interval", "end", end, _is_number(end))
    return Sweep("interval", (float(start), float(end)))


def _tag(*args, sweep=None):
    for i, a in enumerate(args):
        _check("tag", f"args[{i}]", a, isinstance(a, str) or _is_sweep(a))
    _check("tag", "sweep", sweep, sweep is None or _is_sweep(sweep))
    return _tag_impl(*args, sweep=sweep)


def _tag_impl(*args, sweep=None):
    if len(args) < 1:
        raise ValueError("Not enough arguments to tag, must take at least a sweep")
    if sweep is not None:
        return _tag_impl(*args, sweep)
    last = args[-1]
    if not _is_sweep(last):
        raise ValueError("Last argument to tag() must be a choice(), range() or interval()")
    tags = set()
    for t in args[:-1]:
        if not isinstance(t, str):
            raise ValueError(f"tag arguments type must be string, got {type(t).__name__}")
        tags.add(t)
    return replace(last, tags=frozenset(tags))


def _check_order_args(fname, args, sweep, lst):
    for i, a in enumerate(args):
        _check(fname, f"args[{i}]", a, _is_element(a) or _is_sweep(a, ("choice", "range")))
    _check(fname, "sweep", sweep, sweep is None or _is_sweep(sweep, ("choice", "range")))
    _check(fname, "list", lst, lst is None or isinstance(lst, list))


def _shuffle(*args, sweep=None, list=None):  # noqa: A002 - Hydra's keyword name
    _check_order_args("shuffle", args, sweep, list)
    if list is not None:
        args = (list,)
    elif sweep is not None:
        args = (sweep,)
    if len(args) != 1:
        return replace(_list_to_simple_choice(args), shuffle=True)
    arg = args[0]
    if _is_sweep(arg, ("choice", "range")):
        return replace(arg, shuffle=True)
    if isinstance(arg, type([])):
        if len(arg) > 1:
            raise _Unsupported("shuffle() of a list gives a random order", arg[:])
        return arg[:]
    return [arg]


def _sort(*args, sweep=None, list=None, reverse=False):  # noqa: A002 - Hydra's keyword name
    _check_order_args("sort", args, sweep, list)
    _check("sort", "reverse", reverse, type(reverse) is bool)
    if list is not None:
        return sorted(list, reverse=reverse)
    if sweep is not None:
        return _sort_sweep(sweep, reverse)
    if len(args) == 1:
        arg = args[0]
        if _is_sweep(arg, ("choice", "range")):
            return _sort_sweep(arg, reverse)
        if isinstance(arg, type([])):
            return sorted(arg, reverse=reverse)
        return arg
    for a in args:
        if not isinstance(a, (int, float, str)):
            raise TypeError(f"Invalid arguments: {args}")
    if not args:
        raise ValueError("empty sort input")
    return _sort_sweep(_list_to_simple_choice(args), reverse)


def _sort_sweep(sweep: Sweep, reverse: bool) -> Sweep:
    if sweep.kind == "choice":
        return replace(sweep, items=tuple(sorted(sweep.items, reverse=reverse)))
    start, stop, step = sweep.items
    if not reverse and start > stop:
        start, stop, step = stop + abs(step), start + abs(step), -step
    elif reverse and start < stop:
        start, stop, step = stop - abs(step), start - abs(step), -step
    return replace(sweep, items=(start, stop, step))


def _glob(include, exclude=None):
    _check("glob", "include", include, isinstance(include, (list, str)))
    _check("glob", "exclude", exclude, exclude is None or isinstance(exclude, (list, str)))
    include = [include] if isinstance(include, str) else include
    exclude = [] if exclude is None else [exclude] if isinstance(exclude, str) else exclude
    return Sweep("glob", (include, exclude))


_FUNCTIONS = {
    "int": _make_cast("int"),
    "str": _make_cast("str"),
    "bool": _make_cast("bool"),
    "float": _make_cast("float"),
    "choice": _choice,
    "range": _range,
    "interval": _interval,
    "tag": _tag,
    "sort": _sort,
    "shuffle": _shuffle,
    "glob": _glob,
}
for _name, _func in _FUNCTIONS.items():
    _func.__name__ = _func.__qualname__ = _name  # so Python's argument errors name Hydra's function
del _name, _func


def _unquote(v):
    return v.text if type(v) is _Quoted else v


def _evaluate(v, raw: str, unsupported: list):
    """Replace every _Call in a parsed value by its result, innermost first.

    Hydra errors raise at once; what bridge-launch does not support is noted in
    `unsupported` and evaluation goes on with a stand-in, so that an override Hydra
    rejects is reported as invalid rather than as unsupported.
    """
    t = type(v)
    if t is list:
        return [_evaluate(x, raw, unsupported) for x in v]
    if t is dict:
        return {k: _evaluate(x, raw, unsupported) for k, x in v.items()}
    if t is _PendingDict:
        out = {}
        for k, x in v.pairs:
            out[k] = _evaluate(x, raw, unsupported)
        return out
    if t is Sweep:  # top-level simple sweep a,b
        return replace(v, items=tuple(_evaluate(x, raw, unsupported) for x in v.items))
    if t is not _Call:
        return v
    for a in v.shadowed:
        _evaluate(a, raw, unsupported)
    args = [_unquote(_evaluate(a, raw, unsupported)) for a in v.args]
    kwargs = {k: _unquote(_evaluate(a, raw, unsupported)) for k, a in v.kwargs.items()}
    if v.error:
        raise _err(raw, f"{v.error} in {v.text!r}", v.pos, "put name=value arguments last")
    func = _FUNCTIONS.get(v.name)
    if func is None:
        raise _err(
            raw,
            f"unknown function {v.name}()",
            v.pos,
            f"Hydra 1.3 knows {', '.join(sorted(_FUNCTIONS))}; quote the value if {v.name}(...) is meant as text",
        )
    try:
        return func(*args, **kwargs)
    except _Unsupported as exc:
        if not unsupported:
            unsupported.append(
                _err(
                    raw,
                    f"{exc} in {v.text!r}",
                    v.pos,
                    "this is not supported by bridge-launch",
                    UnsupportedOverrideError,
                )
            )
        return exc.stand_in
    except Exception as exc:  # noqa: BLE001 - whatever Hydra would wrap in "<Error> while evaluating ..."
        raise _err(raw, f"{type(exc).__name__} while evaluating {v.text!r}: {exc}", v.pos) from None


def _finish(v, raw: str, top: bool = False):
    """Hydra's Override.value(): unquote strings; sweeps are only allowed as the whole value."""
    t = type(v)
    if t is _Quoted:
        return v.text
    if t is list:
        return [_finish(x, raw) for x in v]
    if t is dict:
        return {_finish(k, raw): _finish(x, raw) for k, x in v.items()}
    if t is Sweep:
        if not top:
            raise _err(
                raw,
                "a sweep nested inside a list, dict or another sweep",
                None,
                "this is not supported by bridge-launch; give a single value",
                UnsupportedOverrideError,
            )
        return replace(v, items=tuple(_finish(x, raw) for x in v.items))
    return v


def _has_interpolation(v) -> bool:
    if isinstance(v, str):
        return "${" in v
    if isinstance(v, (list, tuple)):
        return any(_has_interpolation(x) for x in v)
    if isinstance(v, dict):
        return any(_has_interpolation(k) or _has_interpolation(x) for k, x in v.items())
    if type(v) is Sweep:
        return _has_interpolation(v.items)
    return False


# --------------------------------------------------------------------------- public API

_KEY_NAMES = (ID, KEY_SPECIAL, DOT_PATH)


def _parse_key(raw: str, toks: list, has_equal: bool):
    """override prefix + key: (TILDE | PLUS PLUS?)? packageOrGroup (AT package)? ; returns (op, key)."""
    n = len(toks) - (1 if has_equal else 0)
    i = 0
    op = "set"
    if n and toks[0][0] is TILDE:
        op, i = "delete", 1
    elif n and toks[0][0] is PLUS:
        op, i = "add", 1
        if n > 1 and toks[1][0] is PLUS:
            op, i = "force", 2
    key_start = i
    # packageOrGroup: package | ID (SLASH ID)+
    if i < n and toks[i][0] is ID and i + 1 < n and toks[i + 1][0] is SLASH:
        i += 1
        while i < n and toks[i][0] is SLASH:
            if i + 1 >= n or toks[i + 1][0] is not ID:
                pos = toks[i + 1][2] if i + 1 < n else len(raw)
                raise _err(raw, "a config group path needs a name after '/'", pos, _KEY_HINT)
            i += 2
    elif i < n and toks[i][0] in _KEY_NAMES:
        i += 1
    if i < n and toks[i][0] is AT:
        i += 1
        if i < n and toks[i][0] in _KEY_NAMES:
            i += 1
    if i < n:
        kind, text, pos = toks[i]
        what = f"unexpected {text!r} in the key"
        if kind is TILDE or kind is PLUS:
            what = f"misplaced {text!r} (only a leading +, ++ or ~ is allowed)"
        raise _err(raw, what, pos, _KEY_HINT)
    if not has_equal and op != "delete":
        hint = f"write {raw}=VALUE" if raw and op == "set" else _KEY_HINT
        raise _err(raw, "missing '=' after the key", len(raw), hint)
    end = toks[n][2] if has_equal else len(raw)
    start = toks[key_start][2] if key_start < len(toks) else end
    return op, raw[start:end]


def parse_override(text: str) -> Override:
    """Parse one override exactly as Hydra 1.3 does; raise OverrideError where Hydra fails."""
    if not isinstance(text, str):
        raise TypeError(f"override must be a str, not {type(text).__name__}")
    key_toks, value_start = _lex_key(text)
    has_equal = value_start is not None
    op, key = _parse_key(text, key_toks, has_equal)
    if not has_equal:
        return Override(text, op, key, None, None, False, False, False)
    parser = _Parser(text, _lex_value(text, value_start))
    value = parser.value()
    if parser.has_call:
        unsupported: list = []
        value = _evaluate(value, text, unsupported)
        if unsupported:
            raise unsupported[0]
    value = _finish(value, text, top=True)
    is_sweep = type(value) is Sweep
    eq = key_toks[-1][2]
    return Override(text, op, key, value, text[eq + 1 :], True, is_sweep, _has_interpolation(value))


def parse_overrides(texts: list[str]) -> list[Override]:
    """Parse several overrides; the first invalid one raises OverrideError."""
    return [parse_override(t) for t in texts]


def _parse_element_text(text: str):
    """The raw parsed value of `text` as an override value (quotes kept as _Quoted)."""
    parser = _Parser(text, _lex_value(text, 0))
    value = parser.value()
    if parser.has_call:
        raise OverrideError("function call")
    return value


def _quote(s: str) -> str:
    """Hydra's QuotedString.with_quotes for single quotes: escape quotes and the backslashes before them."""
    text = s + "'"
    out = []
    pattern = _ESC_QUOTED_STR["'"]
    m = pattern.search(text) if "\\" in s else None
    while m is not None:
        start, stop = m.span()
        out.append(text[:start])
        out.append("\\" * ((stop - start - 1) * 2))
        if stop < len(text):
            out.append("'")
        text = text[stop:]
        m = pattern.search(text)
    out.append(text[:-1])
    return "'" + "".join(out).replace("'", "\\'") + "'"


def _format_str(s: str) -> str:
    if s and s[0] not in " \t" and s[-1] not in " \t\\":
        try:
            back = _parse_element_text(s)
        except OverrideError:
            back = None
        if type(back) is str and back == s:
            return s
    return _quote(s)


def _escape_key(s: str) -> str:
    """Hydra's escape_special_characters: backslash-escape \\ ( ) [ ] { } : = , space tab."""
    return re.sub(r"[\\()\[\]{}:=, \t]", lambda m: "\\" + m.group(), s)


def _format_dict_key(k) -> str:
    if isinstance(k, str):
        for text in (k, _escape_key(k)):
            try:
                back = _parse_element_text("{" + text + ":0}")
            except OverrideError:
                continue
            if type(back) is dict and len(back) == 1:
                (got,) = back
                if type(got) is str and got == k:
                    return text
        raise OverrideError(
            f"the dict key {k!r} cannot be written in Hydra's override syntax (it would not come back as that string)"
        )
    if k is None or isinstance(k, (bool, int, float)):
        return format_value(k)
    raise OverrideError(f"dict keys must be str, int, float, bool or None, not {type(k).__name__}")


def format_value(value) -> str:
    """Render a Python value as override text that Hydra parses back to an equal value."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(float(value))
    if isinstance(value, str):
        return _format_str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_format_dict_key(k)}:{format_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot format a {type(value).__name__} as an override value")


_PREFIX = {"set": "", "add": "+", "force": "++", "delete": "~"}


def format_override(key: str, value, op: str = "set") -> str:
    """`key=value` with the prefix for op ("set", "add", "force", "delete"); ~key when deleting without a value."""
    prefix = _PREFIX.get(op)
    if prefix is None:
        raise ValueError(f"unknown override op {op!r}; expected one of {', '.join(_PREFIX)}")
    if not isinstance(key, str) or "=" in key:
        raise OverrideError(f"invalid override key {key!r}: {_KEY_HINT}")
    head = prefix + key
    toks, _ = _lex_key(head + "=")
    _parse_key(head + "=", toks, True)
    if op == "delete" and value is None:
        return head
    return f"{head}={format_value(value)}"
