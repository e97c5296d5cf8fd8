"""One-off migration: install everything under the one import package `popmq`.

Run from a repository root: `python tools/repackage.py` (all steps at the end). Idempotent:
a second run changes nothing. It transforms by rules, so it also converts files it has never seen:

- imports of the old top-level packages, in every hand-written .py file and in the code of
  the Markdown files (README.md, docs/, examples/):
  `from sdk import Producer` -> `from popmq import Producer` (names of the SDK's `__all__`),
  `from sdk import x` -> `from popmq.sdk import x` (anything else), `import sdk` ->
  `from popmq import sdk`, `sdk.`/`proxy.`/`broker_core.`/`cli.` -> `popmq.<same>.`,
  `spark_connector` -> `popmq.spark`, generated `popmq.v1` / `popmq.store.v1` /
  `apache.rocketmq.v2` -> `popmq._gen.<same>`;
- module names in strings and comments (`"cli.main:main"`, logger names, patch targets,
  mypy overrides), `-m cli` (shell and `[sys.executable, "-m", "cli"]`), a bare package
  name given to `import_module(...)` or keying a table of names (test_public_names), and
  `str(root / "gen")` on a checkout's sys.path (now `src`, then `gen` for old checkouts);
- pyproject.toml: the package layout ([tool.setuptools]), the `popmq` script, ruff's
  first-party names, mypy's packages and overrides, `build` in the test extra;
- src/popmq: the package's own `__init__.py` (the SDK's public surface, imported lazily) and
  links to the top-level folders (src/popmq/sdk -> ../../sdk, spark -> ../../spark_connector,
  _gen -> ../../gen, ...). No `popmq/` folder at the root: Spark workers put the working
  directory first on sys.path, and a root `popmq/` would shadow the installed package;
- a few edits no rule covers (EDITS below: the descriptor set's package, the private pool's
  users in proxy/, README and docs paragraphs), each applied only where its anchor text is
  found (a warning names the ones to apply by hand).

Imports are then sorted and wrapped with ruff; lines the longer names pushed past the limit
(E501) are listed for rewrapping by hand. Pass --check to only list the files it would change
(exit 1 if any).

Not written here, they come with the branch that carries this script: tools/gen_protos.py
(generated code in popmq._gen, apache.rocketmq.v2 in a private descriptor pool),
tests/unit/test_packaging.py and tests/packaging/ (the wheel test). Re-applying on a tree:

    git checkout <branch> -- tools/repackage.py tools/gen_protos.py \
        tests/unit/test_packaging.py tests/packaging
    python tools/repackage.py && rm -rf gen && python tools/gen_protos.py
    .venv/bin/python -m pip install -e '.[spark,test,dev,bench]'   # or: make setup
"""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path.cwd()

MOVED = {
    "sdk": "popmq.sdk",
    "proxy": "popmq.proxy",
    "broker_core": "popmq.broker_core",
    "cli": "popmq.cli",
    "spark_connector": "popmq.spark",
}
"""Old top-level package -> its new name."""
LINKS = {
    "sdk": "sdk",
    "proxy": "proxy",
    "broker_core": "broker_core",
    "cli": "cli",
    "spark": "spark_connector",
    "_gen": "gen",
}
"""src/popmq/<name> -> the repository's top-level folder it is."""
GENERATED = ("popmq.v1", "popmq.store.v1", "apache.rocketmq.v2")
"""Generated packages (protoc's layout), now under popmq._gen."""
SKIP_DIRS = {
    ".git", ".venv", "venv", "gen", "src", "node_modules", "build", "dist", ".tools",
    "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", "data", "results",
}  # fmt: skip
SELF = Path(__file__).resolve()

_OLD = "|".join(MOVED)
_GEN = "|".join(re.escape(g) for g in GENERATED)
_NOT_AFTER = r"(?<![\w.\-/])"


def sdk_public_names() -> list[str]:
    """The SDK's `__all__`, read from sdk/__init__.py (so names added later are included)."""
    tree = ast.parse((ROOT / "sdk" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise SystemExit("sdk/__init__.py has no __all__")


PUBLIC = set()  # filled in main()


def _is_submodule(package: str, name: str) -> bool:
    folder = ROOT / package
    return (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file()


# --- import statements (anywhere in the text: code, `-c` strings, Markdown) -------------------

_FROM_IMPORT = re.compile(
    rf"{_NOT_AFTER}from[ \t]+({_OLD})((?:\.\w+)*)[ \t]+import[ \t]+"
    r"(\([^)]*\)|[^\n#;\"'`]*[^\s#;\"'`])"
)
_IMPORT = re.compile(
    rf"(?m)^([ \t]*)import[ \t]+({_OLD})((?:\.\w+)*)([ \t]+as[ \t]+\w+)?[ \t]*(?=$|#|;)"
)
_GEN_MODULE = re.compile(rf"(?<![\w.])({_GEN})(?=\.\w+_pb2(?:_grpc)?\b|[ \t]+import\b)")


def _names(imported: str) -> list[str]:
    body = imported.strip()
    if body.startswith("("):
        body = body[1:-1]
    body = re.sub(r"#[^\n]*", "", body)
    return [n.strip() for n in body.replace("\n", " ").split(",") if n.strip()]


def _join(module: str, names: list[str], indent: str, multiline: bool) -> str:
    if multiline and len(names) > 1:
        inner = "".join(f"{indent}    {n},\n" for n in names)
        return f"from {module} import (\n{inner}{indent})"
    return f"from {module} import {', '.join(names)}"


def rewrite_imports(text: str) -> str:
    def from_import(m: re.Match[str]) -> str:
        old, sub, imported = m.group(1), m.group(2), m.group(3)
        new = MOVED[old] + sub
        if sub or old != "sdk":
            return f"from {new} import {imported}"
        line_start = text.rfind("\n", 0, m.start()) + 1
        indent = re.match(r"[ \t]*", text[line_start:]).group(0)  # type: ignore[union-attr]
        names = _names(imported)
        public = [n for n in names if n.split(" as ")[0].strip() in PUBLIC]
        private = [n for n in names if n not in public]
        multiline = "\n" in imported
        parts = []
        if public:
            parts.append(_join("popmq", public, indent, multiline))
        if private:
            parts.append(_join("popmq.sdk", private, indent, multiline))
        return f"\n{indent}".join(parts)

    def plain_import(m: re.Match[str]) -> str:
        indent, old, sub, alias = m.group(1), m.group(2), m.group(3), m.group(4)
        if alias:
            return f"{indent}import {MOVED[old]}{sub}{alias}"
        if not sub and old != "spark_connector":
            return f"{indent}from popmq import {MOVED[old].split('.')[-1]}"
        return f"{indent}import {MOVED[old]}{sub}"

    text = _FROM_IMPORT.sub(from_import, text)
    text = _IMPORT.sub(plain_import, text)
    return _GEN_MODULE.sub(r"popmq._gen.\1", text)


# --- module names in strings, comments and shell lines ---------------------------------------

_DOTTED = re.compile(rf"{_NOT_AFTER}({_OLD})\.([A-Za-z_]\w*)")
_DASH_M = re.compile(rf"(-m[ \t]+)({_OLD})(?![\w-])")
_DASH_M_LIST = re.compile(rf"""(["']-m["'],\s*)(["'])({_OLD})((?:\.\w+)*)\2""")
_EXACT = re.compile(
    r"((?:import_module|importorskip|find_spec)\(\s*|(?m:^)[ \t]*)"
    rf"""(["'])({_OLD})\2(?=\s*\)|:[ \t]*\[)"""
)
"""A package named by a bare string: imported by name, or a key of a table of its names."""


def rewrite_dotted(text: str) -> str:
    """`sdk.producer` -> `popmq.sdk.producer` where `producer` is a module of sdk/."""

    def sub(m: re.Match[str]) -> str:
        old, name = m.group(1), m.group(2)
        if _is_submodule(old, name) or old == "spark_connector":
            return f"{MOVED[old]}.{name}"
        return m.group(0)

    return _DOTTED.sub(sub, text)


def rewrite_module_strings(text: str) -> str:
    text = _DASH_M.sub(lambda m: m.group(1) + MOVED[m.group(2)], text)
    return _DASH_M_LIST.sub(
        lambda m: f"{m.group(1)}{m.group(2)}{MOVED[m.group(3)]}{m.group(4)}{m.group(2)}", text
    )


def rewrite_python(text: str) -> str:
    text = rewrite_imports(text)
    text = rewrite_module_strings(text)
    # sys.path / PYTHONPATH of a checkout (tools measuring another commit): src/ holds popmq
    # now; gen/ stays behind it for checkouts from before this change.
    text = re.sub(r'(?<!"src"\), )str\((\w+) / "gen"\)', r'str(\1 / "src"), str(\1 / "gen")', text)
    text = _EXACT.sub(lambda m: f"{m.group(1)}{m.group(2)}{MOVED[m.group(3)]}{m.group(2)}", text)
    text = re.sub(r"(?m)(#.*?)(?<![\w.])import spark_connector\b", r"\1import popmq.spark", text)
    # Code that bound an old package with `import x.y` (now `import popmq.x.y`) refers to it
    # as `x.y`; elsewhere a bare `proxy.` may be a variable, so code is left alone.
    code_refs = {
        old
        for old in MOVED
        if re.search(rf"(?m)^[ \t]*import[ \t]+{re.escape(MOVED[old])}(\.\w+)*[ \t]*$", text)
        and (old == "spark_connector" or re.search(rf"import[ \t]+popmq\.{old}\.", text))
    }
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return text
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    edits: list[tuple[int, int, str]] = []
    for tok in tokens:
        start = offsets[tok.start[0] - 1] + tok.start[1]
        end = offsets[tok.end[0] - 1] + tok.end[1]
        if tok.type in (tokenize.STRING, tokenize.COMMENT):
            new = rewrite_dotted(tok.string)
            if new != tok.string:
                edits.append((start, end, new))
        elif tok.type == tokenize.NAME and tok.string in code_refs:
            before = text[start - 1] if start else ""
            line = tok.line.lstrip()
            attribute = re.match(r"\.(\w+)", text[end:])
            if (
                before != "."
                and attribute
                and (tok.string == "spark_connector" or _is_submodule(tok.string, attribute[1]))
                and not line.startswith(("import ", "from "))
            ):
                edits.append((start, end, MOVED[tok.string]))
    for start, end, new in reversed(edits):
        text = text[:start] + new + text[end:]
    return text


_FENCE = re.compile(r"(?ms)^([ \t]*)(```|~~~)([^\n]*)\n(.*?)^\1\2[ \t]*$")


_IMPORT_SPARK = re.compile(r"(?<![\w.])import spark_connector\b")
_INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


def rewrite_markdown(text: str) -> str:
    """Imports and `-m` anywhere; module names in inline code; fenced Python as code."""
    text = rewrite_imports(text)
    text = rewrite_module_strings(text)
    text = _IMPORT_SPARK.sub("import popmq.spark", text)

    def inline(m: re.Match[str]) -> str:
        code = m.group(1)
        code = "popmq.spark" if code == "spark_connector" else rewrite_dotted(code)
        return f"`{code}`"

    text = _INLINE_CODE.sub(inline, text)

    def block(m: re.Match[str]) -> str:
        lang = m.group(3).strip().lower()
        body = m.group(4)
        if lang in ("python", "py", "pycon", "python3"):
            body = rewrite_python(body)
        return m.group(0)[: m.start(4) - m.start(0)] + body + m.group(0)[m.end(4) - m.start(0) :]

    return _FENCE.sub(block, text)


# --- pyproject.toml ------------------------------------------------------------------------------

_SETUPTOOLS = """\
[tool.setuptools]
# One import package, popmq. src/popmq holds its __init__.py and links to the top-level
# folders (sdk -> popmq.sdk, spark_connector -> popmq.spark, gen -> popmq._gen, ...), so an
# editable install is a plain path entry and type checkers see a normal src layout.
# Nothing named popmq sits at the root: Spark workers put the working directory on sys.path.

[tool.setuptools.packages.find]
where = ["src"]
include = ["popmq", "popmq.*"]

[tool.setuptools.package-data]
"popmq" = ["py.typed"]
"popmq._gen.popmq" = ["descriptors.binpb"]

"""


def rewrite_pyproject(text: str) -> str:
    text = re.sub(r'(?m)^popmq = "cli\.main:main"$', 'popmq = "popmq.cli.main:main"', text)
    text = re.sub(r"(?ms)^\[tool\.setuptools\]\n.*?(?=^\[(?!tool\.setuptools))", _SETUPTOOLS, text)
    text = re.sub(r"(?m)^known-first-party = \[.*\]$", 'known-first-party = ["popmq"]', text)
    text = re.sub(r'(?m)^packages = \["bench", .*\]$', 'packages = ["bench", "popmq"]', text)
    text = re.sub(r'(?m)^mypy_path = "gen"$', 'mypy_path = "src"', text)
    text = re.sub(r'(?m)^exclude = \["\^gen/"\]$', 'exclude = ["^gen/", "/_gen/"]', text)
    text = text.replace('module = ["apache.*", "popmq.*"]', 'module = ["popmq._gen.*"]')
    if '"build==' not in text:
        text = re.sub(
            r"(?m)^(test = \[\n)",
            '\\1  # Builds the wheel and the sdist in tests/packaging.\n  "build==1.6.1",\n',
            text,
        )
    # mypy override module names and other strings naming modules
    return _DOTTED_TOML.sub(
        lambda m: (
            f'"{MOVED[m.group(1)]}.{m.group(2)}'
            if _is_submodule(m.group(1), m.group(2).split(".")[0])
            else m.group(0)
        ),
        text,
    )


_DOTTED_TOML = re.compile(rf'"({_OLD})\.([\w.]+)')


# --- src/popmq ------------------------------------------------------------------------------------


def popmq_init(names: list[str]) -> str:
    imports = "".join(
        f"    from popmq.sdk import {n} as {n}\n" for n in sorted(names, key=str.lower)
    )
    listed = "".join(f'    "{n}",\n' for n in sorted(names))
    return f'''"""popmq: a RocketMQ-5-style messaging system.

`from popmq import Producer, SimpleConsumer, Message, ...` is the client SDK (popmq.sdk).
The server is popmq.proxy (gRPC) over popmq.broker_core (storage and POP semantics), the
Spark data source is popmq.spark, the command line is popmq.cli (`popmq`).

The SDK's names are imported on first use, so `import popmq.broker_core` loads neither the
SDK nor gRPC. Generated protobuf code lives in the private popmq._gen.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
{imports}
__all__ = [
{listed}]


def __getattr__(name: str) -> Any:
    if name in __all__:
        value = getattr(importlib.import_module("popmq.sdk"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'popmq' has no attribute {{name!r}}")


def __dir__() -> list[str]:
    return sorted({{*globals(), *__all__}})
'''


def write_src(names: list[str], changed: list[Path], check: bool) -> None:
    package = ROOT / "src" / "popmq"
    wanted = {package / "__init__.py": popmq_init(names), package / "py.typed": ""}
    for path, content in wanted.items():
        if not path.is_file() or path.read_text() != content:
            changed.append(path)
            if not check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content)
    for name, target in LINKS.items():
        link = package / name
        relative = Path("..") / ".." / target
        if link.is_symlink() and Path(os.readlink(link)) == relative:
            continue
        changed.append(link)
        if not check:
            if link.is_symlink():
                link.unlink()
            link.symlink_to(relative, target_is_directory=True)


# --- edits no rule covers (applied where the old text is still there) -------------------------

EDITS: dict[str, list[tuple[str, str]]] = {
    "proxy/descriptors.py": [
        ('resources.files("popmq")', 'resources.files("popmq._gen.popmq")'),
        ("as package data of `popmq`.", "as package data of `popmq._gen.popmq`."),
        ("inside the `popmq` package (gen/popmq/)", "inside `popmq._gen.popmq` (gen/popmq/)"),
    ],
    # apache.rocketmq.v2 is loaded into popmq's private descriptor pool (tools/gen_protos.py):
    # its messages take that pool's Timestamp and Duration, and reflection looks there too.
    "proxy/rocketmq/convert.py": [
        ("import zlib\n\n", "import zlib\nfrom typing import cast\n\n"),
        (
            "\nfrom popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb\n",
            "\nfrom popmq._gen import _pool\n"
            "from popmq._gen.apache.rocketmq.v2 import definition_pb2 as pb\n",
        ),
        (
            '_CONTROL = re.compile(r"[\\x00-\\x1f\\x7f]")\n',
            '_CONTROL = re.compile(r"[\\x00-\\x1f\\x7f]")\n\n'
            "# apache.rocketmq.v2 lives in popmq's private descriptor pool (popmq._gen._pool), so\n"
            "# its messages take that pool's Timestamp and Duration, not google.protobuf's.\n"
            "_TIMESTAMP = cast(\n"
            '    "type[timestamp_pb2.Timestamp]", _pool.well_known("google.protobuf.Timestamp")\n'
            ")\n"
            '_DURATION = cast("type[duration_pb2.Duration]", '
            '_pool.well_known("google.protobuf.Duration"))\n',
        ),
        ("return timestamp_pb2.Timestamp(seconds=", "return _TIMESTAMP(seconds="),
        ("return duration_pb2.Duration(seconds=", "return _DURATION(seconds="),
    ],
    "proxy/health.py": [
        (
            "from popmq.proxy.descriptors import source_code_info\n",
            "from popmq._gen import _pool\nfrom popmq.proxy.descriptors import source_code_info\n",
        ),
        (
            "Files are still\n    looked up in the descriptor pool, so",
            "Files are still\n    looked up in the descriptor pools (the default one, then popmq's "
            "private one\n    with apache.rocketmq.v2), so",
        ),
        (
            "_find(self._pool.FindFileByName, filename)",
            "_find(filename, self._pool.FindFileByName, _pool.POOL.FindFileByName)",
        ),
        (
            "_find(self._pool.FindFileContainingSymbol, fully_qualified_name)",
            "_find(\n            fully_qualified_name,\n"
            "            self._pool.FindFileContainingSymbol,\n"
            "            _pool.POOL.FindFileContainingSymbol,\n        )",
        ),
        (
            "def _find(\n    lookup: Callable[[str], descriptor.FileDescriptor], name: str\n"
            ") -> descriptor.FileDescriptor | None:\n"
            "    try:\n        return lookup(name)\n"
            "    except KeyError:  # the base class answers NOT_FOUND\n        return None\n",
            "def _find(\n    name: str, *lookups: Callable[[str], descriptor.FileDescriptor]\n"
            ") -> descriptor.FileDescriptor | None:\n"
            "    for lookup in lookups:\n        try:\n            return lookup(name)\n"
            "        except KeyError:\n            continue\n"
            "    return None  # the base class answers NOT_FOUND\n",
        ),
    ],
    "tests/compat/conftest.py": [
        (
            "The official client runs in a subprocess (rmq_runner.py): it registers the "
            "apache.rocketmq.v2\nschema in protobuf's default pool, where this process keeps "
            "popmq's generated copy.\n",
            "The official client runs in a subprocess (rmq_runner.py): it keeps its threads, logs "
            "and exit\ncodes out of pytest. The two apache.rocketmq.v2 copies could share a "
            "process: popmq keeps its\nown in a private descriptor pool "
            "(tests/unit/test_packaging.py).\n",
        ),
    ],
    "docs/spark.md": [
        (
            "They need `popmq.spark`, `sdk` and the generated\n`popmq` protos importable, plus "
            "`pyarrow`. Set `PYSPARK_PYTHON` to an interpreter that has\n",
            "They need the `popmq` package (installed, or\nthis repository's editable install) "
            "and `pyarrow`. Set `PYSPARK_PYTHON` to an interpreter that\nhas ",
        ),
    ],
    "docs/compatibility.md": [
        (
            "\n## How it is built\n",
            """
The official Python client and popmq's SDK or server can be imported by one process. Both
carry generated code for `apache.rocketmq.v2`, and the two copies differ (options, newer
fields), so in protobuf's one default descriptor pool the second import failed with
`TypeError: duplicate symbol 'apache.rocketmq.v2.TransactionResolution'`. popmq's copy lives
in `popmq._gen` and loads into a private pool (`popmq._gen._pool`, written by
tools/gen_protos.py); the official client keeps the default pool. Messages from one copy are
not instances of the other's classes: cross between them with `SerializeToString` and
`FromString`. popmq's v2 messages take well-known types (Timestamp, Duration) of the private
pool too, which `proxy/rocketmq/convert.py` builds. tests/unit/test_packaging.py imports both
in one process, in both orders.

## How it is built
""",
        ),
    ],
    "README.md": [
        (
            "install everything the project needs (`make setup`). `make check` also runs the "
            "formatter,\nthe linter, mypy, `buf lint` and the generated-code check.\n",
            "install everything the project needs (`make setup`). `make check` also runs the "
            "formatter,\nthe linter, mypy, `buf lint` and the generated-code check.\n"
            """
`make setup` installs popmq into `.venv` in editable mode (`pip install -e
'.[spark,test,dev,bench]'`) and, with apt (as root or with passwordless sudo; best effort),
the benchmark peers `redis-server` and `nats-server`. Spark (`popmq.spark`, `make example`,
tests/spark) needs Java 17 or newer, which `make setup` does not install: `apt-get install
default-jre-headless`.

The `popmq` command is `.venv/bin/popmq`: activate the venv (`. .venv/bin/activate`) to have
it on PATH, or install it for your user with `pipx install .`. An application adds the SDK
with `pip install /path/to/popmq` (or the wheel from `python -m build`). Everything installs
under the one import package `popmq`, and nothing else: `from popmq import Producer`,
`popmq.spark`, `python -m popmq.cli`.
""",
        ),
        (
            "protos/            .proto sources (buf-linted); generated code lives in gen/\n",
            "src/popmq/         the import package: __init__.py (the SDK's names) and links to "
            "the\n"
            "                   folders below (spark_connector/ is popmq.spark, gen/ popmq._gen)\n"
            "protos/            .proto sources (buf-linted); generated code lives in gen/\n",
        ),
    ],
    # Lines the longer names pushed past 100 characters (ruff E501), rewrapped.
    "tests/unit/test_sdk_producer_validation.py": [
        (
            "through ``popmq.sdk._validation`` and ``popmq.broker_core.validation``;\n"
            "both must refuse it with the same message (and both must accept the good inputs). "
            "The SDK\ndoes not import broker_core; only this test puts the two side by side.",
            "through ``popmq.sdk._validation`` and\n``popmq.broker_core.validation``; both must "
            "refuse it with the same message (and both must\naccept the good inputs). The SDK "
            "does not import broker_core; only this test puts the two\nside by side.",
        ),
    ],
    "tests/unit/test_descriptors.py": [
        (
            "# The generated modules load the served files into the default pool.\n",
            "# The generated modules load the served files: popmq.v1 into the default pool,\n"
            "# apache.rocketmq.v2 into popmq's private one.\n",
        ),
        ("\nfrom popmq._gen.apache", "\nfrom popmq._gen import _pool\nfrom popmq._gen.apache"),
        (
            "        pool.FindFileByName(name).CopyToProto(loaded)\n",
            '        owner = _pool.POOL if name.startswith("apache/") else pool\n'
            "        owner.FindFileByName(name).CopyToProto(loaded)\n",
        ),
    ],
}
"""File -> (old, new) replacements: code that names the generated package by a bare string."""


def _squeeze(text: str) -> str:
    """Text without whitespace: an edit already applied (and since reformatted) is found."""
    return re.sub(r"\s+", "", text)


def apply_edits(changed: list[Path], check: bool) -> None:
    for name, edits in EDITS.items():
        path = ROOT / name
        if not path.is_file():
            print(f"warning: {name} not found; apply its edits by hand: {edits}", file=sys.stderr)
            continue
        old = path.read_text()
        new = old
        for before, after in edits:
            if before not in new and _squeeze(after) not in _squeeze(new):
                print(f"warning: {name}: apply by hand: {after!r}", file=sys.stderr)
            rewrap = _squeeze(before) == _squeeze(after)
            if before in new and (rewrap or _squeeze(after) not in _squeeze(new)):
                new = new.replace(before, after)
        if new != old:
            changed.append(path)
            if not check:
                path.write_text(new)


# --- driver ---------------------------------------------------------------------------------------


def hand_written(suffixes: tuple[str, ...]) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for filename in sorted(filenames):
            path = Path(dirpath) / filename
            if path.suffix in suffixes and path.resolve() != SELF:
                found.append(path)
    return found


def main(argv: list[str]) -> int:
    check = "--check" in argv
    if not (ROOT / "sdk" / "__init__.py").is_file() or not (ROOT / "pyproject.toml").is_file():
        raise SystemExit("run from the repository root: python tools/repackage.py")
    names = sdk_public_names()
    PUBLIC.update(names)
    changed: list[Path] = []
    for path in hand_written((".py", ".md")):
        old = path.read_text()
        new = rewrite_markdown(old) if path.suffix == ".md" else rewrite_python(old)
        if new != old:
            changed.append(path)
            if not check:
                path.write_text(new)
    for path, rule in (
        (ROOT / "pyproject.toml", rewrite_pyproject),
        (ROOT / "Makefile", rewrite_module_strings),
        *((p, rewrite_module_strings) for p in sorted((ROOT / "tools").glob("*.sh"))),
    ):
        if path.is_file():
            old = path.read_text()
            new = rule(old)
            if new != old:
                changed.append(path)
                if not check:
                    path.write_text(new)
    apply_edits(changed, check)
    write_src(names, changed, check)
    for path in changed:
        print(path.relative_to(ROOT))
    if check:
        return 1 if changed else 0
    py_changed = [str(p) for p in changed if p.suffix == ".py" and p.is_file()]
    if py_changed:  # imports re-sorted and re-wrapped the way `make fmt` would
        for args in (["check", "--select", "I", "--fix", "--quiet"], ["format", "--quiet"]):
            subprocess.run([sys.executable, "-m", "ruff", *args, *py_changed], check=False)
        # Longer names can push docstrings and comments past the line length: rewrap by hand.
        subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--select", "E501", "--quiet", *py_changed],
            check=False,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
